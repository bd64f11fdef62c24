import Dispatch
import Runtime
import Synchronization

/// What differs between consumers of the one loop (the stages, the signer): how a batch is
/// processed inside one unit of work, and what a thrown error means.
public protocol ConsumerLoopWork: AnyObject {
    /// Opens a unit of work (a PostgreSQL transaction for stages with state) and processes the
    /// records (in partition order); returns what to publish before the unit commits.
    func process(_ records: [KafkaRecord]) throws -> [OutgoingRecord]
    /// Makes the unit's effects durable.
    func commit() throws
    /// Undoes an open unit (a no-op when none is open).
    func rollback()
    /// Which failure class a thrown error belongs to.
    func classify(_ error: any Error) -> ConsumerLoopMachine.Failure
    /// The member's partitions after a rebalance (for fencing); called before the next `process`.
    func assigned(_ partitions: Set<PartitionID>)
}

extension ConsumerLoopWork {
    public func commit() throws {}
    public func rollback() {}
    public func assigned(_ partitions: Set<PartitionID>) {}
}

/// The loop's health for `/readyz` and `/metrics`, readable from any thread.
public final class ConsumerLoopStatus: Sendable {
    private let state = Mutex((ready: false, paused: 0, outage: false, queued: 0))
    public init() {}
    public var isReady: Bool { state.withLock { $0.ready } }
    public var pausedPartitions: Int { state.withLock { $0.paused } }
    public var isOutage: Bool { state.withLock { $0.outage } }
    public var queuedRecords: Int { state.withLock { $0.queued } }
    /// Why not ready, for `/readyz`.
    public var reason: String {
        state.withLock { state in
            if state.ready { return "ready" }
            if state.outage { return "outage: every partition paused, nothing committed" }
            if state.paused > 0 { return "\(state.paused) partition(s) paused for a retry" }
            return "waiting for partitions or the broker"
        }
    }
    func update(_ machine: ConsumerLoopMachine) {
        state.withLock { $0 = (machine.isReady, machine.paused.count, machine.isOutage, machine.queuedCount) }
    }
}

/// The driver of `ConsumerLoopMachine` against a real consumer and producer: it only executes
/// actions and reports their outcome. Runs on the calling thread (blocking librdkafka calls).
public final class ConsumerLoop: Sendable {
    public struct Config: Sendable {
        /// The consumer's name in logs, metrics and dead letters (`decode`, `signer`, ...).
        public var name: String
        public var groupId: String
        public var topics: [String]
        public var deadLetterTopic: String
        /// Topics the work publishes to: metadata is fetched at start, keeping it off the first record.
        public var outputTopics: [String] = []
        public var consumerKafka: KafkaConfig
        public var producerKafka: KafkaConfig
        public var policy = ConsumerLoopMachine.Policy()
        /// Longest wait for the broker's acknowledgement of a batch's outputs.
        public var produceTimeout: Duration = .seconds(30)
        /// Test-only crash points (Setting.failpoint); none in production.
        public var failpoints = Failpoints.none
        /// How often per-partition consumer lag is refreshed on `/metrics`.
        public var lagInterval: Duration = .seconds(1)

        public init(name: String, groupId: String, topics: [String], deadLetterTopic: String, kafka: KafkaConfig) {
            self.name = name
            self.groupId = groupId
            self.topics = topics
            self.deadLetterTopic = deadLetterTopic
            self.consumerKafka = kafka
            self.producerKafka = kafka
        }
    }

    public let config: Config
    public let status: ConsumerLoopStatus
    private let logger: Logger
    private let metrics = Metrics.shared
    private let clock: @Sendable () -> Int64
    private let jitter: @Sendable (Int64) -> Int64

    public init(config: Config, status: ConsumerLoopStatus = ConsumerLoopStatus(),
                clock: @escaping @Sendable () -> Int64 = currentTimeMs,
                jitter: @escaping @Sendable (Int64) -> Int64 = ConsumerLoopMachine.halfJitter) {
        self.config = config
        self.status = status
        self.clock = clock
        self.jitter = jitter
        self.logger = Logger(component: "loop.\(config.name)")
    }

