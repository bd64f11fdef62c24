import Runtime

/// The one consumer loop of every stage and the signer, as a pure state machine (STYLE practice 13,
/// after swift-kafka-client's `KafkaConsumer.StateMachine`): the driver reports what happened, the
/// machine answers with the next action. No I/O, no clock, no randomness of its own, so every path
/// (retry, pause, split, dead letter, outage, rebalance, stop) is a transcript test.
///
/// Order: records of one partition are processed strictly in offset order; a partition whose head
/// record is retrying is paused (in Kafka and here) while the other partitions keep flowing and the
/// consumer keeps polling, so `max.poll.interval.ms` is never exceeded.
public struct ConsumerLoopMachine: Sendable {
    public struct Policy: Sendable, Equatable {
        /// Largest batch handed to `process` (and largest poll).
        public var maxBatch = 500
        /// Longest single poll; also the longest the loop goes without polling while it works.
        public var pollTimeout: Duration = .milliseconds(200)
        /// Attempts of one record that keeps failing retryably before it is dead-lettered as `retry_exhausted`.
        public var maxAttempts = 8
        /// Backoff before attempt n+1 is `min(maxBackoff, baseBackoff * 2^(n-1))`, then jittered.
        public var baseBackoff: Duration = .milliseconds(100)
        public var maxBackoff: Duration = .seconds(10)
        public init() {}
    }

    /// What the driver must do next.
    public enum Action: Sendable, Equatable {
        case poll(maxRecords: Int, timeout: Duration)
        case pause([PartitionID])
        case resume([PartitionID])
        /// Open the unit of work (a PostgreSQL transaction for stages with state) and run `process`.
        case process([KafkaRecord])
        /// Send what `process` returned and wait for the broker's acknowledgements.
        case publish
        /// Commit the unit of work (PostgreSQL); effects are durable afterwards.
        case commitTransaction
        /// Undo the unit of work; then report `.done`.
        case rollbackTransaction
        case deadLetter(DeadLetterOrder)
        /// Commit these next offsets (the offset after the last finished record of each partition).
        case commitOffsets([PartitionID: Int64])
        /// Leave the loop: exit code 0 after a requested stop, non-zero after a critical failure.
        /// Nothing unfinished is committed.
        case stop(exitCode: Int32, reason: String)
    }

    /// What happened since the last action.
    public enum Event: Sendable, Equatable {
        /// The loop starts.
        case started
        /// A poll returned (possibly nothing). `assignment` is the member's partitions now and
        /// `generation` counts rebalances, so the machine drops work for partitions it may have lost.
        case polled([KafkaRecord], assignment: Set<PartitionID>, generation: Int)
        /// `process` returned; whether it produced records to publish.
        case processed(outputs: Int)
        /// The last action (pause, resume, publish, commit, rollback, dead letter) succeeded.
        case done
        case failed(Failure)
    }

    public enum Phase: Sendable, Equatable {
        case idle
        case polling
        case pausing
        case processing
        case publishing
        case committingTransaction
        case rollingBack(Failure)
        case committingOffsets
        case deadLettering(DeadLetterOrder)
        case stopped
    }

    public private(set) var phase: Phase = .idle
    /// Retries scheduled so far (for `storeledger_loop_retries_total`): a record backing off after a
    /// retryable failure, and an outage's next attempt of everything.
    public private(set) var recordRetries = 0
    public private(set) var outageRetries = 0
    public let policy: Policy
    private let jitter: @Sendable (Int64) -> Int64

