import Foundation
import Postgres
import Store
import TestSupport
import XCTest

/// Contract: inside a transaction, deferred writes (and the BEGIN) reach the server only with the next
/// statement that answers or with the COMMIT, in order and in one pipeline; a deferred write's failure
/// is thrown by the call that sent it, nothing after it runs and nothing is committed; a rollback drops
/// them unsent; the connection stays usable after every failure, and is known broken when the server
/// goes away mid-pipeline.
final class DeferredStatementTests: PGTestCase {
    /// A table whose inserts draw from a sequence: the sequence moves (for every session, committed or
    /// not) only when an insert reaches the server.
    private func makeTable(_ conn: PGConnection) throws -> (table: String, sequence: String) {
        let table = uniqueTable()
        try conn.executeScript("""
            CREATE SEQUENCE \(table)_seq;
            CREATE TABLE \(table) (id bigint PRIMARY KEY, v text, drawn bigint DEFAULT nextval('\(table)_seq'))
            """)
        return (table, "\(table)_seq")
    }

    private func insertRow(_ table: String, _ id: Int, _ value: String) -> SQL {
        "INSERT INTO \(unsafeSQL: table) (id, v) VALUES (\(id), \(value))"
    }

    private func drawn(_ sequence: String) throws -> Bool {
        try XCTUnwrap(try connect().query("SELECT is_called FROM \(unsafeSQL: sequence)").first).bool("is_called")
    }

    private func ids(_ table: String) throws -> [Int] {
        try connect().query("SELECT id FROM \(unsafeSQL: table) ORDER BY id").map { try $0.int("id") }
    }

