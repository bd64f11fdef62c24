import Foundation
import Kafka
import LocalStack
import Postgres
import Runtime
import Simulator
import Store
import Synchronization
import XCTest

/// The real system for integration tests: `storeledger broker`, a private PostgreSQL, migrations,
/// `storeledger ingest` and one `storeledger worker` per stage, each a separate process of the
/// built binary, booted by `LocalStack` as `storeledger dev` boots them. No fakes: handles for the tests.
final class Cluster: @unchecked Sendable {
    // Safe: set once in start() on the test thread, read afterwards.
    private(set) var stack: LocalStack?
    /// Each stage's admin server (`/healthz`, `/readyz`, `/metrics`), the broker's (`broker`), ingest's own URL (`ingest`).
    var adminURLs: [String: String] { stack?.readinessURLs ?? [:] }
    /// What every stage worker was started with, for members added later (`addMember`).
    private var workerExit: Supervisor.ExitPolicy = .ignore
    private var memberCount: [String: Int] = [:]

    static let stages = ["decode", "dedupe", "classify", "membership"]
    /// Workers that are not consumer stages: the membership events relay (issue 17).
    static let relays = ["relay"]

    /// Where every process's log lines go when the test reads them (nil: the test's stderr).
    let logFile: String?

    /// - Parameter logFile: append every process's standard error to this file, so a test can read every log line.
    init(logFile: String? = nil) throws {
        self.logFile = logFile
    }

    var supervisor: Supervisor { stack!.supervisor }
    var bootstrap: String { stack?.bootstrap ?? "" }
    var ingestURL: String { stack?.ingestURL ?? "" }
    var databaseURL: String { stack?.databaseURL ?? "" }
    /// The broker's fault channel (`storeledger broker --control-port`, `BrokerFault`).
    var controlURL: String { stack?.controlURL ?? "" }
    var standby: EmbeddedPostgres? { stack?.standby }
    private var postgres: EmbeddedPostgres? { stack?.postgres }
    /// KAFKA_BOOTSTRAP_SERVERS, DATABASE_URL and what `start` gave every process.
    var environment: [String: String] { stack?.environment ?? [:] }