    private var queue = PartitionQueues()
    private var retries: [PartitionID: RetryState] = [:]
    private var outage: Outage?
    private var brokerUnreachable = false
    /// What Kafka has been told to pause.
    public private(set) var paused: Set<PartitionID> = []
    private var assignment: Set<PartitionID> = []
    /// Partitions paused before a rebalance that we hold again: resumed once, whatever librdkafka kept.
    private var staleResume: Set<PartitionID> = []
    private var generation = 0
    private var polledSinceAssignment = false
    private var batchLimit: Int
    private var batch: [KafkaRecord] = []
    /// The records of a failed batch not yet known good, in the batch's order: the next batches are
    /// halves of them (a prefix is a valid unit: per partition it is a run from the head) until the
    /// failing record stands alone. Halving the batch limit instead isolates only a record first in
    /// line: one behind another partition's records stayed in every retried batch.
    private var suspects: [KafkaRecord] = []
    /// Whether the batch in progress (or the last one) was a due retry: retries and other work take
    /// turns, so retries that block (Apple slow to answer) cannot starve the partitions that flow.
    private var lastWasRetry = false
    private var lastPollMs: Int64?
    private var stopRequested = false
    /// Next offsets of finished work whose commit failed, sent again with the next commit or, when
    /// nothing else comes, on their own after a backoff: otherwise a partition's last batch would
    /// stay uncommitted (lag above 0, redone after every restart) until new records arrive.
    private var uncommitted: [PartitionID: Int64] = [:]
    private var commitFailures = 0
    private var commitRetryAtMs: Int64 = 0

    /// - Parameter jitter: maps a capped backoff (ms) to the delay actually waited; inject a fixed
    ///   function in tests. The default picks uniformly in [backoff/2, backoff].
    public init(policy: Policy = Policy(), jitter: @escaping @Sendable (Int64) -> Int64 = ConsumerLoopMachine.halfJitter) {
        self.policy = policy
        self.jitter = jitter
        self.batchLimit = policy.maxBatch
    }

    public static let halfJitter: @Sendable (Int64) -> Int64 = { backoff in
        backoff <= 1 ? backoff : Int64.random(in: backoff / 2...backoff)
    }

    // MARK: Observed state

    /// Ready = holds partitions and can do its job: no outage, broker reachable, nothing paused.
    public var isReady: Bool {
        !assignment.isEmpty && polledSinceAssignment && outage == nil && !brokerUnreachable && paused.isEmpty
    }
    public var isOutage: Bool { outage != nil }
    /// Records polled and not yet finished.
    public var queuedCount: Int { queue.count }

    /// Asks the loop to stop after the unit of work in progress (if any) is finished and committed.
    public mutating func requestStop() { stopRequested = true }

    // MARK: Transitions

    /// Feeds what happened at wall-clock time `nowMs`, returns what to do next.
    public mutating func next(_ event: Event, nowMs: Int64) -> Action {
        switch (phase, event) {
        case (.stopped, _):
            return .stop(exitCode: 0, reason: "stopped")
        case (_, .started):
            return chooseNext(nowMs)
        case (.polling, .polled(let records, let newAssignment, let newGeneration)):
            lastPollMs = nowMs
            brokerUnreachable = false
            adopt(assignment: newAssignment, generation: newGeneration)
            // Records of partitions we no longer hold (or paused meanwhile) are simply not kept:
            // whoever owns them reads them again from the committed offset.
            queue.append(records, keeping: assignment)
            return chooseNext(nowMs)
        case (.polling, .failed(let failure)):
            lastPollMs = nowMs
            if case .critical(let reason) = failure { return stop(1, reason) }
            // librdkafka reconnects by itself: note it (not ready) and poll again.
            brokerUnreachable = true
            return chooseNext(nowMs)
        case (.pausing, .done), (.pausing, .failed):
            return chooseNext(nowMs)
        case (.processing, .processed(let outputs)):
            if outputs > 0 {
                phase = .publishing
                return .publish
            }
            phase = .committingTransaction
            return .commitTransaction
        case (.publishing, .done):
            phase = .committingTransaction
            return .commitTransaction
        case (.committingTransaction, .done):
            return finish(batch, nowMs)
        case (.processing, .failed(let failure)), (.publishing, .failed(let failure)),
             (.committingTransaction, .failed(let failure)):
            phase = .rollingBack(failure)
            return .rollbackTransaction
        case (.rollingBack(let failure), .done), (.rollingBack(let failure), .failed):
            return handle(failure, of: batch, nowMs)
        case (.deadLettering(let order), .done):
            return finish([order.record], nowMs)
        case (.deadLettering, .failed(let failure)):
            // The dead letter did not reach the broker: nothing moves; treat like any outage.
            if case .critical(let reason) = failure { return stop(1, reason) }
            beginOutage(failure.reason, nowMs)
            return chooseNext(nowMs)
        case (.committingOffsets, .done):
            uncommitted = [:]
            commitFailures = 0
            return chooseNext(nowMs)
        case (.committingOffsets, .failed):
            // Effects are durable already: the work is not redone (redelivery would be absorbed
            // idempotently anyway); the offsets are kept and committed again later.
            commitFailures += 1
            commitRetryAtMs = nowMs + jitter(backoff(attempt: commitFailures))
            return chooseNext(nowMs)
        default:
            return stop(1, "consumer loop: unexpected \(event) in phase \(phase)")
        }
    }

