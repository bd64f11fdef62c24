import Configuration
import Crypto
import Demo
import Foundation
import HTTPServer
import LocalStack
import Postgres
import Runtime
import Simulator
import Store
import Synchronization

/// `storeledger dev`: the whole system on one machine with embedded defaults, as one supervised set
/// of separate processes: broker, (private) PostgreSQL, migrations, ingest, one worker per stage.
/// Booted by `LocalStack` (each step waits on the previous one's /readyz); what it prints is for people.
struct DevCommand: CLICommand {
    let name = "dev"
    let summary = "Start broker, private PostgreSQL (unless DATABASE_URL is set), migrations, ingest, the signer and one worker per stage (--workers: more); print the URLs; Ctrl-C stops everything. With --admin-port, /readyz answers 200 once every process is ready."
    let usage = "[--port P] [--admin-port P] [--broker-port P] [--partitions N] [--database-url URL] [--catalog FILE] [--webhooks FILE] [--workers decode=2,dedupe=2,classify=1,membership=3] [--issuer-id ID] [--demo]"
    let optionNames: Set<String> = ["port", "admin-port", "broker-port", "partitions", "database-url", "catalog", "webhooks", "workers", "issuer-id"]
    /// --demo: trust the simulated App Store, drive a short simulated stretch through it, print a summary.
    let flagNames: Set<String> = ["demo"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let logger = Logger(component: "dev")
        let stop = StopSignal()
        stop.installSignalHandlers(logger: logger)
        var options = DevStack.Options()
        options.ingestPort = try arguments.int("port", default: 8080)
        options.brokerPort = try arguments.int("broker-port", default: 0)
        options.partitions = try arguments.int("partitions", default: 12)
        options.members = try arguments.value("workers").map { try MemberCounts.parse($0, stages: DevStack.scalable) } ?? MemberCounts()
        options.databaseURL = Environment.databaseURL(arguments)
        options.catalog = Environment.value(arguments, option: "catalog", setting: .catalog)
        options.webhooks = Environment.value(arguments, option: "webhooks", setting: .webhooks)
        if let issuer = arguments.value("issuer-id") { options.environment[Setting.signingIssuerId.name] = issuer }
        let demo = arguments.has("demo") ? try prepareDemo() : nil
        if let demo { options.environment.merge(demo.environment) { $1 } }
        // The demo's PKI (the simulator's private keys) goes with dev, after every process it started.
        defer { if let demo { try? FileManager.default.removeItem(atPath: demo.simulator.directory) } }
        for (name, port) in [("port", options.ingestPort), ("broker-port", options.brokerPort)] where !(0...65535).contains(port) {
            throw UsageError("--\(name) must be 0...65535")
        }

        // dev's own /readyz: 200 once the stack booted and while every process it started is ready.
        let stackHolder = Mutex<LocalStack?>(nil)
        let admin = try arguments.value("admin-port").map { _ in
            let port = try arguments.int("admin-port", default: 0)
            guard (0...65535).contains(port) else { throw UsageError("--admin-port must be 0...65535") }
            let server = AdminServer(port: port) {
                guard let stack = stackHolder.withLock({ $0 }) else { return ["dev: still booting"] }
                return stack.notReady().map { "\($0): not ready" }
            }
            try server.start()
            logger.info("admin_listening", ["port": .of(server.port)])
            return server
        }
        // The admin server lives as long as dev does.
        defer { withExtendedLifetime(admin) {} }

        let failed = Mutex<String?>(nil)
        // The embedded broker keeps its data in memory: if it dies, the set cannot go on.
        let dev = try DevStack.start(options, cancel: stop) { role in
            failed.withLock { $0 = role }
            stop.stop()
        }
        defer {
            dev.stop()
            logger.info("dev_stopped")
        }
        print(dev.summary.joined(separator: "\n"))
        fflush(nil)
        stackHolder.withLock { $0 = dev.stack }
        // The demo's simulated app calls ingest as the company's backend would.
        IngestCredential.apiKey = dev.credentials.apiKey
        if let demo { try runDemo(demo, ingestURL: dev.ingestURL, bootstrap: dev.stack.bootstrap, databaseURL: dev.databaseURL) }
        stop.wait()
        if let role = failed.withLock({ $0 }) {
            logger.error("dev_child_failed", ["role": .string(role), "action": "stopping everything"])
            return 1
        }
        return 0
    }
}

/// What `storeledger dev` runs, in this process's hands: the `LocalStack` of broker, PostgreSQL,
/// migrations, ingest, the signer (with an ephemeral key) and the stage workers, with dev's
/// credentials. `simulate --dev` and `bench e2e` start the same one in process.
final class DevStack: Sendable {
    /// Consumer stages, then the membership events relay (a worker role of its own, issue 17).
    static let stages = ["decode", "dedupe", "classify", "membership", "relay"]
    /// The stages `--workers` can scale out: consumer-group members sharing the partitions.
    static let scalable = ["decode", "dedupe", "classify", "membership"]

    struct Options {
        var ingestPort = 8080
        var brokerPort = 0
        var partitions = 12
        var members = MemberCounts()
        /// nil: a private PostgreSQL.
        var databaseURL: String?
        var catalog: String?
        /// The webhooks file (Setting.webhooks): a webhooks worker delivers to its endpoints.
        var webhooks: String?
        /// Merged into the environment of ingest and every worker.
        var environment: [String: String] = [:]
        /// The service key to use instead of a new one (Setting.devAPIKey does the same).
        var apiKey: String?
    }

