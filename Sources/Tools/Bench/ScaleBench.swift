import Configuration
import Domain
import Foundation
import Kafka
import LocalStack
import Postgres
import Runtime
import Stages
import Store
import Synchronization

/// `storeledger bench scale`: what more consumer-group members per stage buy on this machine, and
/// what a rebalance costs (BENCHMARKS.md, "Scale-out"). The stages are `bench pipeline`'s (dedupe →
/// classify → membership over its pre-filled decoded events, each member a `StageRunner` with its
/// own consumer and PostgreSQL connection, as one `storeledger worker <stage>` process is) on the
/// embedded broker and a private PostgreSQL, fresh for every measurement.
///
/// 1. Throughput with 1, 2 and 3 members per stage: `--events` (default 20,000; --quick 5,000)
///    pre-filled, timed from the first ledger entry (after the groups joined; `_wall`: from the
///    start) until the ledger holds every entry.
/// 2. Rebalance pauses, under a steady feed of decoded events at half the 1-member rate: a second
///    member joins every stage, later it leaves again (SIGTERM-like: stop, commit, leave the group).
///    A stage's pause is the longest stretch without a processed batch from the change until its
///    group works with the new members (every member has processed a batch since the change).
/// Consumers use the session timeout of `storeledger dev` (Setting.kafkaSessionTimeoutMs,
/// default here 6000): on the embedded broker a rebalance waits about that minus one second.
public enum ScaleBench {
    static let partitions: Int32 = 24  // divisible by 1, 2 and 3 members; keeps each partition under the mock's 5 MiB
    static let stageNames = ["dedupe", "classify", "membership"]

    public static func run(_ arguments: Arguments) throws -> Int32 {
        let events = arguments.has("quick") ? 5_000 : try arguments.int("events", default: 20_000)
        guard events >= PipelineBench.perSubscription * 10 else { throw UsageError("--events must be at least \(PipelineBench.perSubscription * 10)") }
        let sessionMs = try BenchConfiguration.read(arguments).sessionTimeoutMs
        var figures: [(String, Double)] = [("events", Double(events)), ("partitions", Double(partitions)),
                                           ("session_timeout_ms", Double(sessionMs))]
        var oneMemberRate = 0.0
        for members in 1...3 {
            let result = try throughput(members: members, events: events, sessionMs: sessionMs)
            if members == 1 { oneMemberRate = result.rate }
            let suffix = "\(members)_member\(members == 1 ? "" : "s")"
            figures += [("events_per_second_\(suffix)", result.rate),
                        ("events_per_second_wall_\(suffix)", result.wallRate),
                        ("cpu_microseconds_per_event_\(suffix)", result.cpuPerEvent),
                        ("lock_wait_sample_share_\(suffix)", result.lockWaitShare),
                        ("deadlocks_\(suffix)", result.deadlocks)]
        }
        figures += try rebalancePauses(feedRate: max(200, oneMemberRate / 2), sessionMs: sessionMs)
        report(figures, json: arguments.has("json"))
        return 0
    }

    static func report(_ figures: [(String, Double)], json: Bool) {
        BenchReport.write(suite: "scale", title: "scale (dedupe → classify → membership; 1, 2, 3 members per stage; rebalance pauses)",
                          figures, json: json, nameWidth: 40)
    }

    // MARK: Throughput