    /// The built `storeledger` executable (scripts/test.sh exports STORELEDGER_BIN).
    static func binary() throws -> String {
        if let path = ProcessInfo.processInfo.environment["STORELEDGER_BIN"], FileManager.default.isExecutableFile(atPath: path) {
            return path
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let candidate = root.appendingPathComponent(".build/debug/storeledger").path
        guard FileManager.default.isExecutableFile(atPath: candidate) else {
            throw XCTSkip("storeledger binary not built at \(candidate); run scripts/test.sh")
        }
        return candidate
    }

    /// The tests' broker-first plan: 4 partitions, the fault channel, stderr to `logFile` (or ours).
    static func plan(logFile: String? = nil, partitions: Int = 4) throws -> StackPlan {
        var plan = StackPlan(executable: try binary())
        plan.partitions = partitions
        plan.brokerControl = true
        plan.brokerExit = .ignore
        plan.brokerEnvironment = ["STORELEDGER_LOG_LEVEL": "warning"]
        plan.stderr = .relay(to: logFile)
        return plan
    }

    /// - Parameter workerExit: what the supervisor does when a worker dies (tests that SIGKILL workers restart them).
    /// - Parameter standby: also run a synchronous streaming standby of PostgreSQL; every process gets
    ///   the multi-host `DATABASE_URL` with `target_session_attrs=read-write` (`failOver()`).
    /// - Parameter extraChildren: more processes started with the stages (and waited for when they have a port).
    func start(extraEnvironment: [String: String] = [:], workerExit: Supervisor.ExitPolicy = .ignore, standby withStandby: Bool = false,
               extraChildren: [StackChild] = []) throws {
        var plan = try Cluster.plan(logFile: logFile)
        plan.database = .embedded(standby: withStandby)
        var environment = ["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "3000", "STORELEDGER_KAFKA_FETCH_WAIT_MS": "10",
                           "STORELEDGER_LOG_LEVEL": ProcessInfo.processInfo.environment["STORELEDGER_LOG_LEVEL"] ?? "warning"]
        // Credentials first, so a test's own settings (the simulator's V1 secret) win.
        environment.merge(TestCredentials.environment) { $1 }
        environment.merge(extraEnvironment) { $1 }
        plan.environment = environment
        IngestCredential.apiKey = TestCredentials.serviceKey
        plan.children = [.ingest(onExit: .ignore)] + (Cluster.stages + Cluster.relays).map { .worker($0, onExit: workerExit) } + extraChildren
        self.workerExit = workerExit
        for stage in Cluster.stages + Cluster.relays { memberCount[stage] = 1 }
        stack = try LocalStack.start(plan)
    }

    /// Waits until every stage's `/readyz` answers 200 (partitions held, nothing paused, no outage).
    func waitUntilReady(timeout: TimeInterval) throws {
        try stack?.waitUntilReady(Cluster.stages + Cluster.relays, timeout: .seconds(timeout))
    }

    func stop() {
        stack?.stop()
    }

    /// Starts one more member of `stage`'s consumer group (a `storeledger worker <stage>` like the
    /// first, as `storeledger dev --workers` does); returns its role (`decode-2`, ...), whose admin
    /// URL is in `adminURLs`. The group rebalances to share the partitions with it.
    @discardableResult
    func addMember(_ stage: String) throws -> String {
        let index = (memberCount[stage] ?? 1) + 1
        memberCount[stage] = index
        let role = MemberCounts.role(stage, member: index)
        try stack?.add(.worker(stage, role: role, onExit: workerExit))
        return role
    }

    /// Stops a member for good with SIGTERM (it leaves the group after finishing and committing its
    /// batch) and returns its exit status: 0 when it stopped within the grace, by itself.
    @discardableResult
    func removeMember(_ role: String, grace: Duration = .seconds(20)) -> Int32? {
        stack?.remove(role, grace: grace)
    }

    /// The roles of the current members of `stage` (the first keeps the stage's name).
    func members(of stage: String) -> [String] {
        adminURLs.keys.filter { $0 == stage || $0.hasPrefix("\(stage)-") && Int($0.dropFirst(stage.count + 1)) != nil }.sorted()
    }

    /// Fails PostgreSQL over: the primary dies (immediate shutdown, it stays down) and the standby is
    /// promoted. Returns how long the promotion took.
    @discardableResult
    func failOver() throws -> TimeInterval {
        guard let postgres, let standby else { throw ClusterError("no standby started (start(standby: true))") }
        try postgres.crash()
        let started = Date()
        try standby.promote()
        return Date().timeIntervalSince(started)
    }

    /// A connection to the primary only (after `failOver()`, the promoted standby).
    func primaryDatabase() throws -> PGConnection { try PGConnection(url: databaseURL) }

    func kill(_ role: String, signal: Int32 = SIGKILL) {
        if let pid = supervisor.pid(of: role) { Foundation.kill(pid, signal) }
    }

    func database() throws -> PGConnection { try PGConnection(url: databaseURL) }

    /// Fast shutdown of PostgreSQL (every connection is terminated), `downFor` seconds away, then
    /// a start on the same port and data.
    func restartPostgres(downFor: TimeInterval) throws {
        guard let postgres else { throw ClusterError("no PostgreSQL started") }
        try postgres.restart(downFor: downFor)
    }

    /// SIGSTOP (or SIGCONT) to the postmaster and every backend: a hung server that still holds
    /// its sockets open, which neither libpq's keepalives nor the server's statement_timeout notice.
    func freezePostgres(_ frozen: Bool) throws {
        guard let postgres else { throw ClusterError("no PostgreSQL started") }
        let pidFile = try String(contentsOfFile: postgres.directory + "/data/postmaster.pid", encoding: .utf8)
        guard let line = pidFile.split(separator: "\n").first, let pid = Int32(line) else { throw ClusterError("no postmaster pid") }
        let signal = frozen ? SIGSTOP : SIGCONT
        // Children first when stopping (none starts a query meanwhile), the postmaster first when resuming.
        if !frozen { Foundation.kill(pid, signal) }
        _ = try? Subprocess.run("/usr/bin/pkill", [frozen ? "-STOP" : "-CONT", "-P", String(pid)])
        if frozen { Foundation.kill(pid, signal) }
    }

    /// Sends one fault command to the broker's control channel (`BrokerFault` documents them).
    @discardableResult
    func brokerFault(_ path: String) throws -> HTTP.Response {
        let response = try HTTP.post("\(controlURL)\(path)", body: Data())
        guard response.status == 200 else { throw ClusterError("broker fault \(path): \(response.status) \(response.text)") }
        return response
    }

    func kafka(clientId: String = "integration-test") -> KafkaConfig { Cluster.kafka(bootstrap: bootstrap, clientId: clientId) }

    /// The tests' client settings: short sessions and fetch waits (the embedded broker answers an empty fetch only after the wait).
    static func kafka(bootstrap: String, clientId: String = "integration-test") -> KafkaConfig {
        var config = KafkaConfig(bootstrapServers: bootstrap, clientId: clientId)
        config.sessionTimeout = .seconds(3)
        config.heartbeatInterval = .milliseconds(500)
        config.fetchMaxWait = .milliseconds(10)
        return config
    }

    /// Reads a whole topic from the beginning with a fresh consumer group.
    func readTopic(_ topic: String, atLeast minimum: Int = 0, timeout: TimeInterval = 15) throws -> [KafkaRecord] {
        try readTopics([topic], atLeast: minimum, timeout: timeout)
    }

    /// Reads whole topics from the beginning with one fresh consumer group.
    func readTopics(_ topics: [String], atLeast minimum: Int = 0, timeout: TimeInterval = 15) throws -> [KafkaRecord] {
        try Cluster.readTopics(topics, bootstrap: bootstrap, atLeast: minimum, timeout: timeout)
    }

    /// Reads whole topics of the broker at `bootstrap` from the beginning with one fresh consumer group.
    static func readTopics(_ topics: [String], bootstrap: String, atLeast minimum: Int = 0, timeout: TimeInterval = 15) throws -> [KafkaRecord] {
        let consumer = try KafkaConsumer(config: kafka(bootstrap: bootstrap), groupId: "test-\(UUID().uuidString)", topics: topics)
        defer { consumer.close() }
        var records: [KafkaRecord] = []
        let deadline = Date().addingTimeInterval(timeout)
        var idleSince = Date()
        while Date() < deadline {
            let batch = try consumer.poll(maxRecords: 1000, timeout: .milliseconds(250))
            if batch.isEmpty {
                // Assignment takes a few seconds; once we have what we need, a short quiet period ends the read.
                if records.count >= minimum, Date().timeIntervalSince(idleSince) > (minimum > 0 ? 1 : 6) { break }
            } else {
                records += batch
                idleSince = Date()
            }
        }
        return records
    }
}

struct ClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Polls `condition` until it holds or the timeout passes (then fails with `what`).
func waitUntil(_ what: String, timeout: TimeInterval, interval: TimeInterval = 0.1, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        Thread.sleep(forTimeInterval: interval)
    }
    throw ClusterError("timed out after \(timeout) s waiting until \(what)")
}
