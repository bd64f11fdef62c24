import Configuration
import Dispatch
import Domain
import Foundation
import Kafka
import Runtime
import Synchronization

public struct SignerWorkerConfig: Sendable {
    public var kafka: KafkaConfig
    public var groupId = "storeledger-signer"
    public var maxBatch = 500
    public var pollTimeout: Duration = .milliseconds(100)
    /// Attempts and backoff of the consumer loop (the `Setting.loop…` settings); the backoff is capped at 1 s.
    public var loopPolicy = ConsumerLoopMachine.Policy()
    /// The signer opens no socket, so metrics go to a file in Prometheus text format (for
    /// node_exporter's textfile collector or a sidecar), rewritten atomically.
    public var metricsFile: String?
    public var metricsInterval: Duration = .seconds(5)

    public init(kafka: KafkaConfig) {
        self.kafka = kafka
    }

    /// Request/reply is latency-bound: send replies at once.
    var producerKafka: KafkaConfig {
        var kafka = self.kafka
        kafka.linger = .milliseconds(0)
        kafka.deliveryTimeout = min(kafka.deliveryTimeout, .seconds(5))
        // Small records on an idle connection: Nagle + delayed ACK would add up to 40 ms.
        kafka.extra = ["socket.nagle.disable": "true"].merging(kafka.extra) { _, given in given }
        return kafka
    }

    /// ... and let an idle fetch return within 2 ms instead of the default 500 ms (the embedded
    /// broker holds an empty fetch for the whole wait even when data arrives meanwhile).
    var consumerKafka: KafkaConfig {
        var kafka = self.kafka
        kafka.extra = ["fetch.wait.max.ms": "2", "fetch.error.backoff.ms": "5", "socket.nagle.disable": "true"].merging(kafka.extra) { _, given in given }
        return kafka
    }
}

/// The signing worker: consumes sign requests, answers each on the reply topic, and holds the only
/// copy of the keys. It opens no listening socket (Kafka clients only connect out), so the key can
/// only be reached through the request topic, and only to sign.
///
/// Requests past their deadline are dropped (the requester has already answered 504) and counted.
/// Runs on the one consumer loop: offsets are committed per batch after its replies are
/// acknowledged; a request redelivered after a crash is signed again with a new nonce or, usually,
/// dropped as expired.
public final class SignerWorker: Service {
    public let name = "signer"
    private let status = ConsumerLoopStatus()
    private let signer: OfferSigner
    private let config: SignerWorkerConfig
    private let clock: @Sendable () -> Int64
    private let logger = Logger(component: "signer")

    public init(signer: OfferSigner, config: SignerWorkerConfig, clock: @escaping @Sendable () -> Int64 = currentTimeMs) {
        self.signer = signer
        self.config = config
        self.clock = clock
    }

    public var isReady: Bool { status.isReady }
    public var readinessReason: String { status.reason }

    /// Runs on the one consumer loop until `stop`; returns the exit code (non-zero after a critical failure).
    @discardableResult
    public func run(until stop: StopSignal) throws -> Int32 {
        var loopConfig = ConsumerLoop.Config(name: "signer", groupId: config.groupId, topics: [Topic.signRequests],
                                             deadLetterTopic: Topic.deadLetter, kafka: config.consumerKafka)
        loopConfig.producerKafka = config.producerKafka
        loopConfig.outputTopics = [Topic.signReplies]
        loopConfig.policy = config.loopPolicy
        loopConfig.policy.maxBatch = config.maxBatch
        loopConfig.policy.pollTimeout = config.pollTimeout
        // A request is worth nothing after its deadline (seconds): do not wait long to retry one.
        loopConfig.policy.maxBackoff = min(config.loopPolicy.maxBackoff, .seconds(1))
        loopConfig.policy.baseBackoff = min(config.loopPolicy.baseBackoff, loopConfig.policy.maxBackoff)
        loopConfig.produceTimeout = .seconds(5)
        let loop = ConsumerLoop(config: loopConfig, status: status)
        defer { writeMetrics() }
        logger.info("signer_started", ["keys": .string(signer.keys.keys.keys.sorted().joined(separator: ",")),
                                       "default_key": .string(signer.keys.defaultKeyId)])
        var lastMetrics = ContinuousClock.now
        let code = try loop.run(SignerWork(worker: self), until: stop) {
            if ContinuousClock.now - lastMetrics >= config.metricsInterval {
                writeMetrics()
                lastMetrics = ContinuousClock.now
            }
        }
        logger.info("signer_stopped")
        return code
    }

    /// Decodes and answers a batch; signing runs on all cores for large batches.
    func answer(_ records: [KafkaRecord]) -> [SignReply] {
        let slots = Mutex<[SignReply?]>(Array(repeating: nil, count: records.count))
        let work = { @Sendable (index: Int) in
            let reply = self.answer(records[index])
            slots.withLock { $0[index] = reply }
        }
        if records.count >= 16 {
            DispatchQueue.concurrentPerform(iterations: records.count, execute: work)
        } else {
            for index in records.indices { work(index) }
        }
        return slots.withLock { $0.compactMap { $0 } }
    }