    /// Runs until `stop` (exit code 0) or a critical failure (non-zero; nothing uncommitted is committed).
    /// `onIdle` runs after every poll on this thread (periodic chores such as a metrics file).
    /// `onReadinessChange` sees every change of readiness, on this thread.
    public func run(_ work: some ConsumerLoopWork, until stop: StopSignal, onIdle: () -> Void = {},
                    onReadinessChange: (Bool) -> Void = { _ in }) throws -> Int32 {
        let consumer = try KafkaConsumer(config: config.consumerKafka, groupId: config.groupId, topics: config.topics)
        let producer = try KafkaProducer(config: config.producerKafka)
        var commits = OffsetCommits()
        defer {
            consumer.close()
            producer.close()
        }
        producer.warmUp(topics: config.outputTopics + [config.deadLetterTopic], timeout: .seconds(5))
        logger.info("loop_started", ["group": .string(config.groupId), "topics": .string(config.topics.joined(separator: ","))])
        var machine = ConsumerLoopMachine(policy: config.policy, jitter: jitter)
        var outputs: [OutgoingRecord] = []
        var batchStarted = ContinuousClock.now
        var action = machine.next(.started, nowMs: clock())
        let labels = ["stage": config.name]
        var wasReady = false
        var seenGeneration = 0
        var lag = LagGauges(stage: config.name, interval: config.lagInterval)
        var counted = (record: 0, outage: 0)
        var shownGauges: (paused: Int, ready: Bool)?
        // Present at 0 from the start: "no retries" is a value a dashboard should show.
        for reason in ["record", "outage"] { metrics.increment("storeledger_loop_retries_total", ["stage": config.name, "reason": reason], by: 0) }
        while true {
            if machine.recordRetries != counted.record || machine.outageRetries != counted.outage {
                metrics.increment("storeledger_loop_retries_total", ["stage": config.name, "reason": "record"],
                                  by: Double(machine.recordRetries - counted.record))
                metrics.increment("storeledger_loop_retries_total", ["stage": config.name, "reason": "outage"],
                                  by: Double(machine.outageRetries - counted.outage))
                counted = (machine.recordRetries, machine.outageRetries)
            }
            status.update(machine)
            if machine.isReady != wasReady {
                wasReady = machine.isReady
                logger.info(wasReady ? "loop_ready" : "loop_not_ready", ["paused": .of(machine.paused.count), "outage": .bool(machine.isOutage)])
                onReadinessChange(wasReady)
            }
            // Set when they change, not on every action: each set renders its labels and takes a lock.
            if shownGauges?.paused != machine.paused.count || shownGauges?.ready != machine.isReady {
                shownGauges = (machine.paused.count, machine.isReady)
                metrics.set("storeledger_loop_paused_partitions", labels, to: Double(machine.paused.count))
                metrics.set("storeledger_loop_ready", labels, to: machine.isReady ? 1 : 0)
            }
            if stop.isStopped { machine.requestStop() }
            let event: ConsumerLoopMachine.Event
            switch action {
            case .poll(let maxRecords, let timeout):
                do {
                    let records = try consumer.poll(maxRecords: maxRecords, timeout: timeout)
                    let generation = consumer.rebalanceGeneration
                    let assignment = consumer.assignment
                    if generation != seenGeneration {
                        seenGeneration = generation
                        // Another member may have committed further while it held our partitions: an
                        // offset of ours from before the rebalance must never be sent again.
                        commits.forget()
                        lag.reassigned()
                        work.assigned(assignment)
                    }
                    event = .polled(records, assignment: assignment, generation: generation)
                } catch {
                    logger.warning("poll_failed", ["error": .string(error.description)])
                    event = .failed(error.kind == .fatal ? .critical(error.description) : .infrastructure(error.description))
                }
                lag.refreshIfDue(consumer, paused: machine.paused)
                settle(&commits, consumer)
                onIdle()
            case .pause(let partitions):
                event = attempt("pause") { () throws(KafkaError) in try consumer.pause(partitions) }
                logger.info("partitions_paused", ["partitions": .string(partitions.map(\.description).joined(separator: ","))])
            case .resume(let partitions):
                event = attempt("resume") { () throws(KafkaError) in try consumer.resume(partitions) }
                logger.info("partitions_resumed", ["partitions": .string(partitions.map(\.description).joined(separator: ","))])
            case .process(let records):
                batchStarted = .now
                do {
                    outputs = try work.process(records)
                    event = .processed(outputs: outputs.count)
                } catch {
                    event = .failed(work.classify(error))
                }
            case .publish:
                do {
                    try publish(outputs, producer)
                    config.failpoints.crashIfHit(.afterPublish)
                    event = .done
                } catch {
                    event = .failed(work.classify(error))
                }
            case .commitTransaction:
                do {
                    try work.commit()
                    config.failpoints.crashIfHit(.afterPGCommit)
                    outputs = []
                    metrics.increment("storeledger_loop_batches_total", labels)
                    metrics.observe("storeledger_loop_batch_seconds", labels, (ContinuousClock.now - batchStarted).secondsDouble)
                    event = .done
                } catch {
                    event = .failed(work.classify(error))
                }
            case .rollbackTransaction:
                work.rollback()
                outputs = []
                if case .rollingBack(let failure) = machine.phase { report(failure) }
                event = .done
            case .deadLetter(let order):
                let letter = DeadLetterRecord(stage: config.name, order: order)
                do {
                    try publish([letter.outgoing(topic: config.deadLetterTopic)], producer)
                    metrics.increment("storeledger_dead_letters_total", ["stage": config.name, "kind": order.kind])
                    logger.warning("dead_letter", ["kind": .string(order.kind), "error": .string(DeadLetterRecord.truncated(order.reason)),
                                                   "source": .string("\(order.record.partitionID)@\(order.record.offset)"),
                                                   "attempts": .of(order.attempts)])
                    event = .done
                } catch {
                    event = .failed(work.classify(error))
                }
            case .commitOffsets(let offsets):
                config.failpoints.crashIfHit(.beforeOffsetCommit)
                do {
                    // Asynchronous: the batch's effects are durable already (PostgreSQL committed,
                    // outputs acknowledged), so the loop need not wait for the coordinator; a
                    // failure is served by a later poll and the offsets sent again (`settle`).
                    try consumer.commitAsync(offsets: offsets)
                    commits.sent(offsets)
                    lag.committed(offsets)
                    event = .done
                } catch {
                    metrics.increment("storeledger_loop_commit_failures_total", labels)
                    logger.warning("offset_commit_failed", ["error": .string(error.description)])
                    event = .failed(.infrastructure(error.description))
                }
            case .stop(let code, let reason):
                if code == 0 {
                    // A clean stop leaves the group's offsets where the work ended: the offsets sent
                    // last, for the partitions still held, once more and waiting for the answer.
                    do {
                        let held = consumer.assignment
                        try consumer.commit(offsets: commits.latest.filter { held.contains($0.key) })
                    } catch {
                        metrics.increment("storeledger_loop_commit_failures_total", labels)
                        logger.warning("offset_commit_failed", ["error": .string(error.description)])
                    }
                    logger.info("loop_stopped", ["reason": .string(reason)])
                } else {
                    logger.error("loop_stopped_critical", ["reason": .string(reason)])
                }
                status.update(machine)
                return code
            }
            action = machine.next(event, nowMs: clock())
        }
    }

