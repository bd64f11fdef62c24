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

/// `storeledger bench pipeline`: events/s through dedupe → classify → membership, the stage runners
/// in this process (one consumer group per stage, one member each by default as `storeledger dev`
/// runs them — Setting.benchMembers=2 scales out —, a PostgreSQL transaction per poll batch of 500 —
/// Setting.benchBatch —, as `storeledger worker` runs them), with the decoded topic pre-filled.
/// Embedded broker and PostgreSQL unless --bootstrap / --database-url are given.
///
/// The input: `--events` (default 100,000; --quick 10,000) decoded V2-style events over
/// events/5 subscriptions, linked to users by appAccountToken (10 % of users hold two, as after a
/// storefront change): SUBSCRIBED, three DID_RENEW and a
/// REFUND in the last period. Every event causes exactly one ledger entry, plus one link per
/// subscription, so the run is complete when the ledger holds events + subscriptions entries.
/// By default a subscription's five events follow each other in the topic, so one batch folds them
/// all from nothing; `--interleaved` writes every subscription's first event, then every second one,
/// and so on, so each batch loads what the earlier events left in PostgreSQL (purchases, states), as
/// the renewals of existing subscriptions do in production.
public enum PipelineBench {
    static let perSubscription = 5

    /// `--runs K` (default 3; --quick 1) runs on a stack of its own each and prints each run's figure of
    /// the goal, then the medians. First a warm-up run (`--warmup N` events, default the lesser of
    /// `--events` and 40,000; --quick none) that is printed and not counted: on the shared VMs these
    /// figures come from, the first run after a build or an idle minute cost 30 % more CPU for the same
    /// work (BENCHMARKS.md, "Runs, warm-up and medians").
    public static func run(_ arguments: Arguments) throws -> Int32 {
        let quick = arguments.has("quick")
        let events = quick ? 10_000 : try arguments.int("events", default: 100_000)
        let runs = try arguments.int("runs", default: quick ? 1 : 3)
        let warmup = try arguments.int("warmup", default: quick ? 0 : min(events, 40_000))
        guard events >= perSubscription else { throw UsageError("--events must be at least \(perSubscription)") }
        guard runs >= 1, warmup == 0 || warmup >= perSubscription else { throw UsageError("--runs ≥ 1, --warmup 0 or ≥ \(perSubscription)") }
        // Progress on stderr with --json, so stdout stays one JSON document.
        let json = arguments.has("json")
        func progress(_ what: String, _ figures: [(String, Double)]) {
            let goal = figures.first { $0.0 == "cpu_microseconds_per_event_no_broker" }.map { String(format: "%.0f", $0.1) } ?? "?"
            let line = "pipeline: \(what): \(goal) µs of CPU per event\n"
            (json ? FileHandle.standardError : FileHandle.standardOutput).write(Data(line.utf8))
        }
        if warmup > 0 { progress("warm-up run (\(warmup) events, not counted)", try runOnce(arguments, events: warmup)) }
        var all: [[(String, Double)]] = []
        for index in 0..<runs {
            all.append(try runOnce(arguments, events: events))
            progress("run \(index + 1)/\(runs)", all[index])
        }
        report(E2EBench.medians(all) + [("runs", Double(runs)), ("warmup_events", Double(warmup))], json: json)
        return 0
    }