    /// Also samples PostgreSQL's lock table every 20 ms: the share of samples in which some backend
    /// waited for a lock (two members applying two subscriptions of one user serialise on the user's
    /// row), and the deadlocks PostgreSQL counted.
    static func throughput(members: Int, events: Int, sessionMs: Int)
        throws -> (rate: Double, wallRate: Double, cpuPerEvent: Double, lockWaitShare: Double, deadlocks: Double) {
        let rig = try Rig(sessionMs: sessionMs)
        defer { rig.close() }
        let subscriptions = events / PipelineBench.perSubscription
        _ = try PipelineBench.prefill(kafka: rig.fill, run: rig.run, subscriptions: subscriptions)
        let expected = subscriptions * PipelineBench.perSubscription + subscriptions
        let deadlocksBefore = try deadlocks(rig.db)
        let sampling = StopSignal()
        let samples = LockSamples()
        let sampler = Thread {
            guard let db = try? PGConnection(url: rig.databaseURL) else { return }
            defer { db.close() }
            while !sampling.isStopped {
                // Backends waiting for a lock, by the statement that waits (its first words).
                if let statements = try? InspectionQueries(db).statementsWaitingForLocks() {
                    samples.state.withLock { state in
                        state.all += 1
                        if !statements.isEmpty { state.waiting += 1 }
                        for statement in statements { state.byStatement[statement, default: 0] += 1 }
                    }
                }
                _ = sampling.wait(timeout: .milliseconds(20))
            }
        }
        sampler.start()
        defer { sampling.stop() }
        let cpuStart = CPUTime.now(postgres: rig.postgres)
        let started = ContinuousClock.now
        for stage in stageNames { for member in 0..<members { try rig.startMember(stage, member: member) } }
        let deadline = ContinuousClock.now + .seconds(max(180, events / 200))
        var inserted = 0
        var firstEntry: ContinuousClock.Instant?
        while inserted < expected, ContinuousClock.now < deadline {
            if let failure = rig.failure { throw PipelineBenchFailure("stage failed: \(failure)") }
            Thread.sleep(forTimeInterval: 0.05)
            inserted = try PipelineBench.ledgerSequence(rig.db)
            if firstEntry == nil, inserted > 0 { firstEntry = .now }
            if inserted >= expected { inserted = try PipelineBench.ledgerCount(rig.db) }
        }
        let done = ContinuousClock.now
        let wall = PipelineBench.seconds(done - started)
        let steady = PipelineBench.seconds(done - (firstEntry ?? started))
        let cpu = CPUTime.now(postgres: rig.postgres) - cpuStart
        sampling.stop()
        rig.stopAll()
        guard inserted >= expected else { throw PipelineBenchFailure("timed out: \(inserted) of \(expected) ledger entries with \(members) members") }
        let counted = samples.state.withLock { $0 }
        for (statement, count) in counted.byStatement.sorted(by: { $0.value > $1.value }).prefix(3) {
            FileHandle.standardError.write(Data("bench scale: \(members) members: waiting for a lock in \(count) of \(counted.all) samples: \(statement)\n".utf8))
        }
        return (Double(events) / steady, Double(events) / wall, (cpu.process + cpu.postgres) / Double(events) * 1e6,
                Double(counted.waiting) / Double(max(1, counted.all)), Double(try deadlocks(rig.db) - deadlocksBefore))
    }

    static func deadlocks(_ db: PGConnection) throws -> Int64 {
        try InspectionQueries(db).deadlocks()
    }

    // MARK: Rebalance pauses

