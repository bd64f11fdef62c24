import Foundation
import Postgres
import Store
import TestSupport
import XCTest

/// Contract: `transaction` commits when the body returns and rolls back (rethrowing) when it
/// throws; nested calls are savepoints; a swallowed statement failure cannot turn into a
/// silent partial commit; serialization failures are classified retryable.
final class TransactionTests: PGTestCase {
    private struct Boom: Error {}

    private func makeTable(_ conn: PGConnection) throws -> String {
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY, v text)")
        return table
    }

    private func count(_ conn: PGConnection, _ table: String) throws -> Int {
        try XCTUnwrap(conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table)").first).int("n")
    }

    func testCommitsWhenBodyReturns() throws {
        let conn = try connect()
        let table = try makeTable(conn)
        let value = try conn.transaction { tx -> Int in
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("a")), (\(2), \("b"))")
        }
        XCTAssertEqual(value, 2)
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try count(try connect(), table), 2, "visible from another connection")
    }

    func testRollsBackAndRethrowsWhenBodyThrows() throws {
        let conn = try connect()
        let table = try makeTable(conn)
        XCTAssertThrowsError(try conn.transaction { tx in
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("a"))")
            throw Boom()
        }) { error in XCTAssertTrue(error is Boom) }
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try count(conn, table), 0)
    }

    func testStatementFailureInsideRollsBackEverything() throws {
        let conn = try connect()
        let table = try makeTable(conn)
        XCTAssertThrowsError(try conn.transaction { tx in
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("a"))")
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("dup"))")
        }) { error in XCTAssertEqual((error as? PGError)?.isUniqueViolation, true) }
        XCTAssertEqual(try count(conn, table), 0)
    }

    func testSwallowedFailureDoesNotCommitSilently() throws {
        let conn = try connect()
        let table = try makeTable(conn)
        XCTAssertThrowsError(try conn.transaction { tx in
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("a"))")
            _ = try? tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("dup"))")
        }) { error in XCTAssertEqual((error as? PGError)?.sqlState, "25P02", "\(error)") }
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try count(conn, table), 0)
    }

    func testNestedTransactionIsASavepoint() throws {
        let conn = try connect()
        let table = try makeTable(conn)
        try conn.transaction { tx in
            try tx.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("outer"))")
            XCTAssertThrowsError(try tx.transaction { inner in
                try inner.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(2), \("inner"))")
                throw Boom()
            })
            try tx.transaction { inner in
                try inner.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(3), \("kept"))")
            }
        }
        XCTAssertEqual(try conn.query("SELECT id FROM \(unsafeSQL: table) ORDER BY id").map { try $0.int("id") }, [1, 3])
    }

    func testSerializationFailureIsRetryable() throws {
        let setup = try connect()
        let table = try makeTable(setup)
        try setup.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(1), \("x")), (\(2), \("y"))")
        let a = try connect()
        let b = try connect()
        // Write skew: each reads both rows, then updates a different one.
        try a.executeScript("BEGIN ISOLATION LEVEL SERIALIZABLE")
        try b.executeScript("BEGIN ISOLATION LEVEL SERIALIZABLE")
        _ = try a.query("SELECT * FROM \(unsafeSQL: table)")
        _ = try b.query("SELECT * FROM \(unsafeSQL: table)")
        try a.execute("UPDATE \(unsafeSQL: table) SET v = \("a") WHERE id = \(1)")
        try b.execute("UPDATE \(unsafeSQL: table) SET v = \("b") WHERE id = \(2)")
        try a.executeScript("COMMIT")
        do {
            try b.executeScript("COMMIT")
            XCTFail("the second serializable commit should fail")
        } catch let error as PGError {
            XCTAssertEqual(error.sqlState, "40001")
            XCTAssertTrue(error.isRetryable)
            XCTAssertTrue(error.isSerializationFailure)
        }
        XCTAssertFalse(b.inTransaction)
    }

    func testIsolationLevelIsApplied() throws {
        let conn = try connect()
        let level = try conn.transaction(isolation: .serializable) { tx in
            try XCTUnwrap(tx.query("SHOW transaction_isolation").first).string("transaction_isolation")
        }
        XCTAssertEqual(level, "serializable")
    }
}