    func testDeferredWritesTravelWithTheNextStatementInOrder() throws {
        let conn = try connect()
        let (table, sequence) = try makeTable(conn)
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        try conn.executeDeferred("UPDATE \(unsafeSQL: table) SET v = v || \("b") WHERE id = \(1)")
        XCTAssertTrue(conn.inTransaction)
        XCTAssertFalse(try drawn(sequence), "nothing reached the server yet")
        let row = try XCTUnwrap(conn.query("SELECT v, txid_current_if_assigned() IS NOT NULL AS writing FROM \(unsafeSQL: table)").first)
        XCTAssertEqual(try row.string("v"), "ab", "both ran, in order, before the query")
        XCTAssertTrue(try row.bool("writing"), "in the transaction the BEGIN opened")
        XCTAssertTrue(try drawn(sequence))
        XCTAssertEqual(try ids(table), [], "not committed yet")
        try conn.executeDeferred(insertRow(table, 2, "c"))
        try conn.commit()
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try ids(table), [1, 2], "the COMMIT carried the last deferred write")
    }

    func testAFailureIsThrownByTheStatementThatSentItAndNothingAfterItRuns() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        try conn.executeDeferred(insertRow(table, 1, "duplicate"))
        try conn.executeDeferred("CREATE TABLE \(unsafeSQL: table)_after (x int)")
        XCTAssertThrowsError(try conn.query("SELECT 1 AS one")) { error in
            let failure = error as? PGError
            XCTAssertEqual(failure?.isUniqueViolation, true, "\(error)")
            XCTAssertEqual(failure?.statement?.hasPrefix("INSERT INTO \(table)"), true, "names the statement that failed")
        }
        XCTAssertTrue(conn.inFailedTransaction)
        try conn.rollback()
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try conn.query("SELECT to_regclass(\(table + "_after")) IS NULL AS absent").first?.bool("absent"), true)
        try conn.transaction { tx in try tx.executeDeferred(insertRow(table, 3, "later")) }
        XCTAssertEqual(try ids(table), [3], "the connection goes on")
    }

    func testACommitWhoseDeferredWriteFailsCommitsNothing() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        try conn.execute(insertRow(table, 1, "before"))
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 2, "a"))
        try conn.executeDeferred(insertRow(table, 1, "duplicate"))
        XCTAssertThrowsError(try conn.commit()) { error in XCTAssertEqual((error as? PGError)?.isUniqueViolation, true, "\(error)") }
        XCTAssertFalse(conn.inTransaction, "rolled back")
        XCTAssertEqual(try ids(table), [1])
    }

    func testAWriteThatCannotBeSentFailsTheCommitAndTheTransactionEnds() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "sent"))
        try conn.executeDeferred(insertRow(table, 2, "nul \u{0} byte"))
        XCTAssertThrowsError(try conn.commit()) { error in XCTAssertEqual((error as? PGError)?.kind, .invalidParameter, "\(error)") }
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try ids(table), [], "the write sent before it is not committed either")
        try conn.transaction { tx in try tx.executeDeferred(insertRow(table, 3, "later")) }
        XCTAssertEqual(try ids(table), [3])
    }

    func testARollbackDropsDeferredWritesUnsent() throws {
        let conn = try connect()
        let (table, sequence) = try makeTable(conn)
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        try conn.rollback()
        XCTAssertFalse(conn.inTransaction)
        XCTAssertFalse(try drawn(sequence), "never sent")
        try conn.begin()
        _ = try conn.query("SELECT 1 AS one")
        try conn.executeDeferred(insertRow(table, 2, "b"))
        try conn.rollback()
        XCTAssertFalse(try drawn(sequence), "dropped after the transaction had started on the server too")
        XCTAssertEqual(try ids(table), [])
    }

    func testOutsideATransactionADeferredWriteRunsAtOnce() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        try conn.executeDeferred(insertRow(table, 1, "a"))
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try ids(table), [1])
    }

    func testABeginWaitsForTheFirstStatementAndAnEmptyTransactionSendsNothing() throws {
        let conn = try connect()
        let backend = try XCTUnwrap(conn.query("SELECT pg_backend_pid() AS pid").first).int("pid")
        let observer = try connect()
        func state() throws -> String {
            try XCTUnwrap(observer.query("SELECT state FROM pg_stat_activity WHERE pid = \(backend)").first).string("state")
        }
        try conn.begin()
        XCTAssertTrue(conn.inTransaction)
        XCTAssertEqual(try state(), "idle", "the BEGIN waits on the client")
        try conn.commit()
        try conn.begin()
        try conn.rollback()
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try state(), "idle")
        try conn.begin()
        _ = try conn.query("SELECT 1 AS one")
        XCTAssertEqual(try state(), "idle in transaction", "sent with the first statement")
        try conn.commit()
        XCTAssertEqual(try state(), "idle")
    }

    func testAFlushSendsTheDeferredWritesAndThrowsTheirFailure() throws {
        let conn = try connect()
        let (table, sequence) = try makeTable(conn)
        try conn.begin()
        try conn.flushDeferred()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        try conn.flushDeferred()
        XCTAssertTrue(try drawn(sequence), "sent")
        XCTAssertTrue(conn.inTransaction)
        XCTAssertFalse(conn.inFailedTransaction)
        try conn.executeDeferred(insertRow(table, 1, "duplicate"))
        XCTAssertThrowsError(try conn.flushDeferred()) { error in XCTAssertEqual((error as? PGError)?.isUniqueViolation, true, "\(error)") }
        XCTAssertTrue(conn.inFailedTransaction)
        XCTAssertThrowsError(try conn.commit())
        XCTAssertFalse(conn.inTransaction)
        XCTAssertEqual(try ids(table), [])
    }

    /// A COPY cannot travel in a pipeline: inside a transaction it waits like any deferred write and
    /// runs in its place, after the writes deferred before it and before those after; its failure is
    /// thrown by the call that sends it, nothing after it runs, and the transaction rolls back whole.
    func testDeferredCopiesRunInTheirPlaceAndTheirFailureEndsTheTransaction() throws {
        let conn = try connect()
        let (table, sequence) = try makeTable(conn)
        let copyStatement: SQL = "COPY \(unsafeSQL: table) (id, v) FROM STDIN (FORMAT binary)"
        func copy(_ ids: [Int], _ value: String) -> PGCopyRows {
            var rows = PGCopyRows(columns: 2)
            for id in ids {
                rows.startRow()
                rows.append(Int64(id))
                rows.append(value)
            }
            return rows
        }
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        try conn.copyDeferred(copyStatement, rows: copy([2, 3], "copied"))
        try conn.executeDeferred("UPDATE \(unsafeSQL: table) SET v = v || \("!") WHERE id >= \(2)")
        try conn.copyDeferred(copyStatement, rows: copy([4], "last"))
        XCTAssertFalse(try drawn(sequence), "nothing reached the server yet")
        let values = try conn.query("SELECT id, v FROM \(unsafeSQL: table) ORDER BY id").map { "\(try $0.int("id"))=\(try $0.string("v"))" }
        XCTAssertEqual(values, ["1=a", "2=copied!", "3=copied!", "4=last"], "in the order they were deferred")
        try conn.commit()
        XCTAssertEqual(try ids(table), [1, 2, 3, 4])

        try conn.begin()
        try conn.executeDeferred(insertRow(table, 5, "b"))
        try conn.copyDeferred(copyStatement, rows: copy([6, 1], "duplicate"))
        try conn.executeDeferred(insertRow(table, 7, "after"))
        XCTAssertThrowsError(try conn.commit()) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "23505", "\(error)")
        }
        XCTAssertFalse(conn.inTransaction, "rolled back")
        XCTAssertEqual(try ids(table), [1, 2, 3, 4], "nothing of the failed transaction stays")
        XCTAssertEqual(try conn.query("SELECT 1 AS one").first?.int("one"), 1, "the connection is usable")
    }

    func testIndependentReadsShareARoundTripAndAnswerInOrder() throws {
        let conn = try connect()
        let (table, sequence) = try makeTable(conn)
        try conn.begin()
        try conn.executeDeferred("INSERT INTO \(unsafeSQL: table) (id, v) VALUES (\(1), \("a")), (\(2), \("b"))")
        let answers = try conn.queries(["SELECT v FROM \(unsafeSQL: table) ORDER BY id", "SELECT count(*) AS n FROM \(unsafeSQL: table)",
                                        "SELECT \(7) AS seven"])
        XCTAssertEqual(try answers[0].map { try $0.string("v") }, ["a", "b"], "after the deferred write")
        XCTAssertEqual(try answers[1].first?.int("n"), 2)
        XCTAssertEqual(try answers[2].first?.int("seven"), 7)
        XCTAssertThrowsError(try conn.queries(["SELECT 1 / \(0) AS boom", "SELECT nextval(\(sequence)) AS drawn"])) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22012", "\(error)")
        }
        try conn.rollback()
        XCTAssertEqual(try conn.query("SELECT last_value FROM \(unsafeSQL: sequence)").first?.int("last_value"), 2,
                       "the read after the failure did not run")
        XCTAssertEqual(try conn.queries(["SELECT 1 AS one"]).first?.first?.int("one"), 1)
    }

    func testDeferredStatementsArePreparedOnceAndReused() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        for id in 1...4 {
            try conn.transaction { tx in
                try tx.executeDeferred("INSERT INTO \(unsafeSQL: table) (id, v) VALUES (\(id), \("v"))")
                try tx.executeDeferred("UPDATE \(unsafeSQL: table) SET v = v || \("!") WHERE id = \(id)")
            }
        }
        XCTAssertEqual(try ids(table), [1, 2, 3, 4])
        XCTAssertEqual(try connect().query("SELECT count(*) AS n FROM \(unsafeSQL: table) WHERE v = 'v!'").first?.int("n"), 4)
        let prepared = try conn.query("SELECT count(*) AS n FROM pg_prepared_statements WHERE statement LIKE \("%" + table + "%")")
        XCTAssertEqual(try prepared.first?.int("n"), 2, "each prepared from its second run, once")
    }

    func testAServerGoneMidPipelineLeavesABrokenConnectionThatResets() throws {
        let conn = try connect()
        let (table, _) = try makeTable(conn)
        let backend = try XCTUnwrap(conn.query("SELECT pg_backend_pid() AS pid").first).int("pid")
        try conn.begin()
        try conn.executeDeferred(insertRow(table, 1, "a"))
        _ = try connect().query("SELECT pg_terminate_backend(\(backend)::integer)")
        XCTAssertThrowsError(try conn.commit()) { error in XCTAssertEqual((error as? PGError)?.kind, .connection, "\(error)") }
        XCTAssertTrue(conn.isBroken)
        try conn.reset()
        XCTAssertEqual(try ids(table), [])
        try conn.transaction { tx in try tx.executeDeferred(insertRow(table, 2, "b")) }
        XCTAssertEqual(try ids(table), [2])
    }
}