    // MARK: Choosing the next action

    private mutating func chooseNext(_ nowMs: Int64) -> Action {
        if stopRequested { return stop(0, "stop requested") }
        // An outage ends when the work it holds back succeeds. A rebalance or a fence drops that work,
        // and paused partitions fetch nothing new: once the retry is due with nothing queued, end the
        // outage so they resume (the next batch tries the way again), or they would stay paused for good.
        if let outage, outage.retryAtMs <= nowMs, queue.count == 0 { self.outage = nil }
        if let change = pauseChange() { return change }
        // Poll at least every `pollTimeout` even while there is work: rebalances, heartbeats and
        // max.poll.interval.ms are served inside poll.
        let pollDue = lastPollMs.map { nowMs - $0 >= policy.pollTimeout.milliseconds } ?? true
        let work = nextBatch(nowMs)
        if !pollDue, let work {
            batch = work.records
            lastWasRetry = work.isRetry
            phase = .processing
            return .process(work.records)
        }
        if work == nil, outage == nil, !uncommitted.isEmpty, nowMs >= commitRetryAtMs {
            phase = .committingOffsets
            return .commitOffsets(uncommitted)
        }
        // With nothing to do, the poll is also the wait for the next retry ("retry after a delay").
        phase = .polling
        let wait = work != nil ? 0 : min(policy.pollTimeout.milliseconds, untilNextRetry(nowMs))
        return .poll(maxRecords: policy.maxBatch, timeout: .milliseconds(wait))
    }

    /// Kafka's pause state follows ours: retrying partitions, or everything during an outage.
    private mutating func pauseChange() -> Action? {
        if !staleResume.isEmpty {
            defer { staleResume = [] }
            phase = .pausing
            return .resume(staleResume.sorted())
        }
        // The usual case, checked before any set is built: nothing retrying, nothing paused.
        if outage == nil, retries.isEmpty, paused.isEmpty { return nil }
        let wanted = outage != nil ? assignment : Set(retries.keys).intersection(assignment)
        let toPause = wanted.subtracting(paused)
        if !toPause.isEmpty {
            paused.formUnion(toPause)
            phase = .pausing
            return .pause(toPause.sorted())
        }
        let toResume = paused.subtracting(wanted)
        if !toResume.isEmpty {
            paused.subtract(toResume)
            phase = .pausing
            return .resume(toResume.sorted())
        }
        return nil
    }

    /// A due retry goes alone (its failure must not take others down), taking turns with other work;
    /// otherwise the first half of the suspects while a failed batch is bisected; otherwise the
    /// oldest records of every partition not waiting, up to the batch limit.
    private func nextBatch(_ nowMs: Int64) -> (records: [KafkaRecord], isRetry: Bool)? {
        if let outage, nowMs < outage.retryAtMs { return nil }
        let retry = retries.filter({ $0.value.retryAtMs <= nowMs }).min(by: { ($0.value.retryAtMs, $0.key) < ($1.value.retryAtMs, $1.key) })
            .flatMap { queue.head(of: $0.key) }
        if let retry, !lastWasRetry { return ([retry], true) }
        if !suspects.isEmpty { return (Array(suspects.prefix(max(1, suspects.count / 2))), false) }
        let records = queue.take(batchLimit, excluding: Set(retries.keys))
        if !records.isEmpty { return (records, false) }
        return retry.map { ([$0], true) }
    }

    private func untilNextRetry(_ nowMs: Int64) -> Int64 {
        var times = retries.values.map(\.retryAtMs)
        if let outage { times.append(outage.retryAtMs) }
        if !uncommitted.isEmpty { times.append(commitRetryAtMs) }
        guard let earliest = times.min() else { return .max }
        return max(0, earliest - nowMs)
    }

