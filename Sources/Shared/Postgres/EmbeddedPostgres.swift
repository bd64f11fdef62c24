import Configuration
import Foundation
import Runtime
import Synchronization

/// A private, throwaway PostgreSQL cluster for tests, demos and benchmarks, run from the
/// distribution's server binaries (`/usr/lib/postgresql/<newest>/bin`, or the directory in
/// `Setting.pgBin`). It lives in its own directory (data, socket, log), listens on
/// 127.0.0.1 on a free port, trusts local connections and skips fsync: fast (~1.2 s to
/// start) and disposable. `stop()` (or deinit) shuts it down and deletes the directory.
///
/// As root, initdb and pg_ctl refuse to run, so the directory is handed to the `postgres`
/// user and the binaries run through `runuser -u postgres --`; the directory's parents must
/// then be traversable by that user (the default, under the temp directory, is).
public final class EmbeddedPostgres: Sendable {
    /// `postgres://postgres@127.0.0.1:<port>/storeledger`
    public let url: String
    public let port: Int
    /// The private directory (removed by `stop()`).
    public let directory: String
    public let binDirectory: String
    private let runAsPostgres: Bool
    private let stopped = Mutex(false)

    public static let databaseName = "storeledger"

    private var dataDirectory: String { directory + "/data" }
    private var logFile: String { directory + "/server.log" }

    private init(url: String, port: Int, directory: String, binDirectory: String, runAsPostgres: Bool) {
        self.url = url
        self.port = port
        self.directory = directory
        self.binDirectory = binDirectory
        self.runAsPostgres = runAsPostgres
    }

    deinit { stop() }

