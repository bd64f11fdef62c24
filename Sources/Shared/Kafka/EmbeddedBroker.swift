import CRdKafka
import Synchronization

/// An in-process Kafka cluster: librdkafka's mock cluster, listening on real 127.0.0.1 TCP
/// ports, so producers, consumer groups and `kcat` in other processes can use it too.
///
/// Memory only, and each partition keeps at most 5 MiB or 100,000 message sets (older data is
/// dropped silently): for development, demos, tests and benchmarks; production uses real Kafka.
public final class EmbeddedBroker: Sendable {
    /// What clients should use as `bootstrap.servers`: the forwarder's `127.0.0.1:port` when a
    /// port was requested, else the mock brokers' own addresses.
    public let bootstrapServers: String
    /// The mock brokers' own listeners, as advertised in metadata (random ports).
    public let brokerAddresses: String
    public let brokerCount: Int
    private let cluster: MockCluster
    private let forwarder: LoopbackForwarder?

    /// - Parameter port: the mock cluster cannot choose its listen ports (rdkafka_mock.h has no
    ///   such option; each broker binds an ephemeral port). When `port` is given, a loopback
    ///   TCP forwarder listens on `127.0.0.1:port` and relays to broker 1, and that address is
    ///   reported as `bootstrapServers`. Only the bootstrap connection goes through it: clients
    ///   then follow metadata to the brokers' real ports, which are on loopback as well. Pass 0
    ///   for any free port.
    public init(brokers: Int = 1, port: Int? = nil) throws(KafkaError) {
        guard brokers >= 1 else { throw KafkaError(.configuration, "an embedded cluster needs at least one broker") }
        cluster = try MockCluster(brokers: brokers)
        brokerCount = brokers
        brokerAddresses = cluster.bootstraps
        if let port {
            guard let first = brokerAddresses.split(separator: ",").first,
                  let colon = first.lastIndex(of: ":"), let targetPort = UInt16(first[first.index(after: colon)...]) else {
                throw KafkaError(.other, "unexpected mock bootstrap list \(brokerAddresses)")
            }
            let relay = try LoopbackForwarder(port: port, targetHost: String(first[..<colon]), targetPort: targetPort)
            forwarder = relay
            bootstrapServers = "127.0.0.1:\(relay.port)"
        } else {
            forwarder = nil
            bootstrapServers = brokerAddresses
        }
    }

    deinit { close() }

    /// Creates a topic through the mock's own call (the Kafka CreateTopics API does not work on
    /// the mock: it has no controller).
    public func createTopic(_ name: String, partitions: Int32, replicationFactor: Int32 = 1) throws(KafkaError) {
        try cluster.call("create topic \(name)") { rd_kafka_mock_topic_create($0, name, partitions, replicationFactor) }
    }

    /// Fault injection: disconnects broker `id` (1-based; -1 for all) and refuses new
    /// connections, without moving partition leadership.
    public func setBrokerDown(_ id: Int32) throws(KafkaError) {
        try cluster.call("set broker \(id) down") { rd_kafka_mock_broker_set_down($0, id) }
    }

    public func setBrokerUp(_ id: Int32) throws(KafkaError) {
        try cluster.call("set broker \(id) up") { rd_kafka_mock_broker_set_up($0, id) }
    }

    /// Fault injection: adds `milliseconds` to every reply of broker `id` (-1 for all; 0 removes it).
    public func setRoundTripTime(_ id: Int32, milliseconds: Int32) throws(KafkaError) {
        try cluster.call("set broker \(id) rtt") { rd_kafka_mock_broker_set_rtt($0, id, milliseconds) }
    }

    /// Fault injection: the next `errors.count` requests of `api` (to any broker) fail with these
    /// errors, in order, before requests of that kind are served normally again.
    public func pushRequestErrors(_ api: KafkaRequestKind, _ errors: [KafkaInjectedError]) throws(KafkaError) {
        guard !errors.isEmpty else { return }
        let codes = errors.map { rd_kafka_resp_err_t($0.rawValue) }
        try cluster.call("push \(errors.count) \(api) errors") { mock in
            codes.withUnsafeBufferPointer { rd_kafka_mock_push_request_errors_array(mock, api.rawValue, codes.count, $0.baseAddress) }
            return RD_KAFKA_RESP_ERR_NO_ERROR
        }
    }

    /// Drops request errors still queued for `api`.
    public func clearRequestErrors(_ api: KafkaRequestKind) throws(KafkaError) {
        try cluster.call("clear \(api) errors") { mock in
            rd_kafka_mock_clear_request_errors(mock, api.rawValue)
            return RD_KAFKA_RESP_ERR_NO_ERROR
        }
    }

    /// Stops the forwarder and the brokers; connected clients see the cluster vanish.
    /// Idempotent; `deinit` calls it.
    public func close() {
        forwarder?.stop()
        cluster.destroy()
    }
}