    /// Counts and logs the asynchronous commits that failed, and sends the latest offsets of the
    /// partitions still held again (at most once a second): without that, a partition whose last
    /// commit failed would keep its old offset until its next record.
    private func settle(_ commits: inout OffsetCommits, _ consumer: KafkaConsumer) {
        let failures = consumer.takeAsyncCommitFailures()
        for failure in failures {
            metrics.increment("storeledger_loop_commit_failures_total", ["stage": config.name])
            logger.warning("offset_commit_failed", ["error": .string(failure.description)])
        }
        if !failures.isEmpty { commits.resendDue = true }
        let now = ContinuousClock.now
        guard commits.resendDue, now - commits.lastResend >= .seconds(1) else { return }
        commits.lastResend = now
        let assignment = consumer.assignment
        let held = commits.latest.filter { assignment.contains($0.key) }
        commits.latest = held
        commits.resendDue = (try? consumer.commitAsync(offsets: held)) == nil
    }

    private func attempt(_ what: String, _ body: () throws(KafkaError) -> Void) -> ConsumerLoopMachine.Event {
        do {
            try body()
            return .done
        } catch {
            logger.warning("\(what)_failed", ["error": .string(error.description)])
            return .failed(.infrastructure(error.description))
        }
    }

    private func report(_ failure: ConsumerLoopMachine.Failure) {
        let kind: String
        switch failure {
        case .retryable: kind = "retryable"
        case .awaitingService: kind = "awaiting_service"
        case .permanent: kind = "permanent"
        case .infrastructure: kind = "infrastructure"
        case .throttled: kind = "throttled"
        case .critical: kind = "critical"
        case .fenced: kind = "fenced"
        }
        metrics.increment("storeledger_loop_failures_total", ["stage": config.name, "class": kind])
        logger.warning("batch_failed", ["class": .string(kind), "error": .string(DeadLetterRecord.truncated(failure.reason))])
    }