    static func runOnce(_ arguments: Arguments, events: Int) throws -> [(String, Double)] {
        let settings = try BenchConfiguration.read(arguments)
        let batch = settings.batch
        // Consumer-group members per stage (each like one `storeledger worker <stage>` process): one
        // member's loop is serial (poll, process, PostgreSQL, acks, commit); two overlap those waits.
        let members = settings.members
        let subscriptions = events / perSubscription
        let total = subscriptions * perSubscription
        let logger = Logger(component: "bench.pipeline")

        // Infrastructure: the embedded broker keeps 5 MiB per partition, so spread the topics wide.
        var plan = try StackPlan.benchmark(partitions: 32)
        if let given = arguments.value("bootstrap", or: .kafkaBootstrapServers) { plan.broker = .given(given) }
        if let given = arguments.value("database-url", or: .databaseURL) { plan.database = .given(given) }
        let stack = try LocalStack.start(plan)
        defer { stack.stop() }
        // Every thread alive now but this one is the embedded broker's (its mock cluster and the
        // handle it needs): it serves the stages, but the goal's figure leaves it out.
        let brokerThreads = ThreadCPU.liveThreads().subtracting([ThreadCPU.current()].compactMap { $0 })
        let bootstrap = stack.bootstrap
        let postgres = stack.postgres
        let databaseURL = stack.databaseURL!
        let db = try PGConnection(url: databaseURL)
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let ledgerBefore = try ledgerCount(db)
        let sequenceBefore = try ledgerSequence(db)

        // Pre-fill the decoded topic.
        // The stages get `storeledger worker`'s Kafka settings; only the pre-fill batches harder.
        var kafka = KafkaConfig(bootstrapServers: bootstrap, clientId: "bench-pipeline")
        // The embedded broker holds each join for the session timeout minus a second.
        kafka.sessionTimeout = .seconds(4)
        kafka.heartbeatInterval = .milliseconds(400)
        var fill = kafka
        fill.linger = .milliseconds(20)
        let fillStarted = ContinuousClock.now
        let interleaved = arguments.has("interleaved")
        let bytes = try prefill(kafka: fill, run: run, subscriptions: subscriptions, interleaved: interleaved)
        let fillTime = ContinuousClock.now - fillStarted
        logger.info("prefilled", ["events": .of(total), "bytes": .of(bytes)])

        // The three stages, as `storeledger worker` configures them.
        let stop = StopSignal()
        let timings = StageTimings()
        var logics: [any StageLogic] = []
        for _ in 0..<members {
            let stages: [any StageLogic] = [DedupeStage(), ClassifyStage(catalog: catalog), MembershipStage()]
            logics += stages.map { stage -> any StageLogic in TimedStage(inner: stage, timings: timings) }
        }
        let failures = Mutex<[String]>([])
        let finished = DispatchGroup()
        let started = ContinuousClock.now
        let walStart = try InspectionQueries(db).walPosition()
        let cpuStart = CPUTime.now(postgres: postgres)
        let brokerStart = ThreadCPU.seconds(of: brokerThreads)
        for logic in logics {
            var config = StageRunnerConfig(kafka: kafka, databaseURL: databaseURL, groupId: "bench-\(run)-\(logic.name)")
            config.maxBatch = batch
            let runner = RunnerHandoff(runner: StageRunner(logic: logic, config: config), name: logic.name)
            finished.enter()
            let thread = Thread {
                defer { finished.leave() }
                do { try runner.runner.run(until: stop) } catch {
                    failures.withLock { $0.append("\(runner.name): \(error)") }
                    stop.stop()
                }
            }
            thread.stackSize = 4 << 20
            thread.start()
        }

        // Done when every event's entry and every subscription's link are in the ledger.
        let expected = ledgerBefore + total + subscriptions
        var firstEntry: ContinuousClock.Instant?
        var current = ledgerBefore
        let deadline = ContinuousClock.now + .seconds(max(120, total / 500))
        while current < expected, !stop.isStopped, ContinuousClock.now < deadline {
            _ = stop.wait(timeout: .milliseconds(100))
            let inserted = try ledgerSequence(db) - sequenceBefore
            if firstEntry == nil, inserted > 0 { firstEntry = .now }
            if ledgerBefore + inserted >= expected { current = try ledgerCount(db) }
        }
        let done = ContinuousClock.now
        let cpu = CPUTime.now(postgres: postgres) - cpuStart
        let walBytes = try InspectionQueries(db).walPosition() - walStart
        let broker = ThreadCPU.seconds(of: brokerThreads) - brokerStart
        stop.stop()
        finished.wait()
        if let failure = failures.withLock({ $0.first }) { throw PipelineBenchFailure("stage failed: \(failure)") }
        guard current >= expected else {
            throw PipelineBenchFailure("timed out: \(current - ledgerBefore) of \(expected - ledgerBefore) ledger entries")
        }
        let wall = seconds(done - started)
        let steady = seconds(done - (firstEntry ?? started))
        let figures: [(String, Double)] = [
            ("events", Double(total)),
            ("events_per_second_wall", Double(total) / wall),
            ("events_per_second_from_first_entry", Double(total) / steady),
            ("wall_seconds_including_group_joins", wall),
            ("seconds_from_first_ledger_entry", steady),
            ("ledger_entries", Double(current - ledgerBefore)),
            ("prefill_events_per_second", Double(total) / seconds(fillTime)),
            ("decoded_megabytes", Double(bytes) / 1_048_576),
            ("max_batch", Double(batch)),
            ("members_per_stage", Double(members)),
            ("interleaved", interleaved ? 1 : 0),
            ("cpu_seconds_bench_process", cpu.process),
            ("cpu_seconds_postgres", cpu.postgres),
            ("cpu_microseconds_per_event", (cpu.process + cpu.postgres) / Double(total) * 1e6),
            ("cpu_seconds_embedded_broker", broker),
            // Issue 14's figure: the stages (their threads and Kafka clients) and PostgreSQL, not the broker.
            ("cpu_microseconds_per_event_no_broker", (cpu.process - broker + cpu.postgres) / Double(total) * 1e6),
            ("cpu_microseconds_per_event_broker", broker / Double(total) * 1e6),
            ("bench_process_cpu_us_per_event_no_broker", (cpu.process - broker) / Double(total) * 1e6),
            ("projected_events_per_second_on_2_cores", 2 * Double(total) / max(0.001, cpu.process + cpu.postgres)),
            ("wal_bytes_per_event", Double(walBytes) / Double(total)),
        ] + timings.figures()
        return figures
    }