    /// Initialises and starts a cluster, then creates the `storeledger` database.
    /// `directory` must not exist or be empty; by default a fresh one under the temp directory.
    public static func start(directory: String? = nil) throws -> EmbeddedPostgres {
        let bin = try findBinDirectory()
        let directory = try makePrivateDirectory(directory)
        let asPostgres = geteuid() == 0
        do {
            if asPostgres { try handToPostgresUser(directory) }
            try initialise(directory: directory, bin: bin, asPostgres: asPostgres)
            let port = try startServer(directory: directory, bin: bin, asPostgres: asPostgres)
            startWatchdog(directory: directory)
            let server = EmbeddedPostgres(url: "postgres://postgres@127.0.0.1:\(port)/\(databaseName)", port: port,
                                          directory: directory, binDirectory: bin, runAsPostgres: asPostgres)
            do {
                try server.createFirstDatabase()
            } catch {
                let tail = server.logTail()
                server.stop()
                throw PGError(kind: .embeddedServer, message: "could not create database \(databaseName): \(error)\n\(tail)")
            }
            return server
        } catch {
            killPostmaster(dataDirectory: directory + "/data")
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// pg_ctl reports "ready" from the postmaster's pid file; on a loaded machine allow the
    /// first TCP connection a few seconds more before giving up.
    private func createFirstDatabase() throws {
        var attempt = 0
        while true {
            do {
                _ = try createDatabase(EmbeddedPostgres.databaseName)
                return
            } catch let error as PGError where error.kind == .connection && attempt < 20 {
                attempt += 1
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
    }

    /// Creates another database on this server (e.g. one per test) and returns its URL.
    public func createDatabase(_ name: String) throws -> String {
        // The distribution's createdb client: the name travels as an argument, quoted by it.
        let result = try EmbeddedPostgres.run(binDirectory + "/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", name],
                                              asPostgres: false, in: directory)
        guard result.status == 0 else {
            let refused = result.output.contains("could not connect") || result.output.contains("Connection refused")
            throw PGError(kind: refused ? .connection : .embeddedServer, message: "createdb \(name) failed: \(result.output.suffix(500))")
        }
        return url(database: name)
    }

    /// The URL of a database on this server.
    public func url(database: String) -> String {
        let encoded = database.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? database
        return "postgres://postgres@127.0.0.1:\(port)/\(encoded)"
    }

    /// Fast shutdown (`pg_ctl stop -m fast`), then the directory is removed. Idempotent.
    public func stop() {
        let wasStopped = stopped.withLock { stopped in
            defer { stopped = true }
            return stopped
        }
        guard !wasStopped else { return }
        let result = try? EmbeddedPostgres.run(binDirectory + "/pg_ctl",
                                               ["-D", dataDirectory, "-m", "fast", "-w", "-t", "30", "stop"],
                                               asPostgres: runAsPostgres, in: directory)
        if result?.status != 0 { EmbeddedPostgres.killPostmaster(dataDirectory: dataDirectory) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Fault injection for tests: a fast shutdown (clients see their connections terminated),
    /// `downFor` seconds with nothing listening, then a start on the same port and data.
    public func restart(downFor: TimeInterval = 0) throws {
        let stop = try EmbeddedPostgres.run(binDirectory + "/pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "-t", "30", "stop"],
                                            asPostgres: runAsPostgres, in: directory)
        guard stop.status == 0 else { throw PGError(kind: .embeddedServer, message: "pg_ctl stop failed: \(stop.output.suffix(500))") }
        if downFor > 0 { Thread.sleep(forTimeInterval: downFor) }
        let start = try EmbeddedPostgres.run(binDirectory + "/pg_ctl",
                                             ["-D", dataDirectory, "-l", logFile, "-w", "-t", "30", "-o", "-p \(port)", "start"],
                                             asPostgres: runAsPostgres, in: directory)
        guard start.status == 0 else { throw PGError(kind: .embeddedServer, message: "pg_ctl start failed: \(start.output.suffix(500))\n\(logTail())") }
    }

    // MARK: Streaming standby and failover (issue 13, docs/scaling.md "PostgreSQL failover")

    /// Starts a streaming standby of this server in a private directory of its own, on a free port:
    /// `pg_basebackup -R` (a copy plus `standby.signal` and `primary_conninfo`), then `pg_ctl start`.
    /// With `synchronous`, this server then waits for the standby's acknowledgement before it
    /// answers a COMMIT (`synchronous_standby_names = '*'`), so a COMMIT the stages saw, and the
    /// offsets they committed after it, survive losing this server: asynchronous replication would
    /// lose the last transactions while their Kafka offsets are already committed. The setting is
    /// made after the copy, so the standby does not inherit it (once promoted it has no standby to
    /// wait for). Returns when the standby streams (and, with `synchronous`, is the sync standby).
    /// `streams` answers, over a connection to this server, whether the standby streams in the
    /// wanted mode (Store's `ReplicationQueries.standbyStreams` does).
    public func startStandby(synchronous: Bool = true, streams: (PGConnection, _ synchronous: Bool) throws -> Bool) throws -> EmbeddedPostgres {
        let directory = try EmbeddedPostgres.makePrivateDirectory(nil)
        do {
            if runAsPostgres { try EmbeddedPostgres.handToPostgresUser(directory) }
            let copy = try EmbeddedPostgres.run(binDirectory + "/pg_basebackup",
                                                ["-D", directory + "/data", "-h", "127.0.0.1", "-p", String(port), "-U", "postgres",
                                                 "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"],
                                                asPostgres: runAsPostgres, in: directory)
            guard copy.status == 0 else {
                throw PGError(kind: .embeddedServer, message: "pg_basebackup failed (\(copy.status)): \(copy.output.suffix(2000))")
            }
            // The copy carries this server's socket directory: the standby gets its own.
            let quotedDirectory = directory.replacingAll("'", with: "''")
            try EmbeddedPostgres.appendSettings("\n# StoreLedger standby\nunix_socket_directories = '\(quotedDirectory)'\n", to: directory + "/data")
            let standbyPort = try EmbeddedPostgres.startServer(directory: directory, bin: binDirectory, asPostgres: runAsPostgres)
            EmbeddedPostgres.startWatchdog(directory: directory)
            let standby = EmbeddedPostgres(url: "postgres://postgres@127.0.0.1:\(standbyPort)/\(EmbeddedPostgres.databaseName)",
                                           port: standbyPort, directory: directory, binDirectory: binDirectory, runAsPostgres: runAsPostgres)
            if synchronous {
                // After the copy, so the standby does not inherit it; a reload applies it.
                try EmbeddedPostgres.appendSettings("synchronous_standby_names = '*'\n", to: dataDirectory)
                let reload = try EmbeddedPostgres.run(binDirectory + "/pg_ctl", ["-D", dataDirectory, "reload"],
                                                      asPostgres: runAsPostgres, in: self.directory)
                guard reload.status == 0 else { throw PGError(kind: .embeddedServer, message: "pg_ctl reload failed: \(reload.output.suffix(500))") }
            }
            let admin = try PGConnection(url: url(database: "postgres"))
            defer { admin.close() }
            let deadline = Date().addingTimeInterval(60)
            while try !streams(admin, synchronous) {
                guard Date() < deadline else {
                    standby.stop()
                    throw PGError(kind: .embeddedServer, message: "the standby did not stream as \(synchronous ? "sync" : "async") within 60 s\n\(standby.logTail())")
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
            return standby
        } catch {
            EmbeddedPostgres.killPostmaster(dataDirectory: directory + "/data")
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Promotes a standby to primary (`pg_ctl promote -w`): it leaves recovery and accepts writes.
    public func promote() throws {
        let result = try EmbeddedPostgres.run(binDirectory + "/pg_ctl", ["-D", dataDirectory, "-w", "-t", "60", "promote"],
                                              asPostgres: runAsPostgres, in: directory)
        guard result.status == 0 else {
            throw PGError(kind: .embeddedServer, message: "pg_ctl promote failed: \(result.output.suffix(500))\n\(logTail())")
        }
    }

    /// Fault injection: the server dies as in a crash (`pg_ctl stop -m immediate`: no checkpoint,
    /// every connection cut) and stays down. `stop()` still removes the directory.
    public func crash() throws {
        let result = try EmbeddedPostgres.run(binDirectory + "/pg_ctl", ["-D", dataDirectory, "-m", "immediate", "-w", "-t", "30", "stop"],
                                              asPostgres: runAsPostgres, in: directory)
        guard result.status == 0 else { throw PGError(kind: .embeddedServer, message: "pg_ctl stop -m immediate failed: \(result.output.suffix(500))") }
    }

    /// A multi-host URL over `servers` (primary first) that connects only to the one accepting
    /// writes (`target_session_attrs=read-write`): libpq tries each host in turn, so a client that
    /// reconnects after a failover finds the promoted standby by itself.
    public static func failoverURL(_ servers: [EmbeddedPostgres], database: String = databaseName) -> String {
        let hosts = servers.map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
        return "postgres://postgres@\(hosts)/\(database)?target_session_attrs=read-write"
    }

    /// The last lines of the server log, for error messages.
    public func logTail(maxBytes: Int = 4000) -> String {
        EmbeddedPostgres.tail(of: logFile, maxBytes: maxBytes)
    }

    // MARK: Steps

    private static let binDirectoryOverride = Mutex<String?>(nil)

    /// Set once at process start from `Setting.pgBin`; `nil` finds Debian's newest server.
    public static func configureBinDirectory(_ path: String?) { binDirectoryOverride.withLock { $0 = path } }

    private static func findBinDirectory() throws -> String {
        let fileManager = FileManager.default
        if let override = binDirectoryOverride.withLock({ $0 }), !override.isEmpty {
            guard fileManager.isExecutableFile(atPath: override + "/initdb") else {
                throw PGError(kind: .embeddedServer, message: "\(Setting.pgBin)=\(override) has no initdb")
            }
            return override
        }
        let root = "/usr/lib/postgresql"
        let versions = ((try? fileManager.contentsOfDirectory(atPath: root)) ?? [])
            .filter { fileManager.isExecutableFile(atPath: "\(root)/\($0)/bin/initdb") }
            .sorted { $0.compare($1, options: .numeric) == .orderedAscending }
        guard let newest = versions.last else {
            throw PGError(kind: .embeddedServer, message: """
                no PostgreSQL server binaries in \(root)/<version>/bin (install the postgresql package \
                or set \(Setting.pgBin))
                """)
        }
        return "\(root)/\(newest)/bin"
    }

    private static func makePrivateDirectory(_ requested: String?) throws -> String {
        let fileManager = FileManager.default
        if let requested {
            let path = URL(fileURLWithPath: requested).standardizedFileURL.path
            try? fileManager.createDirectory(atPath: path, withIntermediateDirectories: true)
            guard let contents = try? fileManager.contentsOfDirectory(atPath: path), contents.isEmpty else {
                throw PGError(kind: .embeddedServer, message: "\(path) must be an empty or new directory")
            }
            return path
        }
        var template = Array((NSTemporaryDirectory() + "/storeledger-pg-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw PGError(kind: .embeddedServer, message: "cannot create a temporary directory: errno \(errno)")
        }
        return URL(fileURLWithPath: String(cString: made)).standardizedFileURL.path
    }

    private static func handToPostgresUser(_ directory: String) throws {
        guard let user = getpwnam("postgres") else {
            throw PGError(kind: .embeddedServer, message: "running as root needs a postgres user to run the server as")
        }
        guard chown(directory, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
            throw PGError(kind: .embeddedServer, message: "cannot chown \(directory) to postgres: errno \(errno)")
        }
    }

    /// Appends lines to a data directory's postgresql.conf (later settings win).
    private static func appendSettings(_ text: String, to dataDirectory: String) throws {
        guard let config = FileHandle(forWritingAtPath: dataDirectory + "/postgresql.conf") else {
            throw PGError(kind: .embeddedServer, message: "cannot open postgresql.conf in \(dataDirectory)")
        }
        defer { try? config.close() }
        try config.seekToEnd()
        try config.write(contentsOf: Data(text.utf8))
    }

    private static func initialise(directory: String, bin: String, asPostgres: Bool) throws {
        let result = try run(bin + "/initdb",
                             ["-D", directory + "/data", "-A", "trust", "--no-sync", "-U", "postgres",
                              "-E", "UTF8", "--no-locale"],
                             asPostgres: asPostgres, in: directory)
        guard result.status == 0 else {
            throw PGError(kind: .embeddedServer, message: "initdb failed (\(result.status)):\n\(result.output.suffix(3000))")
        }
        let quotedDirectory = directory.replacingAll("'", with: "''")
        let settings = """

            # StoreLedger throwaway cluster
            listen_addresses = '127.0.0.1'
            unix_socket_directories = '\(quotedDirectory)'
            fsync = off
            # A new cluster has no WAL segments to recycle: zero-filling each new 16 MB one was a
            # tenth of the server's CPU in benchmarks, which a long-running server never pays.
            wal_init_zero = off
            max_connections = 200

            """
        guard let config = FileHandle(forWritingAtPath: directory + "/data/postgresql.conf") else {
            throw PGError(kind: .embeddedServer, message: "cannot open postgresql.conf in \(directory)/data")
        }
        defer { try? config.close() }
        try config.seekToEnd()
        try config.write(contentsOf: Data(settings.utf8))
    }

    /// Starts the server on a free port; retries with another port if one was taken meanwhile.
    private static func startServer(directory: String, bin: String, asPostgres: Bool) throws -> Int {
        let log = directory + "/server.log"
        var lastFailure = ""
        for _ in 0..<4 {
            let port: Int
            do { port = try FreePort.loopback() } catch {
                throw PGError(kind: .embeddedServer, message: "\(error)")
            }
            let result = try run(bin + "/pg_ctl",
                                 ["-D", directory + "/data", "-l", log, "-w", "-t", "30", "-o", "-p \(port)", "start"],
                                 asPostgres: asPostgres, in: directory)
            if result.status == 0 { return port }
            let serverLog = tail(of: log, maxBytes: 3000)
            lastFailure = "pg_ctl start failed (\(result.status)): \(result.output.suffix(1000))\n\(serverLog)"
            guard serverLog.contains("could not bind") || serverLog.contains("already in use") else { break }
        }
        throw PGError(kind: .embeddedServer, message: lastFailure)
    }

    /// If this process dies without `stop()` (SIGKILL, a crashed test run), a detached shell
    /// notices within a second, shuts the server down (SIGQUIT: immediate) and removes the
    /// directory, so no orphaned servers pile up. It exits by itself once `stop()` has removed
    /// the directory. The directory travels in the environment, not the command line, so
    /// `pgrep -f <directory>` only ever finds the server. Best effort: failure to spawn is ignored.
    private static func startWatchdog(directory: String) {
        let script = """
            ( while kill -0 "$SL_OWNER" 2>/dev/null && [ -d "$SL_DIR" ]; do sleep 1; done
              [ -d "$SL_DIR" ] || exit 0
              pid=$(head -n 1 "$SL_DIR/data/postmaster.pid" 2>/dev/null)
              if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
                  n=0; while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
              fi
              rm -rf "$SL_DIR" ) </dev/null >/dev/null 2>&1 &
            """
        _ = try? Subprocess.run("/usr/bin/env", ["SL_OWNER=\(getpid())", "SL_DIR=\(directory)", "/bin/sh", "-c", script])
    }

    /// Last resort when pg_ctl cannot stop the server: kill the postmaster recorded in our own data directory.
    private static func killPostmaster(dataDirectory: String) {
        guard let pidFile = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
              let line = pidFile.split(separator: "\n").first, let pid = Int32(line), pid > 1 else { return }
        kill(pid, SIGKILL)
    }

    // MARK: Plumbing

    /// Runs a binary to completion in `directory` (as `postgres` via runuser when we are root)
    /// and returns its exit status and combined output. Uses Runtime's posix_spawn `Subprocess`,
    /// not Foundation's `Process`, whose `waitUntilExit` can hang on `pg_ctl start` (it leaves a
    /// daemon behind) in programs that also supervise other processes. Output goes to a file,
    /// not a pipe, so the postmaster cannot hold a pipe open.
    static func run(_ executable: String, _ arguments: [String], asPostgres: Bool,
                    in directory: String) throws -> (status: Int32, output: String) {
        let outputPath = NSTemporaryDirectory() + "/storeledger-pg-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        // `env -C` sets the working directory: the server binaries fail in a directory the
        // postgres user cannot read (e.g. /root).
        var command = ["/usr/bin/env", "-C", directory, executable] + arguments
        if asPostgres { command = [findRunuser(), "-u", "postgres", "--"] + command }
        let status: Int32
        do {
            status = try Subprocess.run(command[0], Array(command.dropFirst()), outputPath: outputPath)
        } catch {
            throw PGError(kind: .embeddedServer, message: "cannot run \(executable): \(error)")
        }
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return (status, text)
    }

    private static func findRunuser() -> String {
        ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
            .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/sbin/runuser"
    }

    static func tail(of path: String, maxBytes: Int) -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { return "(no server log at \(path))" }
        defer { try? handle.close() }
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > UInt64(maxBytes) ? size - UInt64(maxBytes) : 0)
        let data = (try? handle.readToEnd()) ?? Data()
        return "--- server log tail (\(path)) ---\n" + String(decoding: data, as: UTF8.self)
    }
}
