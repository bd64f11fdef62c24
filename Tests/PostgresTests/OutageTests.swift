import Foundation
import TestSupport
@testable import Postgres
import XCTest

/// Contract: an unreachable, hung or restarting PostgreSQL never holds a caller for long and never
/// needs a new process: statements are bounded by `statement_timeout` (SQLSTATE 57014), connecting
/// by `connect_timeout`, a restart breaks the connection with an error, and the pool reconnects
/// on its own after the server is back, spacing attempts with a capped backoff meanwhile.
final class OutageTests: PGTestCase {
    func testStatementTimeoutCancelsAHungStatement() throws {
        var options = PGOptions()
        options.statementTimeoutMs = 300
        let connection = try PGConnection(url: server.url, options: options)
        let started = Date()
        XCTAssertThrowsError(try connection.query("SELECT pg_sleep(20)")) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "57014", "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "cancelled by the server, not after the sleep")
        XCTAssertEqual(try connection.query("SELECT 1 AS one").first?.int("one"), 1, "the connection stays usable")
    }

    func testConnectTimeoutBoundsAServerThatNeverAnswers() throws {
        // A socket that accepts TCP connections (kernel backlog) but never speaks the protocol.
        let listener = try SilentListener()
        defer { listener.close() }
        var options = PGOptions()
        options.connectTimeoutSeconds = 2
        let started = Date()
        XCTAssertThrowsError(try PGConnection(url: "postgres://postgres@127.0.0.1:\(listener.port)/x", options: options)) { error in
            XCTAssertEqual((error as? PGError)?.kind, .connection, "\(error)")
        }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThan(elapsed, 1.5, "libpq waited for the server")
        XCTAssertLessThan(elapsed, 15, "but not longer than connect_timeout allows (with a loaded-machine margin)")
    }

    func testPoolRidesOutARestartAndBacksOffWhileDown() throws {
        let pool = PGPool(url: try server.url, size: 2)
        XCTAssertEqual(try pool.withConnection { try $0.query("SELECT 1 AS one").first?.int("one") }, 1)

        let restarted = DispatchSemaphore(value: 0)
        let server = try self.server
        Thread.detachNewThread {
            try? server.restart(downFor: 2)
            restarted.signal()
        }
        // While it is down: every call fails with a connection error, and fast (no call waits out a timeout).
        var failures = 0
        var slowest = 0.0
        let deadline = Date().addingTimeInterval(1.5)
        Thread.sleep(forTimeInterval: 0.3)
        while Date() < deadline {
            let started = Date()
            do {
                try pool.withConnection { _ = try $0.query("SELECT 1 AS one") }
            } catch let error as PGError {
                XCTAssertTrue(error.kind == .connection || error.isRetryable, "\(error)")
                failures += 1
            }
            slowest = max(slowest, Date().timeIntervalSince(started))
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTAssertGreaterThan(failures, 0, "the restart was noticed")
        XCTAssertLessThan(slowest, 3, "a call while the server is down fails at once")

        XCTAssertEqual(restarted.wait(timeout: .now() + 60), .success)
        var answer: Int?
        let back = Date().addingTimeInterval(20)
        while answer == nil, Date() < back {
            answer = try? pool.withConnection { try $0.query("SELECT 2 AS two").first?.int("two") }
            if answer == nil { Thread.sleep(forTimeInterval: 0.1) }
        }
        XCTAssertEqual(answer, 2, "the pool reconnected after the restart")
    }

    func testReconnectBackoffDoublesToItsCapAndResets() {
        var backoff = ReconnectBackoff()
        XCTAssertNil(backoff.remainingWait(nowMs: 0))
        var waits: [Int64] = []
        for _ in 0..<9 {
            backoff.failed(nowMs: 1000)
            waits.append(backoff.remainingWait(nowMs: 1000) ?? -1)
        }
        XCTAssertEqual(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000])
        XCTAssertEqual(backoff.remainingWait(nowMs: 4000), 2000)
        XCTAssertNil(backoff.remainingWait(nowMs: 6000), "an attempt may go once the wait passed")
        backoff.succeeded()
        XCTAssertNil(backoff.remainingWait(nowMs: 1000))
        backoff.failed(nowMs: 0)
        XCTAssertEqual(backoff.remainingWait(nowMs: 0), 100, "a success starts over")
    }

    func testProcessOptionsAreTheDefaultsUntilConfiguredAtStart() {
        XCTAssertEqual(PGOptions.process, PGOptions())
        PGOptions.configureProcess(connectTimeoutSeconds: 7, statementTimeoutMs: 0)
        defer { PGOptions.configureProcess(connectTimeoutSeconds: nil, statementTimeoutMs: nil) }
        XCTAssertEqual(PGOptions.process.connectTimeoutSeconds, 7)
        XCTAssertEqual(PGOptions.process.statementTimeoutMs, 0)
        XCTAssertEqual(PGOptions.process.keepaliveIdleSeconds, PGOptions().keepaliveIdleSeconds)
    }
}

/// A loopback TCP listener that never accepts: connections complete in the kernel's backlog and
/// then hear nothing.
private final class SilentListener {
    let port: Int
    private var descriptor: Int32

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, 16) == 0 else { throw PGError(kind: .usage, message: "cannot listen: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }
}