    // MARK: Outcomes

    private mutating func finish(_ records: [KafkaRecord], _ nowMs: Int64) -> Action {
        // A good half of the suspects: the failing record is among the rest.
        if Self.isPrefix(records, of: suspects) { suspects.removeFirst(records.count) }
        let through = PartitionQueues.lastOffsets(records)
        queue.remove(through: through)
        for (id, last) in through {
            retries[id] = nil
            uncommitted[id] = max(uncommitted[id] ?? 0, last + 1)
        }
        outage = nil
        batchLimit = min(policy.maxBatch, batchLimit * 2)
        phase = .committingOffsets
        return .commitOffsets(uncommitted)
    }

    private mutating func handle(_ failure: Failure, of records: [KafkaRecord], _ nowMs: Int64) -> Action {
        switch failure {
        case .critical(let reason):
            return stop(1, reason)
        case .infrastructure(let reason):
            beginOutage(reason, nowMs)
            return chooseNext(nowMs)
        case .throttled(let reason, let retryAfterMs):
            beginOutage(reason, nowMs, atLeastMs: retryAfterMs)
            return chooseNext(nowMs)
        case .fenced:
            queue = PartitionQueues()
            retries = [:]
            suspects = []
            uncommitted = [:]
            batchLimit = policy.maxBatch
            phase = .polling
            return .poll(maxRecords: policy.maxBatch, timeout: policy.pollTimeout)
        case .retryable, .permanent, .awaitingService:
            guard records.count == 1, let record = records.first else {
                // One bad record must not hold the others: bisect this batch until it stands alone,
                // and start again from smaller batches afterwards.
                suspects = records
                batchLimit = max(1, records.count / 2)
                return chooseNext(nowMs)
            }
            // Isolated: the other suspects are ordinary work again.
            if suspects.contains(where: { Self.isSameRecord($0, record) }) {
                suspects = []
            }
            let previous = retries[record.partitionID]
            let attempts = (previous?.attempts ?? 0) + 1
            let first = previous?.firstFailureMs ?? nowMs
            if case .permanent(let kind, let reason) = failure {
                return deadLetter(DeadLetterOrder(record: record, kind: kind, reason: reason, attempts: attempts,
                                                  firstFailureMs: first, lastFailureMs: nowMs))
            }
            let exhausted: Bool
            if case .awaitingService = failure {
                exhausted = nowMs - first >= Self.patientRetryLimit.milliseconds
            } else {
                exhausted = attempts >= policy.maxAttempts
            }
            if exhausted {
                return deadLetter(DeadLetterOrder(record: record, kind: DeadLetterOrder.retryExhausted, reason: failure.reason,
                                                  attempts: attempts, firstFailureMs: first, lastFailureMs: nowMs))
            }
            retries[record.partitionID] = RetryState(attempts: attempts, firstFailureMs: first,
                                                     retryAtMs: nowMs + jitter(backoff(attempt: attempts)))
            recordRetries += 1
            return chooseNext(nowMs)
        }
    }

    private mutating func deadLetter(_ order: DeadLetterOrder) -> Action {
        phase = .deadLettering(order)
        return .deadLetter(order)
    }

    private mutating func beginOutage(_ reason: String, _ nowMs: Int64, atLeastMs asked: Int64 = 0) {
        let attempts = (outage?.attempts ?? 0) + 1
        // What was asked, made longer by the jitter's share (not shorter): members told alike by
        // Apple do not all ask again at the same instant.
        let askedWait = min(max(asked, 0), Self.maxThrottleWait.milliseconds)
        let wait = max(jitter(backoff(attempt: attempts)), askedWait + (askedWait - jitter(askedWait)))
        outage = Outage(attempts: attempts, reason: reason, retryAtMs: nowMs + wait)
        outageRetries += 1
    }

    /// How long an `awaitingService` record is retried before it is dead-lettered (`retry_exhausted`).
    public static let patientRetryLimit: Duration = .seconds(86_400)

    /// The longest wait a `throttled` failure imposes: the loop stays responsive to stops and
    /// rebalances meanwhile, and Apple's longest windows (an hour's request quota) fit in it.
    public static let maxThrottleWait: Duration = .seconds(3_600)