    static let catalog = Catalog(
        bundleId: "com.example.bench",
        products: [
            CatalogProduct(id: "vip.premium.1m", kind: .autoRenewable, group: "vip", level: 1, durationDays: 30),
            CatalogProduct(id: "vip.standard.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
        ])

    /// Writes the decoded events, keyed by subscription like the decode stage does; returns the bytes written.
    static func prefill(kafka: KafkaConfig, run: String, subscriptions: Int, interleaved: Bool = false) throws -> Int {
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        let failed = Mutex<KafkaError?>(nil)
        var bytes = 0
        let order = interleaved
            ? (0..<perSubscription).flatMap { step in (0..<subscriptions).map { (index: $0, step: step) } }
            : (0..<subscriptions).flatMap { index in (0..<perSubscription).map { (index: index, step: $0) } }
        for (index, step) in order {
            let value = TopicRecords.encode(event(run: run, subscription: index, step: step))
            bytes += value.count
            producer.send(topic: Topic.decoded, key: Array("\(run)-\(index)".utf8), value: value) { result in
                if case .failure(let error) = result { failed.withLock { $0 = $0 ?? error } }
            }
        }
        try producer.flush(timeout: .seconds(120))
        if let error = failed.withLock({ $0 }) { throw error }
        return bytes
    }

    /// The `step`th event of subscription `index`.
    static func event(run: String, subscription index: Int, step: Int) -> AppleEvent {
        let t0: Int64 = 1_709_251_200_000, month: Int64 = 2_592_000_000
        let otid = "\(run)-\(index)"
        // One user per subscription, except every tenth subscription, which belongs to the user of the
        // one before it (a storefront change, S10): the per-user projection spans two subscriptions.
        let user = "bench-\(run)-\(index % 10 == 9 ? index - 1 : index)"
        let start = t0 + Int64(index % 1_000) * 60_000 + Int64(min(step, perSubscription - 2)) * month
        var transaction = TransactionFacts(
            transactionId: "\(otid)-\(min(step, perSubscription - 2))", originalTransactionId: otid,
            webOrderLineItemId: "\(otid)-w\(min(step, perSubscription - 2))", productId: "vip.standard.1m",
            bundleId: "com.example.bench", purchaseDateMs: start, originalPurchaseDateMs: t0, expiresDateMs: start + month,
            quantity: 1, productType: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED",
            appAccountToken: user, storefront: "USA", transactionReason: step == 0 ? "PURCHASE" : "RENEWAL",
            price: 9_990, currency: "USD")
        let type: String
        switch step {
        case 0: type = "SUBSCRIBED"
        case perSubscription - 1:
            type = "REFUND"
            transaction.cancellationDateMs = start + month / 2
            transaction.cancellationReason = "0"
        default: type = "DID_RENEW"
        }
        let uuid = "\(otid)-n\(step)"
        return AppleEvent(
            eventId: "v2:\(uuid)", source: .notificationV2, environment: "Sandbox", bundleId: "com.example.bench",
            subscriptionKey: otid,
            notification: NotificationMeta(type: type, subtype: step == 0 ? "INITIAL_BUY" : nil, uuid: uuid,
                                           signedDateMs: start + (step == perSubscription - 1 ? month / 2 : 0)),
            transactions: [transaction], receivedAtMs: currentTimeMs())
    }

    static func ledgerCount(_ db: PGConnection) throws -> Int {
        try InspectionQueries(db).ledgerCount()
    }

    /// Entries inserted so far (from the ledger's id sequence; confirm the end with `ledgerCount`).
    static func ledgerSequence(_ db: PGConnection) throws -> Int {
        try InspectionQueries(db).ledgerSequence()
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func report(_ figures: [(String, Double)], json: Bool) {
        BenchReport.write(suite: "pipeline", title: "pipeline (dedupe → classify → membership, PostgreSQL commit per poll batch)",
                          figures, json: json, nameWidth: 38)
    }
}

/// CPU time of this process (stages, Kafka clients, the embedded broker) and of the embedded
/// PostgreSQL's processes: on a machine shared with other work, wall-clock rates understate what
/// the pipeline does on cores of its own; CPU time per event does not.
struct CPUTime {
    var process: Double
    var postgres: Double

    static func now(postgres server: EmbeddedPostgres?) -> CPUTime {
        // A server given by --database-url is not ours to measure: its CPU is unknown, not zero.
        CPUTime(process: processSeconds(), postgres: server.map { postgresSeconds(directory: $0.directory) } ?? .nan)
    }

    /// User + system CPU time of this process so far.
    static func processSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// CPU seconds of the calling thread.
    static func threadSeconds() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    static func - (a: CPUTime, b: CPUTime) -> CPUTime { CPUTime(process: a.process - b.process, postgres: a.postgres - b.postgres) }

    /// utime + stime of the postmaster and its children, from /proc.
    static func postgresSeconds(directory: String) -> Double {
        ProcessTable.postgresPids(directory: directory).compactMap { ProcessTable.stat($0)?.cpu }.reduce(0, +)
    }
}

/// CPU time of some of this process's threads, from /proc/self/task (/proc/<tid>/stat would sum the
/// whole process). A thread that ended counts nothing.
enum ThreadCPU {
    static func liveThreads() -> Set<Int32> {
        Set(((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap { Int32($0) })
    }

    /// The calling thread's id (`/proc/thread-self` links to `<pid>/task/<tid>`; Glibc's `gettid` is not imported).
    static func current() -> Int32? {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")).flatMap { $0.split(separator: "/").last.flatMap { Int32($0) } }
    }

    static func seconds(of threads: Set<Int32>) -> Double {
        threads.compactMap { seconds(path: "/proc/self/task/\($0)/stat") }.reduce(0, +)
    }

    /// utime + stime (fields 14 and 15; the command name before them may hold spaces).
    static func seconds(path: String) -> Double? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let utime = Double(fields[11]), let stime = Double(fields[12]) else { return nil }
        return (utime + stime) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Time spent inside each stage's `process` (decoding, pure logic and its PostgreSQL statements);
/// the rest of a stage's time is Kafka: waiting for records, producing with acks, committing offsets.
final class StageTimings: Sendable {
    private let state = Mutex<[String: (batches: Int, records: Int, nanoseconds: Int64, cpu: Double)]>([:])

    func add(_ stage: String, records: Int, _ duration: Duration, cpu: Double) {
        let ns = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
        state.withLock {
            let old = $0[stage] ?? (0, 0, 0, 0)
            $0[stage] = (old.batches + 1, old.records + records, old.nanoseconds + ns, old.cpu + cpu)
        }
    }

    func figures() -> [(String, Double)] {
        state.withLock { state in
            state.keys.sorted().flatMap { stage -> [(String, Double)] in
                let t = state[stage]!
                return [("\(stage)_batches", Double(t.batches)),
                        ("\(stage)_records_per_batch", Double(t.records) / Double(max(1, t.batches))),
                        ("\(stage)_process_seconds", Double(t.nanoseconds) / 1e9),
                        ("\(stage)_process_cpu_seconds", t.cpu)]
            }
        }
    }
}

struct TimedStage: StageLogic {
    let inner: any StageLogic
    let timings: StageTimings
    var name: String { inner.name }
    var inputTopics: [String] { inner.inputTopics }
    var usesDatabase: Bool { inner.usesDatabase }

    func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        let started = ContinuousClock.now
        let cpu = CPUTime.threadSeconds()
        defer { timings.add(inner.name, records: records.count, ContinuousClock.now - started, cpu: CPUTime.threadSeconds() - cpu) }
        return try inner.process(records, database: database)
    }
}

/// Safe: built on the main thread and handed to exactly one runner thread, which alone uses it.
private struct RunnerHandoff: @unchecked Sendable {
    let runner: StageRunner
    let name: String
}

struct PipelineBenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