    let stack: LocalStack
    let credentials: DevCredentials
    private let keyDirectory: String

    private init(stack: LocalStack, credentials: DevCredentials, keyDirectory: String) {
        self.stack = stack
        self.credentials = credentials
        self.keyDirectory = keyDirectory
    }

    var ingestURL: String { stack.ingestURL ?? "" }
    var databaseURL: String { stack.databaseURL ?? "" }
    /// Each child's pid by role.
    var pids: [String: Int32] {
        Dictionary(stack.supervisor.roles.compactMap { role in stack.supervisor.pid(of: role).map { (role, $0) } }) { first, _ in first }
    }

    static func start(_ options: Options, cancel: StopSignal? = nil, onCriticalExit: @escaping @Sendable (String) -> Void = { _ in }) throws -> DevStack {
        // Short fetch waits: the embedded broker answers an empty fetch only after the full wait.
        var environment = [Setting.kafkaFetchWaitMs.name: Environment.given(.kafkaFetchWaitMs) ?? "10",
                           Setting.kafkaSessionTimeoutMs.name: Environment.given(.kafkaSessionTimeoutMs) ?? "6000"]
        if let catalog = options.catalog { environment[Setting.catalog.name] = catalog }
        if let webhooks = options.webhooks { environment[Setting.webhooks.name] = webhooks }
        environment.merge(options.environment) { $1 }
        let key = try DevSigningKey.create()
        do {
            let credentials = try DevCredentials.create(directory: key.path, environment: environment, apiKey: options.apiKey)
            environment.merge(credentials.environment) { $1 }
            var plan = StackPlan(executable: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            plan.partitions = options.partitions
            plan.brokerPort = options.brokerPort
            plan.database = options.databaseURL.map { .given($0) } ?? .embedded(standby: false)
            plan.environment = environment
            // A stage produces a whole batch's outputs at once and then waits for their acks: linger has
            // nothing to gather and only delays the commit (BENCHMARKS.md, e2e). Ingest's requests wait for
            // their acks as well; on loopback librdkafka still batches whatever arrives while earlier
            // requests are in flight, and a linger only adds its wait to each (BENCHMARKS.md, e2e,
            // 2026-12-02). So every child gets 0 unless the setting is given.
            let lingerEnvironment = [Setting.kafkaLingerMs.name: Environment.given(.kafkaLingerMs) ?? "0"]
            plan.children = [.ingest(port: options.ingestPort, environment: lingerEnvironment)]
            plan.children.append(.signer(adminPort: 0, environment: [
                Setting.signingKeys.name: "\(DevSigningKey.keyId)=\(key.keyFile)",
                Setting.signingDefaultKeyId.name: DevSigningKey.keyId,
                Setting.signingIssuerId.name: credentials.issuerId,
            ]))
            // Webhook delivery only when endpoints are configured (Setting.webhooks, docs/webhooks.md).
            let webhooks = environment[Setting.webhooks.name] != nil || Environment.given(.webhooks) != nil
            // --workers: more members of a stage join its consumer group and share its partitions.
            for stage in stages + (webhooks ? ["webhooks"] : []) {
                for member in 1...options.members.members(of: stage) {
                    plan.children.append(.worker(stage, role: MemberCounts.role(stage, member: member), environment: lingerEnvironment))
                }
            }
            let stack = try LocalStack.start(plan, cancel: cancel, onCriticalExit: onCriticalExit)
            return DevStack(stack: stack, credentials: credentials, keyDirectory: key.path)
        } catch {
            try? FileManager.default.removeItem(atPath: key.path)
            throw error
        }
    }

    func stop() {
        stack.stop()
        try? FileManager.default.removeItem(atPath: keyDirectory)
    }

    /// For people (nothing parses it: readiness is dev's /readyz).
    var summary: [String] {
        let ingest = ingestURL
        var lines = [
            "",
            "StoreLedger is running (Ctrl-C stops everything):",
            "  notifications  POST \(ingest)/v1/notifications/appstore",
            "  receipts       POST \(ingest)/v1/receipts",
            "  subscription   GET  \(ingest)/v1/subscriptions/{original_transaction_id}",
            "  user           GET  \(ingest)/v1/users/{user_id}/membership | /ledger",
            "  health         GET  \(ingest)/healthz  /readyz  /metrics",
            "  kafka          \(stack.bootstrap)",
            "  database       \(redacted(databaseURL))" + (stack.postgres.map { "  (private, in \($0.directory))" } ?? ""),
        ]
        let pids = self.pids
        lines.append("  processes      " + pids.keys.sorted().map { "\($0) \(pids[$0]!)" }.joined(separator: ", "))
        let admin = stack.readinessURLs.filter { $0.key != StackPlan.ingestRole }
        lines.append("  admin          " + admin.keys.sorted().map { "\($0) \(admin[$0]!)" }.joined(separator: ", "))
        lines += credentials.lines
        return lines + credentials.usage(ingest)
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
        try PrivateFile.write(Array(try P256PrivateKey.generate().pkcs8PEM().utf8), to: file)
        return (directory, file)
    }
}

/// Database URLs may carry a password: never print it (several hosts included: `DatabaseURL`).
func redacted(_ url: String) -> String { DatabaseURL.redacted(url) }

struct DevError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
