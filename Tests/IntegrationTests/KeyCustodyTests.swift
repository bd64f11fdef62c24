import Foundation
import Glibc
import Runtime
import Simulator
import Synchronization
import XCTest

/// Contract: the In-App Purchase key stays in the signer. While the whole cluster runs and every
/// process that talks to Apple does its work with tokens from the signer (the consumption worker,
/// `recover notifications`, `refresh`, ingest with the admin routes), (1) nobody opens the key file
/// after the signer read it (inotify on the file reports every open), (2) no process but the
/// signer has it open (a scan of /proc/*/fd of every storeledger process on the machine, all run
/// long), (3) no other process is even told its path (/proc/<pid>/environ), and (4) the signer
/// has no listening socket (its socket inodes against /proc/net's listening ones), while the
/// same check finds ingest's.
final class KeyCustodyTests: XCTestCase {
    func testOnlyTheSignerEverOpensTheKeyAndTheSignerListensNowhere() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        let keyPath = URL(fileURLWithPath: api.sim.setup.directory + "/signing.p8").standardizedFileURL.path
        let supervisor = api.sim.cluster.supervisor
        let signer = try XCTUnwrap(supervisor.pid(of: "signer"))
        // The signer reads the key at start; from here on no process may open it again.
        try waitUntil("the signer holds its key", timeout: 30) { ProcFS.cmdline(signer).contains("signer") }
        Thread.sleep(forTimeInterval: 2)
        let watch = try FileOpenWatch(path: keyPath)
        defer { watch.close() }
        let scanner = FDScanner(keyPath: keyPath)
        scanner.start()

        try supervisor.start(.init(role: "consumption", arguments: ["worker", "consumption"], environment: api.cliEnvironment, onExit: .restart))
        let adminPort = try FreePort.loopback()
        try supervisor.start(.init(role: "ingest-admin", arguments: ["ingest", "--port", String(adminPort)],
                                   environment: api.cliEnvironment.merging(TestCredentials.environment) { $1 }.merging(["STORELEDGER_INGEST_SERVER_API": "on"]) { $1 },
                                   onExit: .restart))
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let userId = StoreState.userUUID(seed: 0x6E7, index: 1)
        let otid = try api.subscriber(userId, atMs: nowMs - 86_400_000).originalTransactionId
        let refreshed = try RecoverNotificationsTests.run(["refresh", "--transaction-id", otid, "--json"], environment: api.cliEnvironment)
        XCTAssertTrue(refreshed.contains(#""historyTransactions":1"#), refreshed)
        _ = try RecoverNotificationsTests.run(["recover", "notifications", "--from", String(nowMs - 86_400_000), "--to", String(nowMs + 1),
                                               "--json"], environment: api.cliEnvironment)
        try waitUntil("ingest with the admin routes answers", timeout: 120, interval: 0.5) {
            (try? HTTP.get("http://127.0.0.1:\(adminPort)/healthz").status) == 200
        }
        XCTAssertEqual(try HTTP.post("http://127.0.0.1:\(adminPort)/v1/admin/refresh/\(otid)", body: Data(), timeout: 60,
                                      authorization: TestCredentials.bearer(TestCredentials.adminKey)).status, 200)
        let scans = scanner.stop()
        print("[custody] \(scans.rounds) scan rounds over \(scans.processes.count) storeledger processes; key holders \(scans.holders)")

        XCTAssertEqual(watch.opens(), 0, "nobody opened the key file after the signer read it")
        _ = FileManager.default.contents(atPath: keyPath)
        XCTAssertEqual(watch.opens(), 1, "the watch sees an open (this test's own read)")
        XCTAssertGreaterThan(scans.rounds, 10)
        XCTAssertGreaterThan(scans.processes.count, 8, "the scan saw the cluster's processes")
        XCTAssertEqual(scans.holders.subtracting([signer]), [], "no process but the signer had the key file open")
        // A child the supervisor is relaunching has no pid for a moment: wait it out, and say which
        // child and how often it restarted if one stays away.
        let roles = ["broker", "ingest", "decode", "dedupe", "classify", "membership", "consumption", "ingest-admin"]
        var others: [Int32] = []
        for _ in 0..<150 {
            others = roles.compactMap(supervisor.pid)
            if others.count == roles.count { break }
            Thread.sleep(forTimeInterval: 0.2)
        }
        XCTAssertEqual(others.count, roles.count, "running: " + roles.map { "\($0) pid \(supervisor.pid(of: $0).map(String.init) ?? "none"), restarts \(supervisor.restarts(of: $0))" }.joined(separator: "; "))
        for pid in others { XCTAssertFalse(ProcFS.environ(pid).contains(keyPath), "process \(pid) was told the key's path") }
        XCTAssertTrue(ProcFS.environ(signer).contains(keyPath), "the check reads environments (the signer's names the key)")

        XCTAssertEqual(ProcFS.listeningSockets(signer), [], "the signer has no listening socket")
        // /proc is read while ingest's descriptors come and go: a listing that raced a closing one
        // comes back empty (once in a CI run, ten looks over a second all did), so the check looks at
        // both ingests, for up to five seconds, before it says it cannot see a listening socket.
        var ingestSockets: Set<String> = []
        for _ in 0..<25 where ingestSockets.isEmpty {
            ingestSockets = ["ingest", "ingest-admin"].compactMap(supervisor.pid).reduce(into: []) { $0.formUnion(ProcFS.listeningSockets($1)) }
            if ingestSockets.isEmpty { Thread.sleep(forTimeInterval: 0.2) }
        }
        XCTAssertFalse(ingestSockets.isEmpty, "the check finds ingest's")
    }
}

/// Reads Linux's /proc for the checks above.
enum ProcFS {
    static func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
    static func cmdline(_ pid: Int32) -> String { text("/proc/\(pid)/cmdline").replacingOccurrences(of: "\0", with: " ") }
    static func environ(_ pid: Int32) -> String { text("/proc/\(pid)/environ") }

