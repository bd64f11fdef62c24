import AppStoreServerAPI
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
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
    /// True for the stage whose COMMIT puts an input into the ledger: the runner then observes
    /// `storeledger_ingest_to_ledger_seconds` from each input's `storeledger.received-at` header.
    var writesLedger: Bool { get }
}

extension StageLogic {
    public var writesLedger: Bool { false }
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
    /// Batch size, poll timeout, retry attempts and backoff of the consumer loop.
    public var policy = ConsumerLoopMachine.Policy()
    /// Test-only crash and stop points (Setting.failpoint): `stop-before-commit` makes this
    /// process SIGSTOP itself once, before the COMMIT of the first batch (a zombie holding an open
    /// transaction); the others SIGKILL it at a point of the loop with a probability.
    public var failpoints = Failpoints.none
    /// Bounded so a stop (SIGTERM) finishes within the supervisor's 10 s grace even with the broker away.
    public var produceTimeout: Duration = .seconds(8)

    public init(kafka: KafkaConfig, databaseURL: String?, groupId: String) {
        self.kafka = kafka
        self.databaseURL = databaseURL
        self.groupId = groupId
    }

    public var maxBatch: Int {
        get { policy.maxBatch }
        set { policy.maxBatch = newValue }
    }
}

/// Runs a stage as a consumer-group member on the one consumer loop (`ConsumerLoop`): per batch
/// BEGIN → process → publish outputs and dead letters, wait for the broker's acks → COMMIT → commit
/// offsets. A crash anywhere before the offset commit redelivers the batch, which every stage
/// handles idempotently (ARCHITECTURE.md principles). It is the stage's `Service`: ready while the
/// loop holds partitions and nothing is paused.
// @unchecked: `run` is entered once, on the service thread, and is the only user of `logic`;
// other threads only read `loop.status`, which is behind a Mutex.
public final class StageRunner: Service, @unchecked Sendable {
    private let logic: any StageLogic
    private let config: StageRunnerConfig
    public let loop: ConsumerLoop

    public init(logic: any StageLogic, config: StageRunnerConfig) {
        self.logic = logic
        self.config = config
        var loopConfig = ConsumerLoop.Config(name: logic.name, groupId: config.groupId, topics: logic.inputTopics,
                                             deadLetterTopic: Topic.deadLetter, kafka: config.kafka)
        loopConfig.outputTopics = [Topic.decoded, Topic.unique, Topic.commands]
        loopConfig.policy = config.policy
        loopConfig.produceTimeout = config.produceTimeout
        loopConfig.failpoints = config.failpoints
        loop = ConsumerLoop(config: loopConfig)
    }

    public var name: String { logic.name }
    public var isReady: Bool { loop.status.isReady }

    /// Returns the exit code: 0 after `stop`, non-zero after a critical failure.
    @discardableResult
    public func run(until stop: StopSignal) throws -> Int32 {
        try loop.run(StageWork(logic: logic, config: config), until: stop)
    }
}

/// One stage's unit of work on the loop: a PostgreSQL transaction (for stages with state) around
/// `process` and the publishing of its outputs.
final class StageWork: ConsumerLoopWork {
    let logic: any StageLogic
    let databaseURL: String?
    private var database: PGConnection?
    private var fence: PartitionFence
    private var batchPartitions: Set<PartitionID> = []
    private var stopBeforeCommit: Bool
    /// The batch's ingest times (ms), observed once its COMMIT succeeded (`writesLedger` stages).
    private var receivedAtMs: [Int64] = []
    private let metrics = Metrics.shared
    private let logger: Logger

    init(logic: any StageLogic, config: StageRunnerConfig) {
        self.logic = logic
        self.databaseURL = config.databaseURL
        self.fence = PartitionFence(groupId: config.groupId)
        self.stopBeforeCommit = config.failpoints.stopBeforeCommit
        self.logger = Logger(component: "stage.\(logic.name)")
    }

