import Crypto
import Foundation
import Postgres
import Store
import Runtime
import Simulator
import Synchronization
import Stages

/// `storeledger dev`: the whole system on one machine with embedded defaults, as one supervised set
/// of separate processes: broker, (private) PostgreSQL, migrations, ingest, one worker per stage.
struct DevCommand: CLICommand {
    let name = "dev"
    let summary = "Start broker, private PostgreSQL (unless DATABASE_URL is set), migrations, ingest and one worker per stage (--workers: more); print the URLs; Ctrl-C stops everything."
    let usage = "[--port P] [--partitions N] [--database-url URL] [--catalog FILE] [--workers decode=2,dedupe=2,classify=1,membership=3] [--demo]"
    let optionNames: Set<String> = ["port", "partitions", "database-url", "catalog", "workers"]
    /// --demo: trust the simulated App Store, drive a short simulated stretch through it, print a summary.
    let flagNames: Set<String> = ["demo"]

    /// Consumer stages, then the membership events relay (a worker role of its own, issue 17).
    static let stages = ["decode", "dedupe", "classify", "membership", "relay"]
    /// The stages `--workers` can scale out: consumer-group members sharing the partitions.
    static let scalable = ["decode", "dedupe", "classify", "membership"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let logger = Logger(component: "dev")
        let stop = StopSignal()
        stop.installSignalHandlers(logger: logger)
        let port = try arguments.int("port", default: 8080)
        let partitions = try arguments.int("partitions", default: 12)
        let members = try arguments.value("workers").map { try MemberCounts.parse($0, stages: DevCommand.scalable) } ?? MemberCounts()
        let failed = Mutex<String?>(nil)
        // The embedded broker keeps its data in memory: if it dies, the set cannot go on.
        let supervisor = Supervisor(executable: try selfExecutable()) { role in
            failed.withLock { $0 = role }
            stop.stop()
        }
        var embedded: EmbeddedPostgres?
        defer {
            supervisor.stopAll()
            embedded?.stop()
            logger.info("dev_stopped")
        }

        // Broker first: everything else needs its address.
        let bootstrap = Mutex<String?>(nil)
        let brokerReady = DispatchSemaphore(value: 0)
        // The broker's /metrics like every other process's (records per topic, faults).
        let brokerAdminPort = try FreePort.loopback()
        let brokerArguments = ["broker", "--partitions", String(partitions), "--admin-port", String(brokerAdminPort)]
        let brokerPid = try supervisor.start(.init(role: "broker", arguments: brokerArguments, onExit: .stopAll)) { line in
            if line.hasPrefix("BOOTSTRAP=") {
                bootstrap.withLock { $0 = String(line.dropFirst("BOOTSTRAP=".count)) }
                brokerReady.signal()
            }
        }
        guard brokerReady.wait(timeout: .now() + 30) == .success, let servers = bootstrap.withLock({ $0 }) else {
            throw DevError("the broker did not report its address within 30 s")
        }

        let databaseURL: String
        if let given = Environment.databaseURL(arguments) {
            databaseURL = given
        } else {
            let server = try EmbeddedPostgres.start()
            embedded = server
            databaseURL = server.url
        }
        _ = try Store.migrate(try PGConnection(url: databaseURL))

        // Short fetch waits: the embedded broker answers an empty fetch only after the full wait.
        var environment = ["KAFKA_BOOTSTRAP_SERVERS": servers, "DATABASE_URL": databaseURL,
                           "STORELEDGER_KAFKA_FETCH_WAIT_MS": ProcessInfo.processInfo.environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"] ?? "10",
                           "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": ProcessInfo.processInfo.environment["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS"] ?? "6000"]
        if let catalog = Environment.value(arguments, option: "catalog", env: "STORELEDGER_CATALOG") {
            environment["STORELEDGER_CATALOG"] = catalog
        }
        let demo = arguments.has("demo") ? try prepareDemo() : nil
        if let demo { environment.merge(demo.environment) { $1 } }
        let keyDirectory = try DevSigningKey.create()
        defer { try? FileManager.default.removeItem(atPath: keyDirectory.path) }
        let credentials = try DevCredentials.create(directory: keyDirectory.path, environment: environment)
        environment.merge(credentials.environment) { $1 }
        let ingestPort = port == 0 ? try FreePort.loopback() : port
        let ingestPid = try supervisor.start(.init(role: "ingest", arguments: ["ingest", "--port", String(ingestPort)],
                                                   environment: environment))
        var pids = ["broker": brokerPid, "ingest": ingestPid]
        var signerEnvironment = environment
        signerEnvironment["STORELEDGER_SIGNING_KEYS"] = "\(DevSigningKey.keyId)=\(keyDirectory.keyFile)"
        signerEnvironment["STORELEDGER_SIGNING_DEFAULT_KEY_ID"] = DevSigningKey.keyId
        signerEnvironment["STORELEDGER_SIGNING_ISSUER_ID"] = credentials.issuerId
        pids["signer"] = try supervisor.start(.init(role: "signer", arguments: ["signer"], environment: signerEnvironment))
        var admin: [String: String] = ["broker": "http://127.0.0.1:\(brokerAdminPort)"]
        // Webhook delivery only when endpoints are configured (STORELEDGER_WEBHOOKS, docs/webhooks.md).
        let webhooks = ProcessInfo.processInfo.environment["STORELEDGER_WEBHOOKS"].map { !$0.isEmpty } ?? false
        // --workers: more members of a stage join its consumer group and share its partitions.
        for stage in DevCommand.stages + (webhooks ? ["webhooks"] : []) {
            // A stage produces a whole batch's outputs at once and then waits for their acks: linger has
            // nothing to gather and only delays the commit (BENCHMARKS.md, e2e). Ingest keeps the default,
            // where linger batches the writes of concurrent requests.
            var stageEnvironment = environment
            stageEnvironment["STORELEDGER_KAFKA_LINGER_MS"] = ProcessInfo.processInfo.environment["STORELEDGER_KAFKA_LINGER_MS"] ?? "0"
            for member in 1...members.members(of: stage) {
                let role = MemberCounts.role(stage, member: member)
                let adminPort = try FreePort.loopback()
                admin[role] = "http://127.0.0.1:\(adminPort)"
                pids[role] = try supervisor.start(.init(role: role, arguments: ["worker", stage, "--admin-port", String(adminPort)],
                                                        environment: stageEnvironment))
            }
        }
        // READY means a notification posted now flows through at once: every stage answers /readyz
        // (it holds partitions, nothing paused, PostgreSQL and the broker reachable).
        let notReady = waitUntilReady(admin, timeout: .seconds(60), stop: stop)
        if !notReady.isEmpty {
            logger.warning("dev_stages_not_ready", ["not_ready": .string(notReady.joined(separator: ","))])
        }

        // Machine-readable lines first (tests and scripts parse them), then a human summary.
        var lines = ["BOOTSTRAP=\(servers)", "DATABASE_URL=\(redacted(databaseURL))", "INGEST=http://127.0.0.1:\(ingestPort)"]
        if let embedded { lines.append("POSTGRES_DIR=\(embedded.directory)") }
        lines += credentials.lines
        lines += pids.keys.sorted().map { "PID \($0)=\(pids[$0]!)" }
        lines += admin.keys.sorted().map { "ADMIN \($0)=\(admin[$0]!)" }
        lines += [
            "READY",
            "",
            "StoreLedger is running (Ctrl-C stops everything):",
            "  notifications  POST http://127.0.0.1:\(ingestPort)/v1/notifications/appstore",
            "  receipts       POST http://127.0.0.1:\(ingestPort)/v1/receipts",
            "  subscription   GET  http://127.0.0.1:\(ingestPort)/v1/subscriptions/{original_transaction_id}",
            "  user           GET  http://127.0.0.1:\(ingestPort)/v1/users/{user_id}/membership | /ledger",
            "  health         GET  http://127.0.0.1:\(ingestPort)/healthz  /readyz  /metrics",
            "  kafka          \(servers)",
        ] + credentials.usage("http://127.0.0.1:\(ingestPort)")
        print(lines.joined(separator: "\n"))
        fflush(nil)
        // The demo's simulated app calls ingest as the company's backend would.
        IngestCredential.apiKey = credentials.apiKey
        if let demo { try runDemo(demo, ingestURL: "http://127.0.0.1:\(ingestPort)", bootstrap: servers, databaseURL: databaseURL) }
        stop.wait()
        if let role = failed.withLock({ $0 }) {
            logger.error("dev_child_failed", ["role": .string(role), "action": "stopping everything"])
            return 1
        }
        return 0
    }

