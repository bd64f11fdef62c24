import Foundation
import Kafka
import Postgres
import Store
import Runtime
import Simulator
import Synchronization
import XCTest

/// The real system for integration tests: `storeledger broker`, a private PostgreSQL, migrations,
/// `storeledger ingest` and one `storeledger worker` per stage, each a separate process of the
/// built binary. No fakes: this is what `storeledger dev` runs, with handles for the tests.
final class Cluster: @unchecked Sendable {
    // Safe: set once in start() on the test thread, read afterwards.
    let supervisor: Supervisor
    private(set) var bootstrap = ""
    private(set) var ingestURL = ""
    private(set) var databaseURL = ""
    /// The broker's fault channel (`storeledger broker --control-port`, `BrokerFault`).
    private(set) var controlURL = ""
    /// Each stage's admin server (`/healthz`, `/readyz`, `/metrics`), and the broker's (`broker`).
    private(set) var adminURLs: [String: String] = [:]
    private var postgres: EmbeddedPostgres?
    /// The streaming standby (`start(standby: true)`); `databaseURL` then names both servers.
    private(set) var standby: EmbeddedPostgres?
    /// What every stage worker was started with, for members added later (`addMember`).
    private var workerEnvironment: [String: String] = [:]
    private var workerExit: Supervisor.ExitPolicy = .ignore
    private var memberCount: [String: Int] = [:]

    static let stages = ["decode", "dedupe", "classify", "membership"]
    /// Workers that are not consumer stages: the membership events relay (issue 17).
    static let relays = ["relay"]

    /// Where every process's log lines go when the test reads them (nil: the test's stderr).
    let logFile: String?

    /// - Parameter logFile: run each process as `/bin/sh -c 'exec storeledger ... 2>>logFile'`
    ///   (exec keeps one pid: the process's own), so a test can read every log line.
    init(logFile: String? = nil) throws {
        self.logFile = logFile
        supervisor = Supervisor(executable: logFile == nil ? try Cluster.binary() : "/bin/sh")
    }

    /// A child of this cluster's supervisor, wrapped so its stderr lands in `logFile` when set.
    func child(_ role: String, _ arguments: [String], environment: [String: String], onExit: Supervisor.ExitPolicy = .ignore) throws -> Supervisor.Child {
        guard let logFile else { return .init(role: role, arguments: arguments, environment: environment, onExit: onExit) }
        return .init(role: role, arguments: ["-c", "exec \"$0\" \"$@\" 2>>\"\(logFile)\"", try Cluster.binary()] + arguments,
                     environment: environment, onExit: onExit)
    }

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

