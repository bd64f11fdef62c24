import Configuration
import Foundation
import HTTPServer
import LocalStack
import Postgres
import Runtime
import Simulator
import Store

/// `storeledger bench e2e`: the whole system as `storeledger dev` runs it (broker, PostgreSQL, ingest
/// and one process per stage), driven over loopback HTTP by a load client in this process with
/// traffic signed beforehand: each request a first purchase of a fresh subscription (V1
/// INITIAL_BUY, V2 SUBSCRIBED, receipt upload in turn), so each must leave its own ledger entry.
///
/// Per run: a trivial libmicrohttpd handler flat out (same client, same connections, same mix of bodies);
/// ingest alone flat out (every other process of dev but the broker stopped while the requests are
/// posted: ingest's own accepted requests/s with acks=all writes; the pipeline then catches up);
/// ingest flat out with the pipeline running (accepted requests/s, and events/s from the first
/// request to the last committed ledger entry); then fixed rates (500, 1,000, 2,000 events/s) with
/// ingest → ledger latency per event (request written → `ledger.created_at` of its entry, which
/// is the membership transaction's start: the commit follows within that batch's few ms).
/// CPU seconds per event of every process from /proc, and peak RSS (VmHWM) of every process.
/// Figures are medians over `--runs` (default 3; --quick: 1 run, shorter phases). Each run starts its
/// own stack, so the runs are independent samples: the embedded broker (librdkafka 2.0.2's mock)
/// finds a fetch's offset by walking the partition's whole in-memory log, so on one stack every run
/// would pay more broker CPU per event than the one before (BENCHMARKS.md, "Runs on fresh stacks").
/// `--one-stack` keeps one stack for all runs, to see that growth.
public enum E2EBench {
    static let rates: [Double] = [500, 1_000, 2_000]