/// Owns the mock cluster and the `rd_kafka_t` it needs for bookkeeping. The cluster is destroyed
/// before that handle (it holds the handle strongly).
private final class MockCluster: Sendable {
    private let host: RdKafkaClient
    /// nil once destroyed. The lock also serialises mock calls against `destroy`.
    private let cluster: Mutex<MockClusterPointer?>
    let bootstraps: String

    // @unchecked: an immutable pointer to the mock cluster, which takes every command through its
    // own thread's queue (thread-safe); it is only used under MockCluster's Mutex.
    private struct MockClusterPointer: @unchecked Sendable { let raw: OpaquePointer }

    init(brokers: Int) throws(KafkaError) {
        // The mock's bookkeeping handle never connects anywhere; it only needs to exist.
        host = try RdKafkaClient(RD_KAFKA_PRODUCER, properties: ["client.id": "storeledger-embedded-broker",
                                                                 "message.max.bytes": String(KafkaLimits.messageMaxBytes)])
        guard let raw = rd_kafka_mock_cluster_new(host.pointer, Int32(brokers)) else {
            throw KafkaError(.other, "rd_kafka_mock_cluster_new failed (see librdkafka log)")
        }
        cluster = Mutex(MockClusterPointer(raw: raw))
        bootstraps = String(cString: rd_kafka_mock_cluster_bootstraps(raw))
    }

    deinit { destroy() }

    func call(_ what: String, _ body: (OpaquePointer) -> rd_kafka_resp_err_t) throws(KafkaError) {
        let error: rd_kafka_resp_err_t? = cluster.withLock { pointer in pointer.map { body($0.raw) } }
        guard let error else { throw KafkaError(.closed, "\(what): embedded broker is closed") }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, what) }
    }

    func destroy() {
        cluster.withLock { pointer in
            if let raw = pointer?.raw { rd_kafka_mock_cluster_destroy(raw) }
            pointer = nil
        }
    }
}

/// Kafka protocol requests the fault API can fail (their ApiKey).
public enum KafkaRequestKind: Int16, Sendable, CaseIterable, CustomStringConvertible {
    case produce = 0
    case fetch = 1
    case listOffsets = 2
    case metadata = 3
    case offsetCommit = 8
    case offsetFetch = 9
    case findCoordinator = 10
    case joinGroup = 11
    case heartbeat = 12
    case syncGroup = 14
    case initProducerId = 22

    /// As Kafka names the request (`Produce`, `OffsetCommit`, ...), for the control channel.
    public var description: String {
        switch self {
        case .produce: "Produce"
        case .fetch: "Fetch"
        case .listOffsets: "ListOffsets"
        case .metadata: "Metadata"
        case .offsetCommit: "OffsetCommit"
        case .offsetFetch: "OffsetFetch"
        case .findCoordinator: "FindCoordinator"
        case .joinGroup: "JoinGroup"
        case .heartbeat: "Heartbeat"
        case .syncGroup: "SyncGroup"
        case .initProducerId: "InitProducerId"
        }
    }

    public init?(name: String) {
        guard let kind = KafkaRequestKind.allCases.first(where: { $0.description.lowercased() == name.lowercased() }) else { return nil }
        self = kind
    }
}

/// Broker error codes worth injecting: the retriable ones a client must ride out, and the
/// group errors that force a rejoin.
public enum KafkaInjectedError: Int32, Sendable, CaseIterable, CustomStringConvertible {
    case notLeaderForPartition = 6
    case requestTimedOut = 7
    case networkException = 13
    case coordinatorLoadInProgress = 14
    case coordinatorNotAvailable = 15
    case notCoordinator = 16
    case notEnoughReplicas = 19
    case illegalGeneration = 22
    case unknownMemberId = 25
    case rebalanceInProgress = 27

    public var description: String {
        switch self {
        case .notLeaderForPartition: "NOT_LEADER_FOR_PARTITION"
        case .requestTimedOut: "REQUEST_TIMED_OUT"
        case .networkException: "NETWORK_EXCEPTION"
        case .coordinatorLoadInProgress: "COORDINATOR_LOAD_IN_PROGRESS"
        case .coordinatorNotAvailable: "COORDINATOR_NOT_AVAILABLE"
        case .notCoordinator: "NOT_COORDINATOR"
        case .notEnoughReplicas: "NOT_ENOUGH_REPLICAS"
        case .illegalGeneration: "ILLEGAL_GENERATION"
        case .unknownMemberId: "UNKNOWN_MEMBER_ID"
        case .rebalanceInProgress: "REBALANCE_IN_PROGRESS"
        }
    }

    public init?(name: String) {
        guard let error = KafkaInjectedError.allCases.first(where: { $0.description == name.uppercased() }) else { return nil }
        self = error
    }
}