    /// Claims at once, not only before the next batch: a member that took over partitions fences
    /// the previous owner even while no record arrives for it. If PostgreSQL is away now, the
    /// claim stays pending and is made before the next batch.
    func assigned(_ partitions: Set<PartitionID>) {
        fence.assigned(partitions)
        guard logic.usesDatabase, !partitions.isEmpty else { return }
        do {
            try fence.claimIfNeeded(try connect())
        } catch {
            logger.warning("partition_claim_deferred", ["error": .string(String(describing: error))])
        }
    }

    func process(_ records: [KafkaRecord]) throws -> [OutgoingRecord] {
        var connection: PGConnection?
        if logic.usesDatabase {
            let db = try connect()
            try fence.claimIfNeeded(db)
            try db.begin()
            connection = db
            batchPartitions = Set(records.map(\.partitionID))
        }
        receivedAtMs = logic.writesLedger ? records.compactMap { $0.header(RecordHeader.receivedAt).flatMap { Int64($0) } } : []
        let result = try logic.process(records, database: connection)
        // The batch's deferred writes fail here if they fail, before its outputs are published.
        try connection?.flushDeferred()
        var all = result.outputs.map { OutgoingRecord(topic: $0.topic, key: Array($0.key.utf8), value: $0.value, headers: $0.headers) }
        for letter in result.deadLetters {
            all.append(letter.record.outgoing(topic: Topic.deadLetter))
            metrics.increment("storeledger_dead_letters_total", ["stage": logic.name, "kind": letter.errorKind])
            logger.warning("dead_letter", ["kind": .string(letter.errorKind), "error": .string(letter.error),
                                           "source": .string(letter.source.description)])
        }
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "in"], by: Double(records.count))
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "out"], by: Double(result.outputs.count))
        metrics.increment("storeledger_stage_records_total", ["stage": logic.name, "outcome": "dead_letter"], by: Double(result.deadLetters.count))
        return all
    }

    func commit() throws {
        guard let database, database.inTransaction else { return }
        if stopBeforeCommit {
            stopBeforeCommit = false
            logger.warning("failpoint_stop_before_commit")
            // To this thread, not the process: `kill(getpid(), …)` may reach another thread first,
            // and this one ran the fence check (FOR SHARE) before the stop took hold, so the zombie
            // held the rows a new owner's claim waits on.
            raise(SIGSTOP)
        }
        try fence.check(batchPartitions, database)
        try database.commit()
        let now = currentTimeMs()
        // A header holds any number (the topics are reachable outside the pipeline): no overflow trap.
        metrics.observe("storeledger_ingest_to_ledger_seconds", [:],
                        receivedAtMs.lazy.map { Double(max(0, now.subtractingReportingOverflow($0).partialValue)) / 1000 },
                        buckets: StageWork.ledgerLatencyBuckets)
        receivedAtMs = []
    }

    /// 10 ms to 5 min: the path crosses four stages, each a poll and a COMMIT.
    static let ledgerLatencyBuckets: [Double] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

    func rollback() {
        receivedAtMs = []
        guard let database else { return }
        if database.isBroken {
            self.database = nil
        } else if database.inTransaction {
            try? database.rollback()
        }
    }

    func classify(_ error: any Error) -> ConsumerLoopMachine.Failure {
        StageFailure.classify(error)
    }

    private func connect() throws -> PGConnection {
        if let database, !database.isBroken { return database }
        guard let url = databaseURL else { throw StageError.configuration("stage \(logic.name) needs DATABASE_URL") }
        database = nil
        let connection = try PGConnection(url: url, options: .keyed)
        database = connection
        return connection
    }
}