    /// Polls each admin URL's `/readyz` until all answer 200; returns the roles still not ready.
    private func waitUntilReady(_ admin: [String: String], timeout: Duration, stop: StopSignal) -> [String] {
        let deadline = ContinuousClock.now + timeout
        var pending = Set(admin.keys)
        while !pending.isEmpty, ContinuousClock.now < deadline, !stop.isStopped {
            for role in pending where (try? SimpleHTTP.get(admin[role]!, "/readyz").status) == 200 { pending.remove(role) }
            if !pending.isEmpty { _ = stop.wait(timeout: .milliseconds(100)) }
        }
        return pending.sorted()
    }

    private func selfExecutable() throws -> String {
        let path = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        return path
    }
}

/// An ephemeral App Store Connect-style key for the dev signer, so offer signatures work out of
/// the box; it lives in a private 0700 directory removed on exit and is useless outside dev.
enum DevSigningKey {
    static let keyId = "DEVKEY0001"

    static func create() throws -> (path: String, keyFile: String) {
        let directory = NSTemporaryDirectory() + "storeledger-dev-key-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        let file = directory + "/AuthKey_\(keyId).p8"
        guard FileManager.default.createFile(atPath: file, contents: Data(try P256PrivateKey.generate().pkcs8PEM().utf8),
                                             attributes: [.posixPermissions: 0o600]) else {
            throw DevError("cannot write the dev signing key")
        }
        return (directory, file)
    }
}

/// Database URLs may carry a password: never print it (several hosts included: `DatabaseURL`).
func redacted(_ url: String) -> String { DatabaseURL.redacted(url) }

struct DevError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
