import Kafka
import XCTest

/// Contract: the one consumer loop, as transcripts of (event, time) → action without a broker.
/// Records of a partition are processed in order; a failing record is isolated by halving the
/// batch; permanent failures are dead-lettered at once, retryable ones pause only their partition
/// and back off exponentially (capped, jittered through the injected function) until
/// `maxAttempts`, then `retry_exhausted`; an outage pauses everything, reports not-ready and
/// commits nothing; a critical failure stops without committing; a rebalance drops held work;
/// a stop finishes the unit in progress first; the loop polls at least every `pollTimeout`.
final class ConsumerLoopMachineTests: XCTestCase {
    let a = PartitionID(topic: "in", partition: 0)
    let b = PartitionID(topic: "in", partition: 1)

    func record(_ partition: PartitionID, _ offset: Int64) -> KafkaRecord {
        KafkaRecord(topic: partition.topic, partition: partition.partition, offset: offset, key: nil,
                    value: Array("\(partition)@\(offset)".utf8), headers: [], timestamp: 0)
    }

    func machine(maxBatch: Int = 4, maxAttempts: Int = 3) -> ConsumerLoopMachine {
        var policy = ConsumerLoopMachine.Policy()
        policy.maxBatch = maxBatch
        policy.maxAttempts = maxAttempts
        policy.pollTimeout = .milliseconds(200)
        policy.baseBackoff = .milliseconds(100)
        policy.maxBackoff = .milliseconds(1000)
        // Deterministic "jitter": the full capped backoff.
        return ConsumerLoopMachine(policy: policy, jitter: { $0 })
    }

    func poll(_ timeout: Int64 = 200, max: Int = 4) -> ConsumerLoopMachine.Action {
        .poll(maxRecords: max, timeout: .milliseconds(timeout))
    }

    /// Polls once with `records` on partitions {a, b} (generation 1) at time 0.
    func start(_ loop: inout ConsumerLoopMachine, _ records: [KafkaRecord], at time: Int64 = 0) -> ConsumerLoopMachine.Action {
        XCTAssertEqual(loop.next(.started, nowMs: time), poll())
        return loop.next(.polled(records, assignment: [a, b], generation: 1), nowMs: time)
    }

    /// Drives process → publish → commit → offsets for a batch that succeeds with one output per record.
    func succeed(_ loop: inout ConsumerLoopMachine, at time: Int64, outputs: Int = 1) -> ConsumerLoopMachine.Action {
        if outputs > 0 {
            XCTAssertEqual(loop.next(.processed(outputs: outputs), nowMs: time), .publish)
            XCTAssertEqual(loop.next(.done, nowMs: time), .commitTransaction)
        } else {
            XCTAssertEqual(loop.next(.processed(outputs: 0), nowMs: time), .commitTransaction)
        }
        return loop.next(.done, nowMs: time)
    }