/// Which failure class an error thrown inside a stage belongs to (STYLE practice 3).
public enum StageFailure {
    public static func classify(_ error: any Error) -> ConsumerLoopMachine.Failure {
        switch error {
        case let failure as PermanentFailure:
            return .permanent(kind: failure.kind, reason: failure.reason)
        case let fenced as PartitionFence.Fenced:
            return .fenced(fenced.description)
        case let retry as DecodeRetry:
            return .awaitingService(retry.reason)
        case let stage as StageError:
            switch stage {
            case .configuration(let message): return .critical(message)
            case .produceTimeout: return .infrastructure(stage.description)
            }
        case let pg as PGError:
            return classify(pg)
        case let waiting as ConsumptionStage.AwaitingLedger:
            return .infrastructure(waiting.description)
        case let api as APIFailure where api.kind == .retryable || api.kind == .noToken:
            // Apple or the signer out of reach (5xx, 429, 401, no token): an outage the loop waits out
            // with its partitions paused. Apple gives 12 hours to answer a consumption request; a
            // dead letter after a few seconds of retries would lose it. A `Retry-After` longer than the
            // client waits in-process is honoured by the loop's outage instead.
            if let seconds = api.retryAfterSeconds, seconds > 0 {
                return .throttled(api.description, retryAfterMs: min(seconds, RetryAfter.maxSeconds) * 1_000)
            }
            return .infrastructure(api.description)
        case let kafka as KafkaError:
            if kafka.isMessageTooLarge { return .permanent(kind: "output_too_large", reason: kafka.description) }
            switch kafka.kind {
            // A missing or forbidden output topic holds every record alike: pause, never dead-letter them all.
            case .timedOut, .transport, .queueFull, .unavailable: return .infrastructure(kafka.description)
            case .fatal, .closed, .configuration: return .critical(kafka.description)
            case .other: return .retryable(kafka.description)
            }
        default:
            return .retryable(String(describing: error))
        }
    }

    /// PostgreSQL: a lost connection is an outage; a value the server rejects (class 22 data
    /// exception, 23 integrity violation) or cannot be sent will never succeed for that record;
    /// conflicts (40xxx) and everything else may pass on a retry. A unique violation on a key a stage
    /// inserts because its batch's read found none (`RacedKeys`) is a conflict too: another transaction
    /// wrote the key meanwhile, and the retry reads it.
    static func classify(_ error: PGError) -> ConsumerLoopMachine.Failure {
        switch error.kind {
        case .connection: return .infrastructure(error.description)
        case .invalidParameter, .decoding: return .permanent(kind: "database_rejected", reason: error.description)
        case .server:
            let state = error.sqlState ?? ""
            if error.isUniqueViolation, let constraint = error.constraint, RacedKeys.constraints.contains(constraint) {
                return .retryable(error.description)
            }
            if state.hasPrefix("22") || state.hasPrefix("23") { return .permanent(kind: "database_rejected", reason: error.description) }
            // 57014: our statement_timeout cancelled it (a hung or overloaded server), not the record's fault.
            // 53: out of disk, memory or connections; 58: I/O errors; 25006: a read-only server (a full
            // managed disk, a standby): outages of the server, never reasons to dead-letter records.
            if state.hasPrefix("08") || state.hasPrefix("57P") || state == "57014" || state.hasPrefix("53")
                || state.hasPrefix("58") || state == "25006" {
                return .infrastructure(error.description)
            }
            // A missing table or column is a deployment error (migrations not applied): never dead-letter for it.
            if state == "42P01" || state == "42703" { return .critical(error.description) }
            return .retryable(error.description)
        case .usage, .migration, .embeddedServer: return .retryable(error.description)
        }
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

extension DeadLetter {
    /// The wire form: original key, bytes and headers plus provenance headers.
    public var record: DeadLetterRecord {
        DeadLetterRecord(stage: stage, kind: errorKind, message: error,
                         source: PartitionID(topic: source.topic, partition: source.partition), sourceOffset: source.offset,
                         attempts: attempts, firstFailureMs: failedAtMs, lastFailureMs: failedAtMs, key: key,
                         value: original, headers: headers.map { KafkaHeader(name: $0.name, value: $0.value) })
    }
}

extension KafkaRecord {
    public var position: RecordPosition { RecordPosition(topic: topic, partition: partition, offset: offset) }
    public func header(_ name: String) -> String? {
        headers.last { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
    }
}