    /// `startDev(environment, partitions)` starts `storeledger dev` with that environment merged in.
    public static func run(_ arguments: Arguments, startDev: (_ environment: [String: String], _ partitions: Int) throws -> any RunningDev)
        throws -> Int32 {
        let quick = arguments.has("quick")
        let runs = try arguments.int("runs", default: quick ? 1 : 3)
        let rateSeconds = Double(try arguments.int("seconds", default: quick ? 6 : 12))
        let flatEvents = try arguments.int("events", default: quick ? 4_000 : 9_000)
        let connections = try BenchConfiguration.read(arguments).connections
        let trivialSeconds = quick ? 3.0 : 5.0
        guard runs >= 1, rateSeconds >= 1, flatEvents >= 100 else { throw UsageError("--runs ≥ 1, --seconds ≥ 1, --events ≥ 100") }

        let directory = NSTemporaryDirectory() + "storeledger-bench-e2e-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let setup = try SimulatorSetup.prepare(directory: directory)
        let emitter = WireEmitter(pki: setup.pki, config: setup.config)

        // All traffic is signed before anything is measured.
        let generationStarted = ContinuousClock.now
        var block = 0
        func traffic(_ count: Int) throws -> [BenchTraffic.Event] {
            defer { block += count }
            return try BenchTraffic.make(emitter: emitter, count: count, block: block)
        }
        let warmup = try traffic(300)
        var planned: [(alone: [BenchTraffic.Event], flat: [BenchTraffic.Event], rated: [[BenchTraffic.Event]])] = []
        for _ in 0..<runs {
            planned.append((try traffic(flatEvents), try traffic(flatEvents), try rates.map { try traffic(Int($0 * rateSeconds)) }))
        }
        let generation = PipelineBench.seconds(ContinuousClock.now - generationStarted)
        let sizes = Dictionary(grouping: warmup, by: \.channel).map { "\($0.key.rawValue) \($0.value.map(\.request.body.count).reduce(0, +) / $0.value.count) B" }
        print("e2e: \(block) requests signed in \(String(format: "%.1f", generation)) s; \(runs) run(s), \(connections) connections; mean bodies: \(sizes.sorted().joined(separator: ", "))")
        fflush(nil)

        // The trivial handler: same HTTP server module and thread count as ingest, answers 200 at once.
        let trivial = HTTPServer(port: 0, threads: 4, maxBodyBytes: 1 << 20) { _, responder in _ = responder.respond(.text("ok")) }
        try trivial.start()
        defer { trivial.stop() }
        let trivialURL = "http://127.0.0.1:\(trivial.boundPort)"

        let oneStack = arguments.has("one-stack")
        var stack: WarmStack?
        defer { stack?.dev.stop() }
        var peakRSS: [String: Double] = [:]

        var results: [[(String, Double)]] = []
        for (index, plan) in planned.enumerated() {
            if stack == nil || !oneStack {
                if var finished = stack {
                    peakRSS.merge(finished.processes.peakRSS(), uniquingKeysWith: max)
                    finished.dev.stop()
                    stack = nil
                }
                stack = try WarmStack.start(startDev(setup.environment, 12), warmup: warmup, connections: connections)
            }
            let dev = stack!.dev, db = stack!.db
            // Ingest alone: only ingest and the broker run while the requests are posted.
            let pipeline = dev.pids.filter { $0.key != StackPlan.ingestRole && $0.key != StackPlan.brokerRole }.map(\.value)
            var figures: [(String, Double)] = []
            // The same mix of bodies as ingest's phases (V1, V2, receipt uploads in turn): the bytes read differ by kind.
            let trivialRun = try LoadClient.repeatPost(plan.flat.prefix(300).map(\.request), to: trivialURL, connections: connections,
                                                       seconds: trivialSeconds)
            let trivialRate = Double(trivialRun.accepted) / trivialRun.seconds
            let alone = try phase("ingest alone", plan.alone, to: dev.ingestURL, rate: nil, connections: connections, db: db,
                                  processes: &stack!.processes, stopping: pipeline)
            let flat = try phase("flat out", plan.flat, to: dev.ingestURL, rate: nil, connections: connections, db: db,
                                 processes: &stack!.processes)
            figures += [("trivial_handler_requests_per_second", trivialRate),
                        ("ingest_alone_accepted_requests_per_second", alone.acceptedPerSecond),
                        ("ingest_alone_share_of_trivial_handler", alone.acceptedPerSecond / max(1, trivialRate)),
                        ("ingest_accepted_requests_per_second", flat.acceptedPerSecond),
                        ("ingest_share_of_trivial_handler", flat.acceptedPerSecond / max(1, trivialRate)),
                        ("flat_out_events_per_second_request_to_ledger", flat.sustained),
                        ("flat_out_latency_p50_ms", flat.p50), ("flat_out_latency_p99_ms", flat.p99)]
            figures += flat.perEventFigures(prefix: "flat_out")
            for (rate, events) in zip(rates, plan.rated) {
                let result = try phase("\(Int(rate))/s", events, to: dev.ingestURL, rate: rate, connections: connections, db: db,
                                       processes: &stack!.processes)
                let name = "at_\(Int(rate))"
                figures += [("\(name)_events_per_second_request_to_ledger", result.sustained),
                            ("\(name)_latency_p50_ms", result.p50), ("\(name)_latency_p99_ms", result.p99), ("\(name)_latency_max_ms", result.maximum),
                            ("\(name)_missing_entries", Double(result.missing))]
                figures += result.perEventFigures(prefix: name)
            }
            print("e2e: run \(index + 1)/\(runs) done")
            fflush(nil)
            results.append(figures)
        }
        if var last = stack { peakRSS.merge(last.processes.peakRSS(), uniquingKeysWith: max) }
        var summary = medians(results)
        summary += peakRSS.map { ("peak_rss_mb_\($0.key)", $0.value) }.sorted { $0.0 < $1.0 }
        summary += [("runs", Double(runs)), ("stacks", Double(oneStack ? 1 : runs)), ("rate_phase_seconds", rateSeconds), ("flat_out_events", Double(flatEvents)),
                    ("load_average_1m_at_end", loadAverage())]
        BenchReport.write(suite: "e2e", title: "e2e (HTTP → ingest → Kafka → decode → dedupe → classify → membership → PostgreSQL; medians of \(runs) run(s))",
                          summary, json: arguments.has("json"), nameWidth: 52)
        return 0
    }

    /// One started `storeledger dev`, its processes' table and the bench's connection, warmed up.
    struct WarmStack {
        let dev: any RunningDev
        let db: PGConnection
        var processes: ProcessTable

        static func start(_ dev: any RunningDev, warmup: [BenchTraffic.Event], connections: Int) throws -> WarmStack {
            do {
                let db = try PGConnection(url: dev.databaseURL)
                var processes = ProcessTable(pids: dev.pids, postgresDirectory: dev.postgresDirectory)
                // The bench's own queries (progress and commit times) are not the pipeline's work.
                if let backend = try InspectionQueries(db).backendProcessId() { processes.excluded.insert(backend) }
                print("e2e: storeledger dev up (\(processes.roles.joined(separator: ", ")))")
                fflush(nil)
                _ = try phase("warmup", warmup, to: dev.ingestURL, rate: 500, connections: connections, db: db, processes: &processes)
                return WarmStack(dev: dev, db: db, processes: processes)
            } catch {
                dev.stop()
                throw error
            }
        }
    }

