import Foundation
import XCTest

/// Contract: `storeledger dev` (what the README's run command starts) brings up broker, private
/// PostgreSQL, migrations, ingest and every worker as separate processes; a notification POSTed
/// once it reports READY is visible in the API within 2 seconds; SIGINT stops every process and
/// removes the private PostgreSQL directory.
final class DevCommandTests: XCTestCase {
    func testDevRunsEverythingShowsANotificationWithin2SecondsAndStopsCleanly() throws {
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: "000000000000000"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["dev", "--port", "0", "--partitions", "4"]
        var environment = ProcessInfo.processInfo.environment
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        environment.removeValue(forKey: "DATABASE_URL")
        // The test's V1 bodies carry this password; dev makes every other credential itself.
        environment["STORELEDGER_V1_SHARED_SECRETS"] = TestCredentials.v1Secret
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil } else { lines.append(data) }
        }
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        try waitUntil("dev prints READY", timeout: 60) { lines.contains("READY") }
        let ingest = try XCTUnwrap(lines.value(after: "INGEST="))
        let apiKey = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "API_KEY=")))
        let pids = lines.all.filter { $0.hasPrefix("PID ") }.compactMap { Int32($0.split(separator: "=").last ?? "") }
        XCTAssertEqual(pids.count, 7, "broker, ingest, signer and four workers run as separate processes")

        XCTAssertEqual(try HTTP.post("\(ingest)/v1/notifications/appstore", body: body).status, 200)
        let posted = Date()
        try waitUntil("the notification's grant is visible", timeout: 2, interval: 0.05) {
            let view = try HTTP.get("\(ingest)/v1/subscriptions/000000000000000", authorization: apiKey)
            return view.status == 200 && ((view.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        print("dev: notification visible in the API after \(String(format: "%.3f", Date().timeIntervalSince(posted))) s")

        let postgresDirectory = try XCTUnwrap(lines.value(after: "POSTGRES_DIR="))
        XCTAssertTrue(FileManager.default.fileExists(atPath: postgresDirectory))
        kill(process.processIdentifier, SIGINT)
        try waitUntil("dev exits", timeout: 30) { !process.isRunning }
        XCTAssertEqual(process.terminationStatus, 0)
        for pid in pids {
            XCTAssertNotEqual(kill(pid, 0), 0, "process \(pid) is still running after dev stopped")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: postgresDirectory), "the private PostgreSQL directory is removed")
        XCTAssertEqual(processes(mentioning: postgresDirectory), [], "no PostgreSQL process of dev's cluster is left")
    }
}

/// Pids whose command line mentions `text` (like `pgrep -f`).
func processes(mentioning text: String) -> [Int32] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap(Int32.init).filter { pid in
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self).contains(text)
    }
}

/// Collects a child's standard output lines.
final class LineCollector: @unchecked Sendable {
    // Safe: every access holds `lock`.
    private let lock = NSLock()
    private var buffer = ""
    private var lines: [String] = []

    func append(_ data: Data) {
        lock.lock()
        defer { lock.unlock() }
        buffer += String(decoding: data, as: UTF8.self)
        while let newline = buffer.firstIndex(of: "\n") {
            lines.append(String(buffer[..<newline]))
            buffer.removeSubrange(...newline)
        }
    }

    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
    func contains(_ line: String) -> Bool { all.contains(line) }
    func value(after prefix: String) -> String? { all.first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) } }
}