    /// What each open descriptor of `pid` points to.
    static func openFiles(_ pid: Int32) -> [String] {
        let directory = "/proc/\(pid)/fd"
        return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)")
        }
    }

    static func storeledgerProcesses() -> [Int32] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap(Int32.init).filter {
            text("/proc/\($0)/cmdline").split(separator: "\0").first?.hasSuffix("storeledger") == true
        }
    }

    /// Listening TCP (state 0A) and UNIX (SO_ACCEPTCON) sockets and bound UDP sockets of `pid`, as "proto:inode".
    static func listeningSockets(_ pid: Int32) -> Set<String> {
        let inodes = Set(openFiles(pid).compactMap { link -> String? in
            guard link.hasPrefix("socket:[") else { return nil }
            return String(link.dropFirst(8).dropLast())
        })
        var found: Set<String> = []
        for proto in ["tcp", "tcp6", "udp", "udp6"] {
            for line in text("/proc/\(pid)/net/\(proto)").split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 9, inodes.contains(String(fields[9])) else { continue }
                if proto.hasPrefix("udp") || fields[3] == "0A" { found.insert("\(proto):\(fields[9])") }
            }
        }
        for line in text("/proc/\(pid)/net/unix").split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 6, inodes.contains(String(fields[6])), let flags = Int(fields[3], radix: 16), flags & 0x10000 != 0 else { continue }
            found.insert("unix:\(fields[6])")
        }
        return found
    }
}

/// Samples every storeledger process's open files every 20 ms on its own thread.
final class FDScanner: Sendable {
    struct Result: Sendable {
        var rounds = 0
        var processes: Set<Int32> = []
        var holders: Set<Int32> = []
    }

    let keyPath: String
    private let result = Mutex(Result())
    private let running = Atomic<Bool>(true)
    private let done = DispatchSemaphore(value: 0)

    init(keyPath: String) { self.keyPath = keyPath }

    func start() {
        Thread { [self] in
            defer { done.signal() }
            while running.load(ordering: .acquiring) {
                for pid in ProcFS.storeledgerProcesses() {
                    let holds = ProcFS.openFiles(pid).contains(keyPath)
                    result.withLock {
                        $0.processes.insert(pid)
                        if holds { $0.holders.insert(pid) }
                    }
                }
                result.withLock { $0.rounds += 1 }
                usleep(20_000)
            }
        }.start()
    }

    func stop() -> Result {
        running.store(false, ordering: .releasing)
        done.wait()
        return result.withLock { $0 }
    }
}

/// inotify on one file: counts IN_OPEN events, whoever opened it.
final class FileOpenWatch {
    private let fd: Int32

    init(path: String) throws {
        fd = inotify_init1(Int32(IN_NONBLOCK))
        guard fd >= 0, inotify_add_watch(fd, path, UInt32(IN_OPEN)) >= 0 else { throw ClusterError("inotify on \(path) failed: errno \(errno)") }
    }

    /// Open events so far.
    func opens() -> Int {
        var count = 0
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return count }
            var offset = 0
            while offset + MemoryLayout<inotify_event>.size <= n {
                let event = buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self) }
                if event.mask & UInt32(IN_OPEN) != 0 { count += 1 }
                offset += MemoryLayout<inotify_event>.size + Int(event.len)
            }
        }
    }

    func close() { _ = Glibc.close(fd) }
}
