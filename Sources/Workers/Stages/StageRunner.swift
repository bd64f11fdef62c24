import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Synchronization

/// A record a stage wants written, keyed by subscription after decode.
public struct OutputRecord: Sendable {
    public var topic: String
    public var key: String
    public var value: [UInt8]
    public var headers: [KafkaHeader]

    public init(topic: String, key: String, value: [UInt8], headers: [KafkaHeader] = []) {
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
    }
}

/// The pure-ish heart of one stage: given a poll's worth of records (in partition order) and, for
/// stages with state, a PostgreSQL connection inside the batch's transaction, say what to emit.
/// Expected failures of single records are returned as dead letters; thrown errors mean
/// infrastructure trouble and make the runner retry the whole batch.
public protocol StageLogic {
    var name: String { get }
    var inputTopics: [String] { get }
    var usesDatabase: Bool { get }
    func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult
}

public struct StageBatchResult: Sendable {
    public var outputs: [OutputRecord] = []
    public var deadLetters: [DeadLetter] = []
    public init(outputs: [OutputRecord] = [], deadLetters: [DeadLetter] = []) {
        self.outputs = outputs
        self.deadLetters = deadLetters
    }
}

public struct StageRunnerConfig: Sendable {
    public var kafka: KafkaConfig
    public var databaseURL: String?
    public var groupId: String
    public var maxBatch: Int = 500
    public var pollTimeout: Duration = .milliseconds(200)
    public var produceTimeout: Duration = .seconds(30)
    public var maxBackoff: Duration = .seconds(10)

    public init(kafka: KafkaConfig, databaseURL: String?, groupId: String) {
        self.kafka = kafka
        self.databaseURL = databaseURL
        self.groupId = groupId
    }
}

/// Runs a stage as a consumer-group member: poll → process (one PostgreSQL transaction per batch)
/// → produce outputs and dead letters, wait for the broker's acks → commit PostgreSQL → commit
/// offsets. A crash anywhere before the offset commit redelivers the batch, which every stage
/// handles idempotently (ARCHITECTURE.md principles).
public final class StageRunner {
    private let logic: any StageLogic
    private let config: StageRunnerConfig
    private let logger: Logger
    private let metrics = Metrics.shared

    public init(logic: any StageLogic, config: StageRunnerConfig) {
        self.logic = logic
        self.config = config
        self.logger = Logger(component: "stage.\(logic.name)")
    }

    public func run(until stop: StopSignal) throws {
        let consumer = try KafkaConsumer(config: config.kafka, groupId: config.groupId, topics: logic.inputTopics)
        let producer = try KafkaProducer(config: config.kafka)
        defer {
            consumer.close()
            producer.close()
        }
        var database: PGConnection?
        // Every topic a stage may write: connecting and fetching metadata now keeps it off the first record.
        producer.warmUp(topics: [Topic.decoded, Topic.unique, Topic.commands, Topic.deadLetter], timeout: .seconds(5))
        logger.info("stage_started", ["group": .string(config.groupId), "topics": .string(logic.inputTopics.joined(separator: ","))])
        var announcedReady = false
        var assignedSince: ContinuousClock.Instant?
        while !stop.isStopped {
            let records = try consumer.poll(maxRecords: config.maxBatch, timeout: config.pollTimeout)
            // After the join the consumer still looks up committed offsets before fetching; librdkafka
            // does not expose when that finished, so allow it half a second.
            if assignedSince == nil, consumer.assignedPartitionCount > 0 { assignedSince = .now }
            if !announcedReady, let since = assignedSince, ContinuousClock.now - since > .milliseconds(500) {
                // Supervisors (storeledger dev, tests) wait for this line before declaring the set ready.
                announcedReady = true
                print("STAGE_READY \(logic.name)")
                fflush(nil)
                logger.info("stage_ready", ["partitions": .of(consumer.assignedPartitionCount)])
            }
            guard !records.isEmpty else { continue }
            var attempt = 0
            while true {
                do {
                    if logic.usesDatabase, database == nil {
                        guard let url = config.databaseURL else { throw StageError.configuration("stage \(logic.name) needs DATABASE_URL") }
                        database = try PGConnection(url: url)
                    }
                    try handle(records, database: database, producer: producer)
                    try consumer.commit(records)
                    break
                } catch {
                    attempt += 1
                    metrics.increment("storeledger_stage_retries_total", ["stage": logic.name])
                    logger.warning("batch_retry", ["attempt": .of(attempt), "error": .string(String(describing: error))])
                    if let pgError = error as? PGError, pgError.kind == .connection { database = nil }
                    let backoff = min(config.maxBackoff.milliseconds, Int64(100) << min(attempt, 10))
                    if stop.wait(timeout: .milliseconds(backoff)) { return }
                }
            }
        }
        logger.info("stage_stopped")
    }

