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