    /// nil when the request is dropped (undecodable, or past its deadline).
    func answer(_ record: KafkaRecord) -> SignReply? {
        guard record.value.count <= SignRequest.maxRecordBytes,
              let request = try? JSONDecoder().decode(SignRequest.self, from: Data(record.value)) else {
            count("invalid")
            logger.warning("request_invalid", ["position": .string("\(record.topic)/\(record.partition)@\(record.offset)")])
            return nil
        }
        guard clock() <= request.deadlineMs else {
            count("expired")
            return nil
        }
        let started = ContinuousClock.now
        let reply = signer.answer(request)
        count(reply.status == .signed ? "signed" : "refused", kind: request.kind.rawValue)
        Metrics.shared.increment("storeledger_signer_sign_seconds_sum", by: (ContinuousClock.now - started).secondsDouble)
        if reply.status == .refused {
            logger.info("request_refused", ["kind": .string(request.kind.rawValue), "reason": .string(reply.reason ?? "")])
        }
        return reply
    }

    /// The reply records for a batch (the loop publishes them and waits for the acknowledgements).
    /// App Store Server API token requests share the topics with sign requests (kind "api-token").
    func replies(_ records: [KafkaRecord]) -> [OutgoingRecord] {
        let encoder = JSONEncoder()
        func reply(_ correlationId: String, _ value: some Encodable) -> OutgoingRecord? {
            guard let bytes = try? encoder.encode(value) else { return nil }
            return OutgoingRecord(topic: Topic.signReplies, key: Array(correlationId.utf8), value: [UInt8](bytes))
        }
        var signRequests: [KafkaRecord] = []
        var outputs: [OutgoingRecord] = []
        for record in records {
            if let request = apiTokenRequest(record) {
                let answer = answerAPIToken(request)
                count(answer.status == .issued ? "signed" : "refused", kind: APITokenRequest.kindValue)
                outputs += reply(answer.correlationId, answer).map { [$0] } ?? []
            } else {
                signRequests.append(record)
            }
        }
        return outputs + answer(signRequests).compactMap { reply($0.correlationId, $0) }
    }

    /// A token request, told apart from sign requests without decoding every sign request twice.
    private func apiTokenRequest(_ record: KafkaRecord) -> APITokenRequest? {
        guard record.value.count <= 8192, String(decoding: record.value, as: UTF8.self).contains(APITokenRequest.kindValue),
              let request = try? JSONDecoder().decode(APITokenRequest.self, from: Data(record.value)),
              request.kind == APITokenRequest.kindValue else { return nil }
        return request
    }

    private func answerAPIToken(_ request: APITokenRequest) -> APITokenReply {
        guard let issuerId = signer.issuerId, !issuerId.isEmpty else {
            return APITokenReply(correlationId: request.correlationId, status: .refused,
                                 reason: "API tokens need the App Store Connect issuer id (\(Setting.signingIssuerId))")
        }
        let clock = self.clock
        return APITokenIssuer(keys: signer.keys, issuerId: issuerId, clock: { clock() / 1000 }).answer(request)
    }

    private func count(_ outcome: String, kind: String? = nil) {
        var labels = ["outcome": outcome]
        if let kind { labels["kind"] = kind }
        Metrics.shared.increment("storeledger_signer_requests_total", labels)
    }

    private func writeMetrics() {
        let stats = signer.nonces.stats
        Metrics.shared.set("storeledger_signer_nonces_remembered", to: Double(stats.nonces))
        Metrics.shared.set("storeledger_signer_nonce_registry_bytes", to: Double(stats.bytes))
        guard let path = config.metricsFile else { return }
        let temporary = path + ".tmp"
        do {
            try Data(Metrics.shared.exposition().utf8).write(to: URL(fileURLWithPath: temporary))
            // rename(2) replaces atomically: a reader never sees a half-written file.
            guard rename(temporary, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        } catch {
            logger.warning("metrics_write_failed", ["path": .string(path), "error": .string("\(error)")])
        }
    }
}

/// The signer's unit of work on the loop: answer a batch. Invalid and expired requests get no
/// reply (counted); nothing is stored, so there is no transaction.
private final class SignerWork: ConsumerLoopWork {
    let worker: SignerWorker
    init(worker: SignerWorker) { self.worker = worker }

    func process(_ records: [KafkaRecord]) throws -> [OutgoingRecord] { worker.replies(records) }

    func classify(_ error: any Error) -> ConsumerLoopMachine.Failure {
        guard let kafka = error as? KafkaError else { return .retryable(String(describing: error)) }
        // A reply the broker will never take must not hold the requests behind it: dead-letter it.
        if kafka.isMessageTooLarge { return .permanent(kind: "output_too_large", reason: kafka.description) }
        switch kafka.kind {
        case .fatal, .closed, .configuration: return .critical(kafka.description)
        default: return .infrastructure(kafka.description)
        }
    }
}