    func testHappyBatchProcessesPublishesCommitsTransactionThenOffsets() {
        var loop = machine()
        let records = [record(a, 0), record(a, 1), record(b, 7)]
        // Partitions are taken round-robin, each in offset order.
        XCTAssertEqual(start(&loop, records), .process([record(a, 0), record(b, 7), record(a, 1)]))
        XCTAssertEqual(succeed(&loop, at: 5), .commitOffsets([a: 2, b: 8]))
        XCTAssertEqual(loop.next(.done, nowMs: 6), poll())
        XCTAssertEqual(loop.queuedCount, 0)
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 210), poll())
        XCTAssertTrue(loop.isReady, "ready once a poll completed with the partitions held")
    }

    /// The bad record behind another partition's records: bisecting the failed batch isolates it (halving
    /// only the batch limit never did: each retried batch took the other partition's head and it again).
    func testABadRecordBehindAnotherPartitionIsIsolatedAndTheOthersFlow() {
        var loop = machine(maxBatch: 4)
        let records = [record(a, 0), record(b, 0), record(a, 1), record(a, 2), record(a, 3), record(a, 4)]
        let first = [record(a, 0), record(b, 0), record(a, 1), record(a, 2)]
        XCTAssertEqual(start(&loop, records), .process(first))
        let bad = ConsumerLoopMachine.Failure.permanent(kind: "database_rejected", reason: "bad value")
        XCTAssertEqual(loop.next(.failed(bad), nowMs: 1), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 1), .process([record(a, 0), record(b, 0)]))
        XCTAssertEqual(loop.next(.failed(bad), nowMs: 2), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 2), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 3), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 3), .process([record(b, 0)]))
        XCTAssertEqual(loop.next(.failed(bad), nowMs: 4), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 4), .deadLetter(DeadLetterOrder(record: record(b, 0), kind: "database_rejected",
                                                                               reason: "bad value", attempts: 1,
                                                                               firstFailureMs: 4, lastFailureMs: 4)))
        XCTAssertEqual(loop.next(.done, nowMs: 5), .commitOffsets([b: 1]))
        // The rest flows again.
        XCTAssertEqual(loop.next(.done, nowMs: 5), .process([record(a, 1), record(a, 2), record(a, 3), record(a, 4)]))
        XCTAssertEqual(succeed(&loop, at: 6), .commitOffsets([a: 5]))
    }

    /// A due retry and other work take turns: retries that keep failing (and may block while Apple
    /// is slow) cannot starve the partitions that flow.
    func testDueRetriesTakeTurnsWithOtherWork() {
        var loop = machine(maxBatch: 1)
        let c = PartitionID(topic: "in", partition: 2)
        let held: Set<PartitionID> = [a, b, c]
        XCTAssertEqual(loop.next(.started, nowMs: 0), poll(max: 1))
        XCTAssertEqual(loop.next(.polled([record(a, 0), record(c, 0), record(b, 0), record(b, 1)], assignment: held, generation: 1),
                                 nowMs: 0), .process([record(a, 0)]))
        let busy = ConsumerLoopMachine.Failure.awaitingService("Apple busy")
        XCTAssertEqual(loop.next(.failed(busy), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), .process([record(c, 0)]))
        XCTAssertEqual(loop.next(.failed(busy), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([c]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), .process([record(b, 0)]))
        XCTAssertEqual(succeed(&loop, at: 150), .commitOffsets([b: 1]))
        // Both retries are due (100 ms): a's goes first.
        XCTAssertEqual(loop.next(.done, nowMs: 150), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(busy), nowMs: 160), .rollbackTransaction)
        // c's retry is still due, but after a retry b's turn comes first.
        XCTAssertEqual(loop.next(.done, nowMs: 160), .process([record(b, 1)]))
        XCTAssertEqual(succeed(&loop, at: 170), .commitOffsets([b: 2]))
        XCTAssertEqual(loop.next(.done, nowMs: 170), .process([record(c, 0)]))
    }

    func testEmptyOutputsSkipPublish() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 1, outputs: 0), .commitOffsets([a: 1]))
    }

    func testOneBadRecordIsIsolatedByHalvingAndTheGoodOnesPass() {
        var loop = machine()
        let records = [record(a, 0), record(a, 1), record(a, 2), record(a, 3)]
        XCTAssertEqual(start(&loop, records), .process(records))
        // A PostgreSQL error caused by a3's value fails the whole batch.
        XCTAssertEqual(loop.next(.failed(.permanent(kind: "database_rejected", reason: "bad value")), nowMs: 1), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 1), .process(Array(records[0..<2])))
        XCTAssertEqual(succeed(&loop, at: 2), .commitOffsets([a: 2]))
        // The bad record is in the other half: halved again, never tried whole.
        XCTAssertEqual(loop.next(.done, nowMs: 2), .process([records[2]]))
        XCTAssertEqual(succeed(&loop, at: 4), .commitOffsets([a: 3]))
        XCTAssertEqual(loop.next(.done, nowMs: 4), .process([records[3]]))
        XCTAssertEqual(loop.next(.failed(.permanent(kind: "database_rejected", reason: "bad value")), nowMs: 5), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 5), .deadLetter(DeadLetterOrder(record: records[3], kind: "database_rejected",
                                                                               reason: "bad value", attempts: 1,
                                                                               firstFailureMs: 5, lastFailureMs: 5)))
        XCTAssertEqual(loop.next(.done, nowMs: 6), .commitOffsets([a: 4]))
        XCTAssertEqual(loop.next(.done, nowMs: 6), poll())
        XCTAssertEqual(loop.queuedCount, 0)
    }

    func testRetryablePausesOnlyItsPartitionBacksOffAndResumes() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(.retryable("Apple unreachable")), nowMs: 10), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 10), .pause([a]))
        XCTAssertFalse(loop.isReady, "not ready while a partition is paused")
        // Waiting for the retry is polling: the member stays in the group; the wait is capped by pollTimeout.
        XCTAssertEqual(loop.next(.done, nowMs: 10), poll(100))
        // Partition b keeps flowing meanwhile; a's later record waits behind its head.
        XCTAssertEqual(loop.next(.polled([record(b, 0), record(a, 1)], assignment: [a, b], generation: 1), nowMs: 20),
                       .process([record(b, 0)]))
        XCTAssertEqual(succeed(&loop, at: 21), .commitOffsets([b: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 21), poll(89))
        // Due: the head is retried alone.
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 110), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 111), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 111), .resume([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 111), .process([record(a, 1)]))
    }

    func testRetryExhaustionDeadLettersWithAttemptsAndFailureTimes() {
        var loop = machine(maxAttempts: 3)
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        _ = loop.next(.failed(.retryable("timeout")), nowMs: 0)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 100), .process([record(a, 0)]))
        _ = loop.next(.failed(.retryable("timeout")), nowMs: 100)
        // Second backoff doubles.
        XCTAssertEqual(loop.next(.done, nowMs: 100), poll(200))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 300), .process([record(a, 0)]))
        _ = loop.next(.failed(.retryable("timeout again")), nowMs: 300)
        XCTAssertEqual(loop.next(.done, nowMs: 300),
                       .deadLetter(DeadLetterOrder(record: record(a, 0), kind: "retry_exhausted", reason: "timeout again",
                                                   attempts: 3, firstFailureMs: 0, lastFailureMs: 300)))
        XCTAssertEqual(loop.next(.done, nowMs: 301), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 301), .resume([a]))
    }

    /// Apple's verifyReceipt saying "try again": retried past `maxAttempts` (its partition alone
    /// paused), dead-lettered only once it has failed for `patientRetryLimit`.
    func testAwaitingServiceOutlastsMaxAttemptsUntilTheTimeLimit() {
        var loop = machine(maxAttempts: 3)
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        var now: Int64 = 0
        for _ in 0..<10 {
            XCTAssertEqual(loop.next(.failed(.awaitingService("21005")), nowMs: now), .rollbackTransaction)
            var action = loop.next(.done, nowMs: now)
            if action == .pause([a]) { action = loop.next(.done, nowMs: now) }
            guard case .poll = action else { return XCTFail("expected a poll, got \(action)") }
            now += 1_000
            XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: now), .process([record(a, 0)]))
        }
        let limit = ConsumerLoopMachine.patientRetryLimit.milliseconds
        XCTAssertEqual(loop.next(.failed(.awaitingService("21005")), nowMs: limit), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: limit),
                       .deadLetter(DeadLetterOrder(record: record(a, 0), kind: "retry_exhausted", reason: "21005",
                                                   attempts: 11, firstFailureMs: 0, lastFailureMs: limit)))
    }

    func testBackoffIsExponentialAndCapped() {
        var policy = ConsumerLoopMachine.Policy()
        policy.baseBackoff = .milliseconds(100)
        policy.maxBackoff = .seconds(10)
        policy.maxAttempts = 1000
        policy.pollTimeout = .seconds(60)
        var loop = ConsumerLoopMachine(policy: policy, jitter: { $0 })
        _ = loop.next(.started, nowMs: 0)
        var now: Int64 = 0
        var waits: [Int64] = []
        XCTAssertEqual(loop.next(.polled([record(a, 0)], assignment: [a], generation: 1), nowMs: now), .process([record(a, 0)]))
        for _ in 0..<10 {
            _ = loop.next(.failed(.retryable("x")), nowMs: now)
            var action = loop.next(.done, nowMs: now)
            if action == .pause([a]) { action = loop.next(.done, nowMs: now) }
            guard case .poll(_, let timeout) = action else { return XCTFail("expected a poll, got \(action)") }
            waits.append(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
            now += waits.last!
            XCTAssertEqual(loop.next(.polled([], assignment: [a], generation: 1), nowMs: now), .process([record(a, 0)]))
        }
        XCTAssertEqual(waits, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000])
    }

    func testOutagePausesEverythingCommitsNothingAndRecoversWhenTheRetrySucceeds() {
        var loop = machine()
        let records = [record(a, 0), record(b, 0)]
        XCTAssertEqual(start(&loop, records), .process(records))
        XCTAssertEqual(loop.next(.failed(.infrastructure("PostgreSQL unreachable")), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a, b]))
        XCTAssertTrue(loop.isOutage)
        XCTAssertFalse(loop.isReady)
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        // Not due yet: poll again (never process, never commit).
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 50), poll(50))
        // Due: the same batch again; it fails again (no attempt counted against the records).
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 100), .process(records))
        XCTAssertEqual(loop.next(.failed(.infrastructure("PostgreSQL unreachable")), nowMs: 100), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 100), poll(200))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 300), .process(records))
        XCTAssertEqual(succeed(&loop, at: 301), .commitOffsets([a: 1, b: 1]))
        XCTAssertFalse(loop.isOutage)
        XCTAssertEqual(loop.next(.done, nowMs: 301), .resume([a, b]))
        XCTAssertEqual(loop.next(.done, nowMs: 301), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 400), poll())
        XCTAssertTrue(loop.isReady)
    }

    /// Apple's `Retry-After`: the outage waits as long as asked (not the 100 ms backoff), capped at
    /// `maxThrottleWait`; a shorter ask than the backoff keeps the backoff.
    func testThrottledOutageWaitsAsLongAsAskedWithinTheCap() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(.throttled("429", retryAfterMs: 120_000)), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a, b]))
        XCTAssertTrue(loop.isOutage)
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 60_000), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 119_999), poll(1))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 120_000), .process([record(a, 0)]))

        let cap = ConsumerLoopMachine.maxThrottleWait.milliseconds
        XCTAssertEqual(loop.next(.failed(.throttled("429", retryAfterMs: 86_400_000)), nowMs: 120_000), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 120_000), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 120_000 + cap - 1), poll(1))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 120_000 + cap), .process([record(a, 0)]))

        // Third outage attempt: backoff 400 ms beats an ask of 1 ms.
        let now = 120_000 + cap
        XCTAssertEqual(loop.next(.failed(.throttled("429", retryAfterMs: 1)), nowMs: now), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: now), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: now + 399), poll(1))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: now + 400), .process([record(a, 0)]))
    }

    func testOutageEvenOutlastingRetriesNeverDeadLetters() {
        var loop = machine(maxAttempts: 2)
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        var now: Int64 = 0
        for _ in 0..<5 {
            _ = loop.next(.failed(.infrastructure("down")), nowMs: now)
            var action = loop.next(.done, nowMs: now)
            while case .pause = action { action = loop.next(.done, nowMs: now) }
            guard case .poll = action else { return XCTFail("expected a poll, got \(action)") }
            now += 10_000
            XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: now), .process([record(a, 0)]))
        }
    }

    /// A rebalance during an outage drops the batch the outage was holding back: once its retry is
    /// due, the new assignment is resumed and read (it was found paused for good once, with nothing
    /// queued that could end the outage).
    func testARebalanceDuringAnOutageResumesTheNewAssignmentWhenTheRetryIsDue() {
        var loop = machine()
        let c = PartitionID(topic: "in", partition: 2)
        XCTAssertEqual(start(&loop, [record(a, 0), record(b, 0)]), .process([record(a, 0), record(b, 0)]))
        XCTAssertEqual(loop.next(.failed(.infrastructure("PostgreSQL unreachable")), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a, b]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, c], generation: 2), nowMs: 10), .resume([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 10), .pause([a, c]), "still an outage: the new partitions wait too")
        XCTAssertEqual(loop.next(.done, nowMs: 10), poll(90))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, c], generation: 2), nowMs: 100), .resume([a, c]))
        XCTAssertFalse(loop.isOutage)
        XCTAssertEqual(loop.next(.done, nowMs: 100), poll())
        XCTAssertEqual(loop.next(.polled([record(a, 0)], assignment: [a, c], generation: 2), nowMs: 110), .process([record(a, 0)]))
    }

    /// The same after a fenced batch: its records belong to a newer owner now, nothing is queued.
    func testAFenceDuringAnOutageResumesWhenTheRetryIsDue() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(.infrastructure("down")), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a, b]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 100), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(.fenced("a newer owner claimed in[0]")), nowMs: 100), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 100), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 300), .resume([a, b]))
        XCTAssertFalse(loop.isOutage)
    }

    func testCriticalStopsWithoutCommitting() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.processed(outputs: 1), nowMs: 1), .publish)
        XCTAssertEqual(loop.next(.failed(.critical("producer fenced")), nowMs: 1), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 1), .stop(exitCode: 1, reason: "producer fenced"))
        XCTAssertEqual(loop.next(.done, nowMs: 2), .stop(exitCode: 0, reason: "stopped"), "stays stopped")
    }

    func testFailedTransactionCommitRollsBackAndRetries() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.processed(outputs: 0), nowMs: 1), .commitTransaction)
        XCTAssertEqual(loop.next(.failed(.retryable("serialization failure")), nowMs: 1), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 1), .pause([a]))
    }

    func testFailedOffsetCommitMovesOnAndIsRetriedWhenNothingElseComes() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 1), .commitOffsets([a: 1]))
        // Effects are durable: the record is not redone; the poll waits only until the commit's retry.
        XCTAssertEqual(loop.next(.failed(.infrastructure("not coordinator")), nowMs: 1), poll(100))
        XCTAssertEqual(loop.queuedCount, 0)
        // Nothing new arrives: the same offsets go again once the backoff passed, then back off longer.
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 101), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.failed(.infrastructure("not coordinator")), nowMs: 101), poll(200))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 200), poll(101))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 301), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 301), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 900), poll(), "committed: nothing left to send")
    }

    func testOffsetsOfAFailedCommitTravelWithTheNextBatchCommit() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 1), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.failed(.infrastructure("not coordinator")), nowMs: 1), poll(100))
        XCTAssertEqual(loop.next(.polled([record(b, 4)], assignment: [a, b], generation: 1), nowMs: 20), .process([record(b, 4)]))
        XCTAssertEqual(succeed(&loop, at: 21), .commitOffsets([a: 1, b: 5]))
    }

    func testARebalanceForgetsOffsetsThatFailedToCommit() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 1), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.failed(.infrastructure("rebalance in progress")), nowMs: 1), poll(100))
        // After the rebalance another member may have committed a further; ours must not overwrite it.
        XCTAssertEqual(loop.next(.polled([], assignment: [a], generation: 2), nowMs: 500), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a], generation: 2), nowMs: 800), poll())
    }

    func testRebalanceDropsHeldWorkAndResumesWhatWasPaused() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0), record(a, 1)]), .process([record(a, 0), record(a, 1)]))
        XCTAssertEqual(loop.next(.failed(.retryable("x")), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .process([record(a, 0)]))
        XCTAssertEqual(loop.next(.failed(.retryable("x")), nowMs: 0), .rollbackTransaction)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        // The group rebalanced; we hold a again (and now c). Records of a come again from the committed offset.
        let c = PartitionID(topic: "in", partition: 2)
        XCTAssertEqual(loop.next(.polled([], assignment: [a, c], generation: 3), nowMs: 10), .resume([a]))
        XCTAssertEqual(loop.queuedCount, 0)
        XCTAssertEqual(loop.next(.done, nowMs: 10), poll())
        XCTAssertEqual(loop.next(.polled([record(a, 0), record(b, 5)], assignment: [a, c], generation: 3), nowMs: 20),
                       .process([record(a, 0)]), "a record of a partition no longer held is dropped")
    }

    func testDuplicateFetchOfAQueuedRecordIsKeptOnce() {
        var loop = machine()
        XCTAssertEqual(loop.next(.started, nowMs: 0), poll())
        XCTAssertEqual(loop.next(.polled([record(a, 0), record(a, 1), record(a, 1)], assignment: [a], generation: 1), nowMs: 0),
                       .process([record(a, 0), record(a, 1)]))
    }

    func testStopFinishesTheUnitInProgressThenStops() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0), record(b, 0)]), .process([record(a, 0), record(b, 0)]))
        loop.requestStop()
        XCTAssertEqual(succeed(&loop, at: 1), .commitOffsets([a: 1, b: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 1), .stop(exitCode: 0, reason: "stop requested"))
    }

    func testStopWhileWaitingForARetryCommitsNothing() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0)]), .process([record(a, 0)]))
        _ = loop.next(.failed(.retryable("x")), nowMs: 0)
        XCTAssertEqual(loop.next(.done, nowMs: 0), .pause([a]))
        XCTAssertEqual(loop.next(.done, nowMs: 0), poll(100))
        loop.requestStop()
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 50), .stop(exitCode: 0, reason: "stop requested"))
    }

    func testPollsAtLeastEveryPollTimeoutWhileWorking() {
        var loop = machine(maxBatch: 1)
        XCTAssertEqual(loop.next(.started, nowMs: 0), poll(max: 1))
        XCTAssertEqual(loop.next(.polled([record(a, 0), record(a, 1), record(a, 2)], assignment: [a, b], generation: 1), nowMs: 0),
                       .process([record(a, 0)]))
        XCTAssertEqual(succeed(&loop, at: 100), .commitOffsets([a: 1]))
        XCTAssertEqual(loop.next(.done, nowMs: 100), .process([record(a, 1)]))
        XCTAssertEqual(succeed(&loop, at: 250), .commitOffsets([a: 2]))
        // 250 ms since the last poll: poll without waiting (work is queued), then go on.
        XCTAssertEqual(loop.next(.done, nowMs: 250), poll(0, max: 1))
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 251), .process([record(a, 2)]))
    }

    func testPollFailureMeansNotReadyUntilAPollSucceeds() {
        var loop = machine()
        XCTAssertEqual(start(&loop, []), poll())
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 200), poll())
        XCTAssertTrue(loop.isReady)
        XCTAssertEqual(loop.next(.failed(.infrastructure("all brokers down")), nowMs: 400), poll())
        XCTAssertFalse(loop.isReady)
        XCTAssertEqual(loop.next(.polled([], assignment: [a, b], generation: 1), nowMs: 600), poll())
        XCTAssertTrue(loop.isReady)
        XCTAssertEqual(loop.next(.failed(.critical("fatal")), nowMs: 800), .stop(exitCode: 1, reason: "fatal"))
    }

    func testFencedBatchIsDroppedUncommittedAndTheLoopPolls() {
        var loop = machine()
        XCTAssertEqual(start(&loop, [record(a, 0), record(b, 0)]), .process([record(a, 0), record(b, 0)]))
        XCTAssertEqual(loop.next(.processed(outputs: 0), nowMs: 1), .commitTransaction)
        XCTAssertEqual(loop.next(.failed(.fenced("a newer owner claimed in[0]")), nowMs: 1), .rollbackTransaction)
        // No offset commit, no dead letter, no retry: the newer owner reads these again.
        XCTAssertEqual(loop.next(.done, nowMs: 1), poll())
        XCTAssertEqual(loop.queuedCount, 0)
    }
}