    /// Whether `records` are the first records of `list` (same partitions and offsets, same order).
    static func isPrefix(_ records: [KafkaRecord], of list: [KafkaRecord]) -> Bool {
        guard !records.isEmpty, records.count <= list.count else { return false }
        return zip(records, list).allSatisfy(isSameRecord)
    }

    /// One record by its position (its bytes need not be compared).
    static func isSameRecord(_ a: KafkaRecord, _ b: KafkaRecord) -> Bool {
        a.offset == b.offset && a.partition == b.partition && a.topic == b.topic
    }

    /// Capped exponential backoff before retry number `attempt` (1-based).
    func backoff(attempt: Int) -> Int64 {
        let base = policy.baseBackoff.milliseconds
        let cap = policy.maxBackoff.milliseconds
        let shift = min(attempt - 1, 30)
        let (value, overflow) = base.multipliedReportingOverflow(by: Int64(1) << shift)
        return overflow ? cap : min(cap, value)
    }

    private mutating func adopt(assignment newAssignment: Set<PartitionID>, generation newGeneration: Int) {
        if newGeneration != generation {
            // A rebalance: the group may have moved our partitions and back (eager protocol), and
            // librdkafka starts them from the committed offsets: what we held is read again.
            generation = newGeneration
            queue = PartitionQueues()
            retries = [:]
            suspects = []
            // The partitions start again from what the group committed; another member may have
            // committed further meanwhile, so an older offset of ours must not be sent after it.
            uncommitted = [:]
            commitFailures = 0
            staleResume = paused.intersection(newAssignment)
            paused = []
            batchLimit = policy.maxBatch
            polledSinceAssignment = false
        } else if !newAssignment.isEmpty, newAssignment == assignment {
            polledSinceAssignment = true
        }
        assignment = newAssignment
    }

    private mutating func stop(_ code: Int32, _ reason: String) -> Action {
        phase = .stopped
        return .stop(exitCode: code, reason: reason)
    }
}

extension ConsumerLoopMachine {
    /// The four failure classes (STYLE practice 3 plus outages).
    public enum Failure: Sendable, Equatable {
        /// May succeed later (a serialization conflict): back off and retry this record.
        case retryable(String)
        /// A service outside says "try again" for this record (Apple's verifyReceipt down or busy): as
        /// `retryable`, holding only this record's partition, but dead-lettered only once it has failed
        /// for `patientRetryLimit`, not after `maxAttempts`: an Apple incident must not turn every
        /// upload into a dead letter, nor hold a partition for ever.
        case awaitingService(String)
        /// Will never succeed: dead-letter with `kind` and move on.
        case permanent(kind: String, reason: String)
        /// PostgreSQL or the broker is unreachable: pause everything, report not-ready, commit nothing, retry.
        case infrastructure(String)
        /// An outage whose other side said how long to wait (Apple's `Retry-After`): as `infrastructure`,
        /// but the next attempt comes no sooner than asked (at most `maxThrottleWait`), not after the
        /// usual capped backoff, which would ask again every few seconds.
        case throttled(String, retryAfterMs: Int64)
        /// Continuing would be wrong (bad configuration, a fatal client): stop, exit non-zero.
        case critical(String)
        /// Another member owns the partitions now (this one is a zombie): drop what is held,
        /// commit nothing, and poll so the rebalance reaches us.
        case fenced(String)

        public var reason: String {
            switch self {
            case .retryable(let reason), .infrastructure(let reason), .critical(let reason), .fenced(let reason),
                 .throttled(let reason, _), .awaitingService(let reason): reason
            case .permanent(let kind, let reason): "\(kind): \(reason)"
            }
        }
    }

    struct RetryState: Sendable, Equatable {
        var attempts: Int
        var firstFailureMs: Int64
        var retryAtMs: Int64
    }

    struct Outage: Sendable, Equatable {
        var attempts: Int
        var reason: String
        var retryAtMs: Int64
    }
}

/// A record to dead-letter and why.
public struct DeadLetterOrder: Sendable, Equatable {
    public static let retryExhausted = "retry_exhausted"
    public var record: KafkaRecord
    public var kind: String
    public var reason: String
    public var attempts: Int
    public var firstFailureMs: Int64
    public var lastFailureMs: Int64