    static func rebalancePauses(feedRate: Double, sessionMs: Int) throws -> [(String, Double)] {
        let rig = try Rig(sessionMs: sessionMs)
        defer { rig.close() }
        let feeding = StopSignal()
        let feeder = Thread {
            // Half-second chunks of fresh subscriptions, each a block of complete journeys.
            var chunk = 0
            let perChunk = max(1, Int(feedRate / 2) / PipelineBench.perSubscription)
            while !feeding.isStopped {
                let tick = ContinuousClock.now
                _ = try? PipelineBench.prefill(kafka: rig.fill, run: "\(rig.run)c\(chunk)", subscriptions: perChunk)
                chunk += 1
                _ = feeding.wait(timeout: max(.zero, .milliseconds(500) - (ContinuousClock.now - tick)))
            }
        }
        feeder.start()
        defer { feeding.stop() }
        for stage in stageNames { try rig.startMember(stage, member: 0) }
        // Steady state first: every stage working for 3 s.
        let steadyFrom = try rig.waitUntil("every stage processes batches", timeout: 120) { rig.progress.everyStageBatched(since: nil) }
        Thread.sleep(forTimeInterval: 3)
        let baselineEnd = ContinuousClock.now
        var figures: [(String, Double)] = []
        for stage in stageNames {
            figures.append(("steady_longest_gap_ms_\(stage)", rig.progress.longestGap(stage, from: steadyFrom, to: baselineEnd) * 1000))
        }

        // Join: a second member per stage.
        let joined = ContinuousClock.now
        for stage in stageNames { try rig.startMember(stage, member: 1) }
        let joinSettled = try rig.waitUntil("both members of every stage process batches after the join", timeout: 120) {
            rig.progress.joinSettled(since: joined)
        }
        for stage in stageNames {
            figures.append(("join_pause_ms_\(stage)", rig.progress.longestGap(stage, from: joined, to: joinSettled) * 1000))
        }
        figures.append(("join_settled_ms", PipelineBench.seconds(joinSettled - joined) * 1000))
        Thread.sleep(forTimeInterval: 2)

        // Leave: the second members stop (finish the batch, commit, leave the group).
        let left = ContinuousClock.now
        for stage in stageNames { rig.stopMember(stage, member: 1) }
        let leaveSettled = try rig.waitUntil("the remaining members process the leavers' partitions", timeout: 120) {
            rig.progress.leaveSettled(since: left)
        }
        for stage in stageNames {
            figures.append(("leave_pause_ms_\(stage)", rig.progress.longestGap(stage, from: left, to: leaveSettled) * 1000))
        }
        figures.append(("leave_settled_ms", PipelineBench.seconds(leaveSettled - left) * 1000))
        figures.append(("feed_events_per_second", feedRate))
        feeding.stop()
        rig.stopAll()
        if let failure = rig.failure { throw PipelineBenchFailure("stage failed: \(failure)") }
        return figures
    }
}

/// One measurement's infrastructure: a fresh embedded broker and PostgreSQL, and the members.
private final class Rig: @unchecked Sendable {
    // @unchecked: `members` is touched only under `lock`; the rest is set in init.
    let stack: LocalStack
    let postgres: EmbeddedPostgres
    let databaseURL: String
    let db: PGConnection
    let kafka: KafkaConfig
    let fill: KafkaConfig
    let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
    let progress = BatchProgress()
    private let lock = NSLock()
    private var members: [String: (stop: StopSignal, done: DispatchSemaphore)] = [:]
    private let failures = Mutex<[String]>([])

    init(sessionMs: Int) throws {
        // The broker in this process: its CPU counts in the figures, as the members' does.
        stack = try LocalStack.start(.benchmark(partitions: Int(ScaleBench.partitions)))
        postgres = stack.postgres!
        databaseURL = postgres.url
        db = try PGConnection(url: databaseURL)
        var config = KafkaConfig(bootstrapServers: stack.bootstrap, clientId: "bench-scale")
        config.sessionTimeout = .milliseconds(sessionMs)
        config.heartbeatInterval = .milliseconds(min(1_000, max(100, sessionMs / 6)))
        config.fetchMaxWait = .milliseconds(10)
        kafka = config
        var fill = config
        fill.linger = .milliseconds(20)
        self.fill = fill
    }

    var failure: String? { failures.withLock { $0.first } }

    func startMember(_ stage: String, member: Int) throws {
        let inner: any StageLogic
        switch stage {
        case "dedupe": inner = DedupeStage()
        case "classify": inner = ClassifyStage(catalog: PipelineBench.catalog)
        default: inner = MembershipStage()
        }
        var config = StageRunnerConfig(kafka: kafka, databaseURL: databaseURL, groupId: "bench-\(run)-\(stage)")
        config.maxBatch = 500
        let runner = ScaleRunnerHandoff(runner: StageRunner(logic: ProgressStage(inner: inner, member: member, progress: progress), config: config))
        let stop = StopSignal()
        let done = DispatchSemaphore(value: 0)
        lock.withLock { members["\(stage)/\(member)"] = (stop, done) }
        let thread = Thread { [self] in
            defer { done.signal() }
            do { try runner.runner.run(until: stop) } catch {
                failures.withLock { $0.append("\(stage) member \(member): \(error)") }
            }
        }
        thread.stackSize = 4 << 20
        thread.start()
    }

