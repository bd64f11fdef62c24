import Foundation
import Postgres
import Synchronization
import TestSupport
import XCTest

/// Contract: the pool lends at most `size` connections at once to many threads, every
/// borrower eventually gets one, broken connections are reconnected, and a connection left
/// inside a transaction is cleaned before the next borrower sees it.
final class PoolTests: PGTestCase {
    func testManyThreadsShareAFewConnections() throws {
        let url = try server.url
        let setup = try connect()
        let table = uniqueTable()
        try setup.executeScript("CREATE TABLE \(table) (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO \(table) VALUES (1, 0)")
        let pool = PGPool(url: url, size: 4)
        let inUse = Atomic<Int>(0)
        let maxInUse = Atomic<Int>(0)
        let failures = Mutex<[String]>([])
        let threads = 8, perThread = 40
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<perThread {
                do {
                    try pool.withConnection { conn in
                        let now = inUse.wrappingAdd(1, ordering: .relaxed).newValue
                        maxInUse.max(now, ordering: .relaxed)
                        defer { inUse.wrappingSubtract(1, ordering: .relaxed) }
                        try conn.execute("UPDATE \(unsafeSQL: table) SET n = n + 1 WHERE id = 1")
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertLessThanOrEqual(maxInUse.load(ordering: .relaxed), 4)
        XCTAssertEqual(try setup.query("SELECT n FROM \(unsafeSQL: table)").first?.int("n"), threads * perThread)
        XCTAssertLessThanOrEqual(pool.idleConnections, 4)
    }

    func testBrokenConnectionIsReconnectedOnNextCheckout() throws {
        let pool = PGPool(url: try server.url, size: 1)
        let killer = try connect()
        let pid = try pool.withConnection { try XCTUnwrap($0.query("SELECT pg_backend_pid() AS pid").first).int32("pid") }
        _ = try killer.query("SELECT pg_terminate_backend(\(pid))")
        XCTAssertThrowsError(try pool.withConnection { try $0.query("SELECT 1") }) { error in
            XCTAssertEqual((error as? PGError)?.isRetryable, true, "\(error)")
        }
        let newPid = try pool.withConnection { try XCTUnwrap($0.query("SELECT pg_backend_pid() AS pid").first).int32("pid") }
        XCTAssertNotEqual(newPid, pid)
    }

    func testConnectionLeftInTransactionIsRolledBack() throws {
        let pool = PGPool(url: try server.url, size: 1)
        let table = uniqueTable()
        try pool.withConnection { try $0.executeScript("CREATE TABLE \(table) (id int)") }
        try pool.withConnection { conn in
            try conn.executeScript("BEGIN")
            try conn.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1))")
        }
        try pool.withConnection { conn in
            XCTAssertFalse(conn.inTransaction)
            XCTAssertEqual(try conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table)").first?.int("n"), 0)
        }
    }

    func testUnreachableServerFailsWithoutLosingTheSlot() throws {
        let pool = PGPool(url: "postgres://postgres@127.0.0.1:1/none?connect_timeout=2", size: 1)
        for _ in 0..<2 {
            XCTAssertThrowsError(try pool.withConnection { _ in }) { error in
                XCTAssertEqual((error as? PGError)?.kind, .connection)
            }
        }
    }
}