    struct PhaseResult {
        var acceptedPerSecond: Double
        var sustained: Double
        var p50: Double
        var p99: Double
        var maximum: Double
        var missing: Int
        var events: Int
        var cpu: [String: Double]
        /// WAL the server wrote during the phase (every writer: the stages, the relay, autovacuum).
        var walBytes: Int64

        func perEventFigures(prefix: String) -> [(String, Double)] {
            let perEvent: Double = 1e6 / Double(max(1, events))
            let total: Double = cpu.values.reduce(0, +)
            let stages: Set<String> = ["dedupe", "classify", "membership", "postgres"]
            var pipeline: Double = 0
            for (role, seconds) in cpu where stages.contains(role) { pipeline += seconds }
            var figures: [(String, Double)] = []
            for role in cpu.keys.sorted() { figures.append(("\(prefix)_cpu_us_per_event_\(role)", cpu[role, default: 0] * perEvent)) }
            figures.append(("\(prefix)_cpu_us_per_event_all_processes", total * perEvent))
            figures.append(("\(prefix)_cpu_us_per_event_dedupe_classify_membership_postgres", pipeline * perEvent))
            figures.append(("\(prefix)_wal_bytes_per_event", Double(walBytes) / Double(max(1, events))))
            return figures
        }
    }

    /// Posts `events`, waits until each accepted one has its ledger entry (or 30 s pass without a new
    /// entry), and measures latencies and every process's CPU over that window. The processes in
    /// `stopping` are stopped (SIGSTOP) while the requests are posted and continued after.
    static func phase(_ label: String, _ events: [BenchTraffic.Event], to ingestURL: String, rate: Double?, connections: Int,
                      db: PGConnection, processes: inout ProcessTable, stopping: [Int32] = []) throws -> PhaseResult {
        let sequenceBefore = try PipelineBench.ledgerSequence(db)
        let walBefore = try InspectionQueries(db).walPosition()
        let cpuBefore = processes.cpuSeconds()
        for pid in stopping { kill(pid, SIGSTOP) }
        // Continued before anything else can throw: a member stopped past its session timeout is
        // evicted from its group (a rebalance), which would spoil the phases after this one.
        let posted = Result { try LoadClient.post(events.map(\.request), to: ingestURL, connections: connections, ratePerSecond: rate) }
        for pid in stopping { kill(pid, SIGCONT) }
        let sent = try posted.get()
        let accepted = sent.accepted
        let keys = events.indices.filter { (200...206).contains(sent.status[$0]) }.map { events[$0].subscriptionKey }
        var committed: [String: Double] = [:]
        var lastSequence = -1, lastProgress = ContinuousClock.now, lastExact = ContinuousClock.now - .seconds(10)
        while committed.count < keys.count, ContinuousClock.now - lastProgress < .seconds(30) {
            Thread.sleep(forTimeInterval: 0.2)
            let sequence = try PipelineBench.ledgerSequence(db)
            if sequence != lastSequence {
                lastSequence = sequence
                lastProgress = .now
            }
            // The exact query is heavier: when the sequence has run far enough, or every 2 s.
            guard sequence - sequenceBefore >= keys.count || ContinuousClock.now - lastExact > .seconds(2) else { continue }
            lastExact = .now
            committed = try commitTimes(db, keys: keys, after: sequenceBefore)
        }
        let cpu = processes.cpuSeconds().subtracting(cpuBefore)
        let walBytes = try InspectionQueries(db).walPosition() - walBefore
        var latencies: [Double] = []
        for index in events.indices where (200...206).contains(sent.status[index]) {
            if let at = committed[events[index].subscriptionKey] { latencies.append(at - sent.sentAtMs[index]) }
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? .nan : latencies[min(latencies.count - 1, Int(Double(latencies.count - 1) * p))]
        }
        let firstSent = sent.sentAtMs.filter { !$0.isNaN }.min() ?? sent.startedAtMs
        let lastCommit = committed.values.max() ?? sent.finishedAtMs
        let result = PhaseResult(acceptedPerSecond: Double(accepted) / sent.seconds,
                                 sustained: Double(committed.count) / max(0.001, (lastCommit - firstSent) / 1000),
                                 p50: percentile(0.5), p99: percentile(0.99), maximum: latencies.last ?? .nan,
                                 missing: keys.count - committed.count, events: committed.count, cpu: cpu,
                                 walBytes: walBytes)
        let perEvent = 1e6 / Double(max(1, committed.count))
        print(String(format: "  %@: %d posted, %d accepted (%.0f/s), %d in the ledger, %.0f events/s to ledger, p50 %.0f ms, p99 %.0f ms, max %.0f ms; CPU µs per event %.0f, the broker's %.0f",
                     label, events.count, accepted, result.acceptedPerSecond, committed.count, result.sustained, result.p50, result.p99, result.maximum,
                     cpu.values.reduce(0, +) * perEvent, cpu[StackPlan.brokerRole, default: 0] * perEvent))
        fflush(nil)
        return result
    }