    private func handle(_ records: [KafkaRecord], database: PGConnection?, producer: KafkaProducer) throws {
        func processAndPublish(_ connection: PGConnection?) throws -> StageBatchResult {
            let result = try logic.process(records, database: connection)
            var all = result.outputs
            for letter in result.deadLetters {
                all.append(OutputRecord(topic: Topic.deadLetter, key: letter.source.description,
                                        value: try JSONEncoder.pipeline.encode(letter).bytes))
            }
            try publish(all, producer: producer)
            return result
        }
        let result: StageBatchResult
        if let database {
            result = try database.transaction { try processAndPublish($0) }
        } else {
            result = try processAndPublish(nil)
        }
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "in"], by: Double(records.count))
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "out"], by: Double(result.outputs.count))
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "dead_letter"], by: Double(result.deadLetters.count))
        for letter in result.deadLetters {
            logger.warning("dead_letter", ["kind": .string(letter.errorKind), "error": .string(letter.error),
                                           "source": .string(letter.source.description)])
        }
    }

    /// Sends everything and waits until the broker acknowledged all of it (or fails the batch).
    private func publish(_ outputs: [OutputRecord], producer: KafkaProducer) throws {
        guard !outputs.isEmpty else { return }
        let pending = DispatchGroup()
        let firstError = Mutex<(any Error)?>(nil)
        for output in outputs {
            pending.enter()
            producer.send(topic: output.topic, key: Array(output.key.utf8), value: output.value,
                          headers: output.headers) { result in
                if case .failure(let error) = result { firstError.withLock { $0 = $0 ?? error } }
                pending.leave()
            }
        }
        if pending.wait(timeout: .now() + .nanoseconds(Int(config.produceTimeout.nanoseconds))) == .timedOut {
            throw StageError.produceTimeout
        }
        if let error = firstError.withLock({ $0 }) { throw error }
    }
}

public enum StageError: Error, CustomStringConvertible {
    case configuration(String)
    case produceTimeout

    public var description: String {
        switch self {
        case .configuration(let message): return message
        case .produceTimeout: return "broker did not acknowledge the batch's outputs in time"
        }
    }
}

extension DeadLetter {
    /// A dead letter for `record` failing in `stage`, keeping its original key, bytes and headers.
    public init(stage: String, record: KafkaRecord, failure: PermanentFailure, attempts: Int = 1) {
        self.init(stage: stage, errorKind: failure.kind, error: failure.reason,
                  source: RecordPosition(topic: record.topic, partition: record.partition, offset: record.offset),
                  key: record.key, headers: record.headers.map { Header(name: $0.name, value: $0.value) },
                  original: record.value, attempts: attempts, failedAtMs: currentTimeMs())
    }
}

extension KafkaRecord {
    public var position: RecordPosition { RecordPosition(topic: topic, partition: partition, offset: offset) }
    public func header(_ name: String) -> String? {
        headers.last { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
    }
}

extension JSONEncoder {
    /// Deterministic JSON for pipeline records (sorted keys: byte-identical projections on replay).
    public static var pipeline: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

extension Data {
    public var bytes: [UInt8] { [UInt8](self) }
}
