import Foundation
import Postgres
import Runtime
import Synchronization
import Workers

/// `storeledger dev`: the whole system on one machine with embedded defaults, as one supervised set
/// of separate processes: broker, (private) PostgreSQL, migrations, ingest, one worker per stage.
struct DevCommand: CLICommand {
    let name = "dev"
    let summary = "Start broker, private PostgreSQL (unless DATABASE_URL is set), migrations, ingest and one worker per stage; print the URLs; Ctrl-C stops everything."
    let usage = "[--port P] [--partitions N] [--database-url URL]"
    let optionNames: Set<String> = ["port", "partitions", "database-url"]

    static let stages = ["decode", "dedupe", "classify", "membership"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let logger = Logger(component: "dev")
        let stop = StopSignal()
        stop.installSignalHandlers(logger: logger)
        let port = try arguments.int("port", default: 8080)
        let partitions = try arguments.int("partitions", default: 12)
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
        let brokerPid = try supervisor.start(.init(role: "broker", arguments: ["broker", "--partitions", String(partitions)], onExit: .stopAll)) { line in
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
        _ = try Migrator.migrate(try PGConnection(url: databaseURL), Schema.migrations)

        let environment = ["KAFKA_BOOTSTRAP_SERVERS": servers, "DATABASE_URL": databaseURL]
        let ingestPort = port == 0 ? try freePort() : port
        let ingestPid = try supervisor.start(.init(role: "ingest", arguments: ["ingest", "--port", String(ingestPort)],
                                                   environment: environment))
        var pids = ["broker": brokerPid, "ingest": ingestPid]
        for stage in DevCommand.stages {
            pids[stage] = try supervisor.start(.init(role: stage, arguments: ["worker", stage], environment: environment))
        }

        // Machine-readable lines first (tests and scripts parse them), then a human summary.
        var lines = ["BOOTSTRAP=\(servers)", "DATABASE_URL=\(redacted(databaseURL))", "INGEST=http://127.0.0.1:\(ingestPort)"]
        lines += pids.keys.sorted().map { "PID \($0)=\(pids[$0]!)" }
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
        ]
        print(lines.joined(separator: "\n"))
        fflush(nil)
        stop.wait()
        if let role = failed.withLock({ $0 }) {
            logger.error("dev_child_failed", ["role": .string(role), "action": "stopping everything"])
            return 1
        }
        return 0
    }

    private func selfExecutable() throws -> String {
        let path = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        return path
    }

    private func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw DevError("cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Database URLs may carry a password: never print it.
func redacted(_ url: String) -> String {
    guard var components = URLComponents(string: url), components.password != nil else { return url }
    components.password = "***"
    return components.string ?? url
}

struct DevError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