    /// The first ledger entry's time (ms since 1970) of each subscription in `keys`, among entries after `sequence`.
    static func commitTimes(_ db: PGConnection, keys: [String], after sequence: Int) throws -> [String: Double] {
        var times: [String: Double] = [:]
        var start = 0
        while start < keys.count {
            let chunk = Array(keys[start..<min(keys.count, start + 5_000)])
            start += chunk.count
            times.merge(try InspectionQueries(db).firstEntryTimes(of: chunk, after: Int64(sequence))) { first, _ in first }
        }
        return times
    }

    static func medians(_ runs: [[(String, Double)]]) -> [(String, Double)] {
        guard let first = runs.first else { return [] }
        return first.indices.map { index in
            let values = runs.map { $0[index].1 }.filter { !$0.isNaN }.sorted()
            return (first[index].0, values.isEmpty ? .nan : values[values.count / 2])
        }
    }

    static func loadAverage() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return .nan }
        return Double(text.split(separator: " ").first ?? "") ?? .nan
    }
}

/// The processes of one `storeledger dev` plus this one (the load client): CPU seconds and peak RSS
/// from /proc; PostgreSQL counts as one role (postmaster and all its children).
struct ProcessTable {
    let pids: [String: Int32]
    let postgresDirectory: String?
    /// PostgreSQL backends left out of the CPU figures (the bench's own connection).
    var excluded: Set<Int32> = []
    private var peakPostgresRSS = 0.0

    init(pids: [String: Int32], postgresDirectory: String?) {
        var all = pids
        all["load_client"] = getpid()
        self.pids = all
        self.postgresDirectory = postgresDirectory
    }

    var roles: [String] { pids.keys.sorted() + (postgresDirectory == nil ? [] : ["postgres"]) }

    mutating func cpuSeconds() -> [String: Double] {
        var seconds: [String: Double] = [:]
        for (role, pid) in pids { seconds[role] = Self.stat(pid)?.cpu ?? 0 }
        if let postgresDirectory {
            // Backends come and go; the sum over live ones is what we can read. Keep their peak RSS too.
            let members = Self.postgresPids(directory: postgresDirectory)
            // Live processes plus what exited backends used (the postmaster's reaped children).
            seconds["postgres"] = members.filter { !excluded.contains($0) }.compactMap { Self.stat($0)?.cpu }.reduce(0, +) + (members.first.flatMap { Self.stat($0)?.reaped } ?? 0)
            peakPostgresRSS = max(peakPostgresRSS, members.map { Self.peakRSS($0) }.max() ?? 0)
        }
        return seconds
    }

    /// VmHWM in MB per role; for PostgreSQL the largest single process (shared buffers count in each).
    mutating func peakRSS() -> [String: Double] {
        _ = cpuSeconds()
        var peaks: [String: Double] = [:]
        for (role, pid) in pids { peaks[role] = Self.peakRSS(pid) }
        if postgresDirectory != nil { peaks["postgres_largest_process"] = peakPostgresRSS }
        return peaks
    }

    /// utime + stime, and the same of its reaped children (cutime + cstime).
    static func stat(_ pid: Int32) -> (cpu: Double, ppid: Int32, reaped: Double)? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 15, let ppid = Int32(fields[1]), let utime = Double(fields[11]), let stime = Double(fields[12]),
              let cutime = Double(fields[13]), let cstime = Double(fields[14]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ((utime + stime) / ticks, ppid, (cutime + cstime) / ticks)
    }

    static func peakRSS(_ pid: Int32) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kb = Double(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
        return kb / 1024
    }

    static func postgresPids(directory: String) -> [Int32] {
        guard let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8),
              let postmaster = text.split(separator: "\n").first.flatMap({ Int32($0) }) else { return [] }
        var members = [postmaster]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let info = stat(pid), info.ppid == postmaster else { continue }
            members.append(pid)
        }
        return members
    }
}

extension Dictionary where Key == String, Value == Double {
    func subtracting(_ other: [String: Double]) -> [String: Double] {
        var result = self
        for (key, value) in other { result[key, default: 0] -= value }
        return result
    }
}