    /// Sends everything and waits until the broker acknowledged all of it (or throws the first failure).
    /// In chunks: one record may fan out into thousands (every subscription of a V1 body, every
    /// transaction of an event), and a batch of them would overrun librdkafka's local queue
    /// (100,000 messages), fail as `queueFull` and be retried whole for ever.
    private func publish(_ records: [OutgoingRecord], _ producer: KafkaProducer) throws {
        var start = records.startIndex
        while start < records.endIndex {
            let end = min(records.endIndex, start + Self.publishChunk)
            try publishChunk(records[start..<end], producer)
            start = end
        }
    }

    static let publishChunk = 10_000

    private func publishChunk(_ records: ArraySlice<OutgoingRecord>, _ producer: KafkaProducer) throws {
        guard !records.isEmpty else { return }
        let pending = DispatchGroup()
        let firstError = Mutex<KafkaError?>(nil)
        for record in records {
            pending.enter()
            producer.send(topic: record.topic, key: record.key, value: record.value, headers: record.headers) { result in
                if case .failure(let error) = result { firstError.withLock { $0 = $0 ?? error } }
                pending.leave()
            }
        }
        if pending.wait(timeout: .now() + .nanoseconds(Int(config.produceTimeout.nanoseconds))) == .timedOut {
            throw KafkaError(.timedOut, "broker did not acknowledge \(records.count) records within \(config.produceTimeout)")
        }
        if let error = firstError.withLock({ $0 }) { throw error }
    }
}

/// The offsets the loop sent to the coordinator asynchronously: the latest per partition, so a
/// failed commit can be sent again and a clean stop can leave them committed.
struct OffsetCommits {
    var latest: [PartitionID: Int64] = [:]
    var resendDue = false
    var lastResend = ContinuousClock.Instant.now - .seconds(60)

    mutating func sent(_ offsets: [PartitionID: Int64]) {
        latest.merge(offsets) { max($0, $1) }
    }

    /// After a rebalance: the partitions start again from what the group committed.
    mutating func forget() {
        latest = [:]
        resendDue = false
    }
}

/// `storeledger_consumer_lag{stage, topic, partition}`: records behind the high watermark, counted
/// from what this member committed (or, before its first commit, from where it resumed), refreshed
/// at most every `interval` from librdkafka's cached watermarks (no broker request). A paused
/// partition is not fetched, so its cached watermark stands still exactly while an outage lets the
/// backlog grow: for those the broker is asked, at most every `brokerInterval`.
struct LagGauges {
    static let metric = "storeledger_consumer_lag"
    static let brokerInterval: Duration = .seconds(5)
    static let brokerTimeout: Duration = .milliseconds(500)
    let stage: String
    let interval: Duration
    private var committed: [PartitionID: Int64] = [:]
    private var lastRefresh: ContinuousClock.Instant?
    private var lastBrokerQuery: ContinuousClock.Instant?
    private var queried: [PartitionID: Int64] = [:]
    private var shown: Set<PartitionID> = []

    init(stage: String, interval: Duration) {
        self.stage = stage
        self.interval = interval
    }

    mutating func committed(_ offsets: [PartitionID: Int64]) {
        committed.merge(offsets) { max($0, $1) }
    }

    /// After a rebalance another member may have committed further: count from positions again.
    mutating func reassigned() {
        committed = [:]
        lastRefresh = nil
    }

    mutating func refreshIfDue(_ consumer: KafkaConsumer, paused: Set<PartitionID> = []) {
        let now = ContinuousClock.now
        if let lastRefresh, now - lastRefresh < interval { return }
        lastRefresh = now
        let assignment = consumer.assignment
        // Offsets we committed for partitions we no longer hold say nothing about the new owner.
        committed = committed.filter { assignment.contains($0.key) }
        queried = queried.filter { paused.contains($0.key) && assignment.contains($0.key) }
        if !paused.isEmpty, lastBrokerQuery.map({ now - $0 >= Self.brokerInterval }) ?? true {
            lastBrokerQuery = now
            queried.merge(consumer.queryHighWatermarks(paused.intersection(assignment).sorted(), timeout: Self.brokerTimeout)) { max($0, $1) }
        }
        let lags = consumer.lag(of: assignment, committed: committed, queried: queried)
        let metrics = Metrics.shared
        if !Set(lags.keys).isSuperset(of: shown) { metrics.removeGauges(LagGauges.metric) }
        shown = Set(lags.keys)
        for (partition, lag) in lags {
            metrics.set("storeledger_consumer_lag", ["stage": stage, "topic": partition.topic, "partition": String(partition.partition)], to: Double(lag))
        }
    }
}