    /// - Parameter workerExit: what the supervisor does when a worker dies (tests that SIGKILL workers restart them).
    /// - Parameter standby: also run a synchronous streaming standby of PostgreSQL; every process gets
    ///   the multi-host `DATABASE_URL` with `target_session_attrs=read-write` (`failOver()`).
    func start(extraEnvironment: [String: String] = [:], workerExit: Supervisor.ExitPolicy = .ignore, standby withStandby: Bool = false) throws {
        let address = Mutex<(bootstrap: String?, control: String?)>((nil, nil))
        let ready = DispatchSemaphore(value: 0)
        // The broker's own /metrics (`--admin-port`), beside the stages' admin servers.
        let brokerAdmin = try FreePort.loopback()
        adminURLs["broker"] = "http://127.0.0.1:\(brokerAdmin)"
        try supervisor.start(try child("broker", ["broker", "--partitions", "4", "--control-port", "0", "--admin-port", String(brokerAdmin)],
                                       environment: ["STORELEDGER_LOG_LEVEL": "warning"])) { line in
            // CONTROL= is printed before BOOTSTRAP=, which is the signal.
            if line.hasPrefix("CONTROL=") { address.withLock { $0.control = String(line.dropFirst(8)) } }
            if line.hasPrefix("BOOTSTRAP=") {
                address.withLock { $0.bootstrap = String(line.dropFirst(10)) }
                ready.signal()
            }
        }
        guard ready.wait(timeout: .now() + 30) == .success, let servers = address.withLock({ $0.bootstrap }) else {
            throw ClusterError("broker did not start")
        }
        bootstrap = servers
        controlURL = address.withLock { $0.control } ?? ""
        let server = try EmbeddedPostgres.start()
        postgres = server
        databaseURL = server.url
        if withStandby {
            let copy = try server.startStandby(streams: ReplicationQueries.standbyStreams)
            standby = copy
            databaseURL = EmbeddedPostgres.failoverURL([server, copy])
        }
        try runOnce(["migrate", "--database-url", databaseURL])

        let port = try FreePort.loopback()
        ingestURL = "http://127.0.0.1:\(port)"
        var environment = ["KAFKA_BOOTSTRAP_SERVERS": bootstrap, "DATABASE_URL": databaseURL,
                           "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "3000", "STORELEDGER_KAFKA_FETCH_WAIT_MS": "10",
                           "STORELEDGER_LOG_LEVEL": ProcessInfo.processInfo.environment["STORELEDGER_LOG_LEVEL"] ?? "warning"]
        // Credentials first, so a test's own settings (the simulator's V1 secret) win.
        environment.merge(TestCredentials.environment) { $1 }
        environment.merge(extraEnvironment) { $1 }
        IngestCredential.apiKey = TestCredentials.serviceKey
        try supervisor.start(try child("ingest", ["ingest", "--port", String(port)], environment: environment))
        workerEnvironment = environment
        self.workerExit = workerExit
        for stage in Cluster.stages + Cluster.relays {
            let adminPort = try FreePort.loopback()
            adminURLs[stage] = "http://127.0.0.1:\(adminPort)"
            memberCount[stage] = 1
            try supervisor.start(try child(stage, ["worker", stage, "--admin-port", String(adminPort)], environment: environment, onExit: workerExit))
        }
        try waitUntilReady(timeout: 60)
        try waitUntil("ingest answers /healthz", timeout: 20) { (try? HTTP.get("\(self.ingestURL)/healthz").status) == 200 }
    }

    /// Waits until every stage's `/readyz` answers 200 (partitions held, nothing paused, no outage).
    func waitUntilReady(timeout: TimeInterval) throws {
        try waitUntil("every stage answers /readyz with 200", timeout: timeout) {
            (Cluster.stages + Cluster.relays).allSatisfy { stage in (try? HTTP.get("\(self.adminURLs[stage]!)/readyz", timeout: 2).status) == 200 }
        }
    }

    func stop() {
        supervisor.stopAll()
        postgres?.stop()
        standby?.stop()
    }

    /// Starts one more member of `stage`'s consumer group (a `storeledger worker <stage>` like the
    /// first, as `storeledger dev --workers` does); returns its role (`decode-2`, ...), whose admin
    /// URL is in `adminURLs`. The group rebalances to share the partitions with it.
    @discardableResult
    func addMember(_ stage: String) throws -> String {
        let index = (memberCount[stage] ?? 1) + 1
        memberCount[stage] = index
        let role = MemberCounts.role(stage, member: index)
        let adminPort = try FreePort.loopback()
        adminURLs[role] = "http://127.0.0.1:\(adminPort)"
        try supervisor.start(try child(role, ["worker", stage, "--admin-port", String(adminPort)], environment: workerEnvironment, onExit: workerExit))
        return role
    }

    /// Stops a member for good with SIGTERM (it leaves the group after finishing and committing its
    /// batch) and returns its exit status: 0 when it stopped within the grace, by itself.
    @discardableResult
    func removeMember(_ role: String, grace: Duration = .seconds(20)) -> Int32? {
        adminURLs.removeValue(forKey: role)
        return supervisor.stop(role: role, grace: grace)
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

    func runOnce(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        try process.run()
        while process.isRunning { usleep(20_000) }
        guard process.terminationStatus == 0 else { throw ClusterError("storeledger \(arguments.joined(separator: " ")) exited \(process.terminationStatus)") }
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

    func kafka(clientId: String = "integration-test") -> KafkaConfig {
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
        let consumer = try KafkaConsumer(config: kafka(), groupId: "test-\(UUID().uuidString)", topics: topics)
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