    /// Stops a member as SIGTERM stops a worker and waits until its runner returned (it left the group).
    func stopMember(_ stage: String, member: Int) {
        guard let entry = lock.withLock({ members.removeValue(forKey: "\(stage)/\(member)") }) else { return }
        entry.stop.stop()
        entry.done.wait()
    }

    func stopAll() {
        let all = lock.withLock { () -> [(stop: StopSignal, done: DispatchSemaphore)] in
            defer { members = [:] }
            return Array(members.values)
        }
        for entry in all { entry.stop.stop() }
        for entry in all { entry.done.wait() }
    }

    /// Polls `condition` every 20 ms; returns when it first held.
    func waitUntil(_ what: String, timeout: TimeInterval, _ condition: () -> Bool) throws -> ContinuousClock.Instant {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let failure { throw PipelineBenchFailure("stage failed: \(failure)") }
            if condition() { return .now }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw PipelineBenchFailure("timed out after \(Int(timeout)) s waiting until \(what)")
    }

    func close() {
        stopAll()
        db.close()
        stack.stop()
    }
}

private final class LockSamples: Sendable {
    let state = Mutex<(all: Int, waiting: Int, byStatement: [String: Int])>((0, 0, [:]))
}

/// When each stage's members processed batches.
private final class BatchProgress: Sendable {
    private let batches = Mutex<[String: [(member: Int, at: ContinuousClock.Instant, partitions: Set<Int32>)]]>([:])

    func record(_ stage: String, member: Int, partitions: Set<Int32>) {
        let now = ContinuousClock.now
        batches.withLock { $0[stage, default: []].append((member, now, partitions)) }
    }

    func everyStageBatched(since: ContinuousClock.Instant?) -> Bool {
        batches.withLock { all in ScaleBench.stageNames.allSatisfy { stage in (all[stage] ?? []).contains { since == nil || $0.at > since! } } }
    }

    /// Every stage's new member 1 processed a batch after `since` (so the group rebalanced), and member 0
    /// one after that (it works again too).
    func joinSettled(since: ContinuousClock.Instant) -> Bool {
        batches.withLock { all in
            ScaleBench.stageNames.allSatisfy { stage in
                let list = all[stage] ?? []
                guard let first = list.first(where: { $0.member == 1 && $0.at > since }) else { return false }
                return list.contains { $0.member == 0 && $0.at > first.at }
            }
        }
    }

    /// Every stage's member 0 processed, after `since`, a partition that member 1 held before it.
    func leaveSettled(since: ContinuousClock.Instant) -> Bool {
        batches.withLock { all in
            ScaleBench.stageNames.allSatisfy { stage in
                let list = all[stage] ?? []
                let theirs = list.filter { $0.member == 1 && $0.at <= since }.reduce(into: Set<Int32>()) { $0.formUnion($1.partitions) }
                return list.contains { $0.member == 0 && $0.at > since && !$0.partitions.isDisjoint(with: theirs) }
            }
        }
    }

    /// The longest stretch in `from...to` without a batch of `stage`, counting only stretches that
    /// end in a batch (from `from`, or from the batch before).
    func longestGap(_ stage: String, from: ContinuousClock.Instant, to: ContinuousClock.Instant) -> Double {
        let times = batches.withLock { ($0[stage] ?? []).map(\.at) }.filter { $0 > from && $0 <= to }.sorted()
        var previous = from
        var longest = Duration.zero
        for time in times {
            longest = max(longest, time - previous)
            previous = time
        }
        return PipelineBench.seconds(longest)
    }
}

private struct ProgressStage: StageLogic {
    let inner: any StageLogic
    let member: Int
    let progress: BatchProgress
    var name: String { inner.name }
    var inputTopics: [String] { inner.inputTopics }
    var usesDatabase: Bool { inner.usesDatabase }

    func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        let result = try inner.process(records, database: database)
        progress.record(inner.name, member: member, partitions: Set(records.map(\.partition)))
        return result
    }
}

/// Safe: built on the caller's thread and handed to exactly one runner thread, which alone uses it.
private struct ScaleRunnerHandoff: @unchecked Sendable {
    let runner: StageRunner
}