    public init(record: KafkaRecord, kind: String, reason: String, attempts: Int, firstFailureMs: Int64, lastFailureMs: Int64) {
        self.record = record
        self.kind = kind
        self.reason = reason
        self.attempts = attempts
        self.firstFailureMs = firstFailureMs
        self.lastFailureMs = lastFailureMs
    }
}

public struct PartitionID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32
    public init(topic: String, partition: Int32) { self.topic = topic; self.partition = partition }
    public static func < (a: Self, b: Self) -> Bool { (a.topic, a.partition) < (b.topic, b.partition) }
    public var description: String { "\(topic)[\(partition)]" }

    /// The loop looks partitions up several times per record. A member reads a few topics of many
    /// partitions, so the partition number and the topic's length spread the keys; hashing the whole
    /// topic name every time was most of the lookup. Equality still compares the names.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(partition)
        hasher.combine(topic.utf8.count)
    }
}

extension KafkaRecord {
    public var partitionID: PartitionID { PartitionID(topic: topic, partition: partition) }
}

/// Polled records waiting, per partition in offset order, in the order partitions first arrived.
struct PartitionQueues: Sendable {
    private var order: [PartitionID] = []
    private var records: [PartitionID: [KafkaRecord]] = [:]
    private(set) var count = 0

    /// Queues the records of the partitions in `held`; the others are dropped. A poll returns each
    /// partition's records as one run, so the partition is looked up once per run, not per record.
    mutating func append(_ polled: [KafkaRecord], keeping held: Set<PartitionID>) {
        var start = polled.startIndex
        while start < polled.endIndex {
            let id = polled[start].partitionID
            var end = start + 1
            while end < polled.endIndex, polled[end].partition == id.partition, polled[end].topic == id.topic { end += 1 }
            defer { start = end }
            guard held.contains(id) else { continue }
            // Taken out of the dictionary, so the list is unique and grows in place.
            let queued = records.removeValue(forKey: id)
            if queued == nil { order.append(id) }
            var list = queued ?? []
            for record in polled[start..<end] {
                // A record at or before one already queued is a redelivery of it: keep one copy.
                if let last = list.last, record.offset <= last.offset { continue }
                list.append(record)
                count += 1
            }
            records[id] = list
        }
    }

    func head(of id: PartitionID) -> KafkaRecord? { records[id]?.first }

    /// Up to `limit` records, oldest of each partition first, taking partitions round-robin so a
    /// busy partition cannot starve the others.
    func take(_ limit: Int, excluding skipped: Set<PartitionID>) -> [KafkaRecord] {
        // Each list looked up once, then round r takes the r-th record of every list that has one
        // (a dictionary lookup and update per record was a third of the loop's own time).
        let lists = order.compactMap { id in skipped.contains(id) ? nil : records[id] }.filter { !$0.isEmpty }
        var taken: [KafkaRecord] = []
        taken.reserveCapacity(min(limit, count))
        var position = 0
        while taken.count < limit {
            var progressed = false
            for list in lists where taken.count < limit && position < list.count {
                taken.append(list[position])
                progressed = true
            }
            guard progressed else { break }
            position += 1
        }
        return taken
    }

    /// Per partition, the highest offset among `records`.
    static func lastOffsets(_ records: [KafkaRecord]) -> [PartitionID: Int64] {
        var through: [PartitionID: Int64] = [:]
        for record in records {
            let id = record.partitionID
            through[id] = max(through[id] ?? .min, record.offset)
        }
        return through
    }

    /// Removes finished records, per partition every record up to and including the offset given: a
    /// prefix, since work is taken from the heads.
    mutating func remove(through: [PartitionID: Int64]) {
        for (id, last) in through {
            // Taken out of the dictionary, so the list is unique and loses its prefix in place.
            guard var list = records.removeValue(forKey: id) else { continue }
            let done = list.prefix { $0.offset <= last }.count
            list.removeFirst(done)
            count -= done
            if list.isEmpty {
                order.removeAll { $0 == id }
            } else {
                records[id] = list
            }
        }
    }
}
