import Foundation
import Postgres
import TestSupport
import XCTest

/// Contract: every bindable Swift type goes to PostgreSQL as a bind parameter and reads back
/// unchanged (NULLs, unicode, quotes, zero bytes, microsecond dates, extremes), values never
/// alter the statement, and row accessors fail with clear errors instead of guessing.
final class RoundTripTests: PGTestCase {
    func testEveryBindableTypeRoundTrips() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("""
            CREATE TABLE \(table) (
                id int PRIMARY KEY, s text, i bigint, i32 integer, b boolean, d double precision,
                at timestamptz, raw bytea, u uuid, j jsonb)
            """)
        let strings = ["", "plain", "O'Brien \"quoted\" \\ backslash", "unicode: żółw 漢字 🐢 é", "line\nbreak\ttab", "NULL"]
        let bytes: [UInt8] = [0, 1, 0, 255, 0x5c, 0x78, 0]
        let dates = [Date(timeIntervalSince1970: 1_700_000_000.123), Date(timeIntervalSince1970: -86_400.5),
                     Date(timeIntervalSince1970: 1_700_000_000.000001)]
        let uuid = UUID()
        for (index, string) in strings.enumerated() {
            let date = dates[index % dates.count]
            try conn.execute("""
                INSERT INTO \(unsafeSQL: table) (id, s, i, i32, b, d, at, raw, u, j) VALUES
                (\(index), \(string), \(Int64.min + Int64(index)), \(Int32.max), \(index % 2 == 0), \(Double(index) / 3),
                 \(date), \(bytes), \(uuid), \(PGJSON(#"{"k": "v\"w", "n": 1}"#)))
                """)
            let row = try XCTUnwrap(conn.query("SELECT * FROM \(unsafeSQL: table) WHERE id = \(index)").first)
            XCTAssertEqual(try row.string("s"), string)
            XCTAssertEqual(try row.int64("i"), Int64.min + Int64(index))
            XCTAssertEqual(try row.int32("i32"), Int32.max)
            XCTAssertEqual(try row.int("id"), index)
            XCTAssertEqual(try row.bool("b"), index % 2 == 0)
            XCTAssertEqual(try row.double("d"), Double(index) / 3)
            XCTAssertEqual(try row.date("at"), date)
            XCTAssertEqual(try row.bytes("raw"), bytes)
            XCTAssertEqual(try row.decode("raw", as: Data.self), Data(bytes))
            XCTAssertEqual(try row.uuid("u"), uuid)
            XCTAssertEqual(try row.string("j"), #"{"k": "v\"w", "n": 1}"#)
        }
    }

    func testOptionalsBindAndReadAsNULL() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("""
            CREATE TABLE \(table) (s text, i bigint, i32 integer, b boolean, d double precision,
                                   at timestamptz, raw bytea, u uuid, j jsonb, a text[])
            """)
        try conn.execute("""
            INSERT INTO \(unsafeSQL: table) VALUES (\(String?.none), \(Int64?.none), \(Int32?.none), \(Bool?.none),
                \(Double?.none), \(Date?.none), \([UInt8]?.none), \(UUID?.none), \(PGJSON?.none), \([String]?.none))
            """)
        let row = try XCTUnwrap(conn.query("SELECT * FROM \(unsafeSQL: table)").first)
        for column in ["s", "i", "i32", "b", "d", "at", "raw", "u", "j", "a"] {
            XCTAssertTrue(try row.isNull(column), column)
        }
        XCTAssertNil(try row.decode("s", as: String?.self))
        XCTAssertNil(try row.decode("i", as: Int64?.self))
        XCTAssertNil(try row.decode("at", as: Date?.self))
        XCTAssertNil(try row.decode("raw", as: [UInt8]?.self))
        XCTAssertEqual(try conn.query("SELECT \(Optional("x"))::text AS v").first?.decode("v", as: String?.self), "x")
    }

    func testDoubleSpecialsAndIntegerExtremes() throws {
        let conn = try connect()
        for value in [Double.infinity, -.infinity, 0.1 + 0.2, 1e-300, -0.0, Double.greatestFiniteMagnitude] {
            XCTAssertEqual(try conn.query("SELECT \(value) AS v").first?.double("v"), value)
        }
        XCTAssertTrue(try XCTUnwrap(conn.query("SELECT \(Double.nan) AS v").first).double("v").isNaN)
        for value in [Int64.min, Int64.max, 0, -1] {
            XCTAssertEqual(try conn.query("SELECT \(value) AS v").first?.int64("v"), value)
        }
    }

    func testDatesKeepMicrosecondsAndServerAgreesOnTheInstant() throws {
        let conn = try connect()
        let date = Date(timeIntervalSince1970: 1_700_000_000.123456)
        let row = try XCTUnwrap(conn.query("""
            SELECT \(date) AS at, extract(epoch FROM \(date))::text AS epoch,
                   '2024-03-01 12:00:00.25+05:30'::timestamptz AS offset_at,
                   '2024-03-01 06:30:00.25'::timestamp AS naive
            """).first)
        XCTAssertEqual(try row.date("at"), date)
        XCTAssertEqual(try row.string("epoch"), "1700000000.123456")
        let expected = Date(timeIntervalSince1970: 1_709_274_600.25)
        XCTAssertEqual(try row.date("offset_at"), expected)
        XCTAssertEqual(try row.date("naive"), expected)
    }

    func testArraysBindForUnnest() throws {
        let conn = try connect()
        let strings = ["a", "b\"c", "d\\e", "NULL", "", "{x,y}", "żółw 🐢", "it's"]
        let read = try conn.query("SELECT v FROM unnest(\(strings)::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n")
            .map { try $0.string("v") }
        XCTAssertEqual(read, strings)
        let numbers: [Int64] = [Int64.min, -1, 0, Int64.max]
        XCTAssertEqual(try conn.query("SELECT unnest(\(numbers)) AS v").map { try $0.int64("v") }, numbers)
        let sparse: [String?] = ["x", nil, "y"]
        XCTAssertEqual(try conn.query("SELECT unnest(\(sparse)) AS v").map { try $0.decode("v", as: String?.self) }, sparse)
        let dates = [Date(timeIntervalSince1970: 1.5), Date(timeIntervalSince1970: 1_700_000_000.123456)]
        XCTAssertEqual(try conn.query("SELECT unnest(\(dates)) AS v").map { try $0.date("v") }, dates)
        XCTAssertEqual(try conn.query("SELECT cardinality(\([String]())) AS n").first?.int("n"), 0)
    }

    func testBinaryArraysRoundTripThroughUnnest() throws {
        let conn = try connect()
        let strings: [String?] = ["a", nil, "b\"c", "d\\e", "NULL", "", "{x,y}", "żółw 🐢 e\u{301}", "line\nbreak\u{1}", "it's"]
        let numbers: [Int64?] = [Int64.min, -1, nil, 0, 1, 255, 256, Int64.max, 42, 7]
        let flags: [Bool?] = [true, false, nil, true, true, false, false, true, nil, false]
        let documents: [String?] = [#"{"k":"v\"w","n":1}"#, nil, "[]", #""żółw""#, "null", "{}", #"{"a":[1,2,{"b":null}]}"#, "1.5", "true", #""\\""#]
        var texts = PGBinaryArray(.text), ints = PGBinaryArray(.int8), bools = PGBinaryArray(.bool), jsons = PGBinaryArray(.jsonb)
        for index in strings.indices {
            texts.append(strings[index])
            ints.append(numbers[index])
            bools.append(flags[index])
            jsons.append(json: documents[index].map { Array($0.utf8) })
        }
        XCTAssertEqual(texts.count, strings.count)
        let rows = try conn.query("""
            SELECT s, i, b, j::text AS j, n FROM unnest(\(texts), \(ints), \(bools), \(jsons)) WITH ORDINALITY AS u(s, i, b, j, n) ORDER BY n
            """)
        XCTAssertEqual(rows.count, strings.count)
        for (index, row) in rows.enumerated() {
            XCTAssertEqual(try row.decode("s", as: String?.self), strings[index], "text \(index)")
            XCTAssertEqual(try row.decode("i", as: Int64?.self), numbers[index], "bigint \(index)")
            XCTAssertEqual(try row.decode("b", as: Bool?.self), flags[index], "boolean \(index)")
            // jsonb prints its own canonical text: compare with what the server makes of the same text.
            let expected = try documents[index].map { try XCTUnwrap(conn.query("SELECT \(PGJSON($0))::text AS j").first).string("j") }
            XCTAssertEqual(try row.decode("j", as: String?.self), expected, "jsonb \(index)")
        }
        XCTAssertEqual(try conn.query("SELECT cardinality(\(PGBinaryArray(.text))) AS n").first?.int("n"), 0, "the empty array")
        // An integer column takes the bigint array through the assignment cast, which still refuses what does not fit.
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (v integer)")
        var fits = PGBinaryArray(.int8)
        fits.append(Int64(Int32.max))
        XCTAssertEqual(try conn.execute("INSERT INTO \(unsafeSQL: table) SELECT * FROM unnest(\(fits))"), 1)
        var tooLarge = PGBinaryArray(.int8)
        tooLarge.append(Int64(Int32.max) + 1)
        XCTAssertThrowsError(try conn.execute("INSERT INTO \(unsafeSQL: table) SELECT * FROM unnest(\(tooLarge))")) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22003")
        }
    }

    /// Binary COPY sends each field in its column's own type: every type, NULLs, extremes and odd text
    /// read back unchanged; an integer out of range is refused before anything is sent; what the server
    /// refuses (a bad document, a duplicate key) fails the copy, inserts none of its rows, and leaves the
    /// connection usable.
    func testCopiedRowsRoundTripAndFailuresInsertNothing() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY, s text, n integer, b boolean, raw bytea, j json, jb jsonb)")
        let strings: [String?] = ["a", nil, "b\"c", "d\\e", "NULL", "", "{x,y}", "żółw 🐢 e\u{301}", "line\nbreak\u{1}", "it's"]
        let numbers: [Int?] = [Int(Int32.min), -1, nil, 0, 1, 255, 256, Int(Int32.max), 42, 7]
        let flags: [Bool?] = [true, false, nil, true, true, false, false, true, nil, false]
        let bytes: [[UInt8]?] = [[0, 1, 0, 255], nil, [], [0x5c, 0x78], [1], [2], [3], [4], [5], [0]]
        let documents: [String?] = [#"{"k":"v\"w","n":1}"#, nil, "[]", #""żółw""#, "null", "{}", #"{"b":1,"a":[1,{"c":null}]}"#, "1.5", "true", #""\\""#]
        var rows = PGCopyRows(columns: 7)
        for index in strings.indices {
            rows.startRow()
            rows.append(Int64(index) * 1_000_000_007 - 5)
            rows.append(strings[index])
            try rows.appendInteger(numbers[index], column: "n")
            rows.append(flags[index])
            rows.append(bytes: bytes[index])
            rows.append(json: documents[index].map { Array($0.utf8) }, jsonb: false)
            rows.append(json: documents[index].map { Array($0.utf8) }, jsonb: true)
        }
        XCTAssertEqual(rows.count, strings.count)
        try conn.copyDeferred("COPY \(unsafeSQL: table) (id, s, n, b, raw, j, jb) FROM STDIN (FORMAT binary)", rows: rows)   // outside a transaction: at once
        let read = try conn.query("SELECT id, s, n, b, raw, j::text AS j, jb::text AS jb FROM \(unsafeSQL: table) ORDER BY id")
        XCTAssertEqual(read.count, strings.count)
        for (index, row) in read.enumerated() {
            XCTAssertEqual(try row.int64("id"), Int64(index) * 1_000_000_007 - 5)
            XCTAssertEqual(try row.decode("s", as: String?.self), strings[index], "text \(index)")
            XCTAssertEqual(try row.decode("n", as: Int?.self), numbers[index], "integer \(index)")
            XCTAssertEqual(try row.decode("b", as: Bool?.self), flags[index], "boolean \(index)")
            XCTAssertEqual(try row.decode("raw", as: [UInt8]?.self), bytes[index], "bytea \(index)")
            XCTAssertEqual(try row.decode("j", as: String?.self), documents[index], "json keeps the text \(index)")
            let expected = try documents[index].map { try XCTUnwrap(conn.query("SELECT \(PGJSON($0))::text AS j").first).string("j") }
            XCTAssertEqual(try row.decode("jb", as: String?.self), expected, "jsonb \(index)")
        }

        var tooLarge = PGCopyRows(columns: 2)
        tooLarge.startRow()
        tooLarge.append(Int64(99))
        XCTAssertThrowsError(try tooLarge.appendInteger(Int(Int32.max) + 1, column: "n")) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22003")
            XCTAssertEqual((error as? PGError)?.kind, .invalidParameter)
        }

        func copy(_ ids: [Int64], document: String = "{}") -> PGCopyRows {
            var rows = PGCopyRows(columns: 2)
            for id in ids {
                rows.startRow()
                rows.append(id)
                rows.append(json: Array(document.utf8), jsonb: true)
            }
            return rows
        }
        let copyIdAndDocument: SQL = "COPY \(unsafeSQL: table) (id, jb) FROM STDIN (FORMAT binary)"
        XCTAssertThrowsError(try conn.copyDeferred(copyIdAndDocument, rows: copy([1_000, 1_001], document: #"{"a":"#))) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22P02", "\(error)")
        }
        XCTAssertThrowsError(try conn.copyDeferred(copyIdAndDocument, rows: copy([2_000, -5]))) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "23505", "\(error)")
        }
        XCTAssertEqual(try conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table)").first?.int("n"), strings.count,
                       "a failed copy inserts none of its rows")
        try conn.copyDeferred(copyIdAndDocument, rows: copy([]))
        try conn.copyDeferred(copyIdAndDocument, rows: copy([3_000]))
        XCTAssertEqual(try conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table)").first?.int("n"), strings.count + 1,
                       "the connection still copies")
    }

    func testBinaryArraysAreCheckedByTheServer() throws {
        let conn = try connect()
        var nul = PGBinaryArray(.text)
        nul.append("a\u{0}b")
        XCTAssertThrowsError(try conn.query("SELECT unnest(\(nul)) AS v")) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22021", "\(error)")
        }
        var broken = PGBinaryArray(.jsonb)
        broken.append(json: Array(#"{"a":"#.utf8))
        XCTAssertThrowsError(try conn.query("SELECT unnest(\(broken)) AS v")) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "22P02", "\(error)")
        }
        XCTAssertEqual(try conn.query("SELECT 1 AS one").first?.int("one"), 1, "connection still usable")
    }

    func testUnnestBatchInsertOf500Rows() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id text PRIMARY KEY, amount bigint NOT NULL, at timestamptz NOT NULL)")
        let ids = (0..<500).map { "id-\($0)" }
        let amounts = (0..<500).map { Int64($0) * 10 }
        let dates = (0..<500).map { Date(timeIntervalSince1970: 1_700_000_000 + Double($0)) }
        let insert: SQL = """
            INSERT INTO \(unsafeSQL: table) (id, amount, at)
            SELECT * FROM unnest(\(ids)::text[], \(amounts)::bigint[], \(dates)::timestamptz[])
            ON CONFLICT (id) DO NOTHING
            """
        XCTAssertEqual(try conn.execute(insert), 500)
        XCTAssertEqual(try conn.execute(insert), 0, "replaying the batch is a no-op")
        let row = try XCTUnwrap(conn.query("SELECT count(*) AS n, sum(amount) AS total FROM \(unsafeSQL: table)").first)
        XCTAssertEqual(try row.int("n"), 500)
        XCTAssertEqual(try row.string("total"), "1247500")
    }

    func testInjectionAttemptsStayData() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (name text)")
        let hostile = ["Robert'); DROP TABLE \(table); --", "' OR '1'='1", "$1", "\\'; SELECT pg_sleep(10); --"]
        for name in hostile {
            try conn.execute("INSERT INTO \(unsafeSQL: table) (name) VALUES (\(name))")
        }
        XCTAssertEqual(try conn.query("SELECT name FROM \(unsafeSQL: table) ORDER BY name").map { try $0.string("name") },
                       hostile.sorted())
        XCTAssertEqual(try conn.query("SELECT name FROM \(unsafeSQL: table) WHERE name = \("' OR '1'='1' --x")").count, 0)
        XCTAssertEqual(try conn.query("SELECT \(hostile)::text[] = \(hostile) AS same").first?.bool("same"), true)
    }

    func testNulInStringIsRejectedBeforeSending() throws {
        let conn = try connect()
        XCTAssertThrowsError(try conn.query("SELECT \("a\u{0}b") AS v")) { error in
            XCTAssertEqual((error as? PGError)?.kind, .invalidParameter)
        }
        XCTAssertEqual(try conn.query("SELECT 1 AS one").first?.int("one"), 1, "connection still usable")
    }

    func testRowAccessorsFailClearly() throws {
        let conn = try connect()
        let row = try XCTUnwrap(conn.query("SELECT 1 AS n, NULL::text AS nothing, 'x' AS word, 3000000000 AS big").first)
        XCTAssertThrowsError(try row.string("missing")) { error in
            XCTAssertTrue("\(error)".contains("no column \"missing\""), "\(error)")
        }
        XCTAssertThrowsError(try row.string("nothing")) { error in
            XCTAssertTrue("\(error)".contains("is NULL"), "\(error)")
        }
        XCTAssertThrowsError(try row.date("n")) { error in
            XCTAssertEqual((error as? PGError)?.kind, .decoding)
            XCTAssertTrue("\(error)".contains("integer"), "\(error)")
        }
        XCTAssertThrowsError(try row.int64("word"))
        XCTAssertThrowsError(try row.int32("big"))
        XCTAssertEqual(try row.string("n"), "1", "any column reads as its text")
    }

    func testServerErrorsCarrySQLStateButNoBindValues() throws {
        let conn = try connect()
        let secret = "s3cret-token-value"
        XCTAssertThrowsError(try conn.query("SELECT \(secret)::int AS v")) { error in
            let pgError = error as? PGError
            XCTAssertEqual(pgError?.sqlState, "22P02")
            XCTAssertEqual(pgError?.kind, .server)
            XCTAssertFalse("\(error)".contains(secret), "\(error)")
            XCTAssertTrue("\(error)".contains("$1"), "statement text with placeholders: \(error)")
        }
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (email text CONSTRAINT \(table)_email UNIQUE)")
        try conn.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(secret))")
        XCTAssertThrowsError(try conn.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(secret))")) { error in
            let pgError = error as? PGError
            XCTAssertEqual(pgError?.isUniqueViolation, true)
            XCTAssertEqual(pgError?.isRetryable, false)
            XCTAssertEqual(pgError?.constraint, "\(table)_email")
            XCTAssertTrue(pgError?.detail?.contains(secret) ?? false, "detail keeps the server's words")
            XCTAssertFalse("\(error)".contains(secret), "\(error)")
        }
    }

    func testRowsAffected() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)")
        for id in 0..<20 {
            XCTAssertEqual(try conn.execute("INSERT INTO \(unsafeSQL: table) (id) VALUES (\(id))"), 1)
        }
        XCTAssertEqual(try conn.execute("UPDATE \(unsafeSQL: table) SET n = n + 1 WHERE id < \(5)"), 5)
        XCTAssertEqual(try conn.query("SELECT sum(n) AS s FROM \(unsafeSQL: table) WHERE id >= \(0)").first?.int("s"), 5)
        XCTAssertEqual(try conn.execute("SELECT 1"), 1)
        XCTAssertEqual(try conn.execute("CREATE TEMP TABLE scratch (x int)"), 0)
    }

    /// The statements this connection has prepared on the server whose text mentions `table`.
    private func prepared(on conn: PGConnection, mentioning table: String) throws -> [String] {
        try conn.query("SELECT statement FROM pg_prepared_statements WHERE strpos(statement, \(table)) > 0 ORDER BY statement")
            .map { try $0.string("statement") }
    }

    func testStatementsArePreparedFromTheirSecondRunAndKeepWorking() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)")
        func insert(_ id: Int) throws -> Int { try conn.execute("INSERT INTO \(unsafeSQL: table) (id) VALUES (\(id)) ON CONFLICT DO NOTHING") }
        XCTAssertEqual(try insert(1), 1)
        XCTAssertEqual(try prepared(on: conn, mentioning: table), [], "a first run is not prepared")
        XCTAssertEqual(try insert(2), 1)
        XCTAssertEqual(try insert(2), 0, "the prepared statement takes new values")
        XCTAssertEqual(try insert(3), 1)
        XCTAssertEqual(try prepared(on: conn, mentioning: table).count, 1, "prepared once, from the second run")
        XCTAssertEqual(try conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table)").first?.int("n"), 3)

        // Same text, other parameter types: a statement of its own.
        XCTAssertEqual(try conn.query("SELECT \(Int64(7)) AS v").first?.string("v"), "7")
        XCTAssertEqual(try conn.query("SELECT \(Int64(8)) AS v").first?.string("v"), "8")
        XCTAssertEqual(try conn.query("SELECT \("text") AS v").first?.string("v"), "text")
        XCTAssertEqual(try conn.query("SELECT \("again") AS v").first?.string("v"), "again")

        // A server error through a prepared statement is classified and redacted as any other.
        let secret = "secret-\(UUID().uuidString)"
        try conn.executeScript("ALTER TABLE \(table) ADD COLUMN email text UNIQUE")
        func setEmail(_ id: Int) throws { try conn.execute("UPDATE \(unsafeSQL: table) SET email = \(secret) WHERE id = \(id)") }
        try setEmail(1)
        XCTAssertThrowsError(try setEmail(2)) { error in
            XCTAssertEqual((error as? PGError)?.isUniqueViolation, true, "\(error)")
            XCTAssertFalse("\(error)".contains(secret), "\(error)")
        }
        XCTAssertThrowsError(try setEmail(3)) { XCTAssertEqual(($0 as? PGError)?.isUniqueViolation, true, "\($0)") }
    }

    func testAPreparedStatementWhoseResultChangedIsPreparedAgain() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY); INSERT INTO \(table) VALUES (1)")
        func columns() throws -> Int { try conn.query("SELECT * FROM \(unsafeSQL: table) WHERE id = \(1)").columns.count }
        XCTAssertEqual(try columns(), 1)
        XCTAssertEqual(try columns(), 1)
        // A migration elsewhere changes the table under the prepared `SELECT *`.
        try connect().executeScript("ALTER TABLE \(table) ADD COLUMN added text")
        XCTAssertThrowsError(try columns()) { XCTAssertEqual(($0 as? PGError)?.sqlState, "0A000", "\($0)") }
        XCTAssertEqual(try columns(), 2, "the stale statement is forgotten and the text runs again")
        XCTAssertEqual(try columns(), 2)

        // A pooler's DISCARD ALL (or anything else) drops the names: the next run prepares again.
        try conn.executeScript("DEALLOCATE ALL")
        XCTAssertThrowsError(try columns()) { XCTAssertEqual(($0 as? PGError)?.sqlState, "26000", "\($0)") }
        XCTAssertEqual(try columns(), 2)
        XCTAssertEqual(try columns(), 2)
        XCTAssertEqual(try prepared(on: conn, mentioning: table).count, 1)
    }

    /// PostgreSQL's default would switch this statement to a generic plan made while the table was
    /// one vacuumed page (a sequential scan) and keep it as the table grows; planned per run, the
    /// prepared statement uses the index once the table is large.
    func testPreparedStatementsArePlannedForTheTableAsItIsNow() throws {
        let conn = try connect()
        let table = uniqueTable()
        try conn.executeScript("""
            CREATE TABLE \(table) (user_id text, group_id text, PRIMARY KEY (user_id, group_id));
            INSERT INTO \(table) VALUES ('a', 'g')
            """)
        try conn.executeScript("VACUUM \(table)")
        func delete(_ users: [String]) throws -> Int { try conn.execute("DELETE FROM \(unsafeSQL: table) WHERE user_id = ANY(\(users))") }
        for _ in 0..<8 { XCTAssertEqual(try delete(["b", "c"]), 0) }
        XCTAssertEqual(try prepared(on: conn, mentioning: table).count, 1)
        try conn.executeScript("INSERT INTO \(table) SELECT 'u' || i, 'g' FROM generate_series(1, 20000) i")

        func scans() throws -> (seq: Int, index: Int) {
            let row = try XCTUnwrap(conn.query("""
                SELECT seq_scan, coalesce(idx_scan, 0) AS idx_scan FROM pg_stat_xact_user_tables WHERE relid = \(table)::regclass
                """).first)
            return (try row.int("seq_scan"), try row.int("idx_scan"))
        }
        try conn.executeScript("BEGIN")  // the view counts this transaction's scans
        let before = try scans()
        XCTAssertEqual(try delete(["u1", "u2"]), 2)
        let after = try scans()
        try conn.executeScript("ROLLBACK")
        XCTAssertEqual(after.seq - before.seq, 0, "no sequential scan of 20,000 rows for two keys")
        XCTAssertGreaterThan(after.index - before.index, 0, "found through the primary key")
        XCTAssertEqual(try conn.query("SHOW plan_cache_mode").first?.string("plan_cache_mode"), "force_custom_plan")
    }

    /// A keyed session (a stage's) keeps one generic plan per statement with whole-table scans, parallel
    /// workers and JIT priced out or off; other sessions plan every run.
    func testKeyedSessionsKeepGenericIndexPlans() throws {
        let keyed = try PGConnection(url: server.url, options: .keyed)
        func setting(_ conn: PGConnection, _ name: String) throws -> String? {
            try conn.query(SQL(unsafeSQL: "SELECT current_setting('\(name)') AS v")).first?.string("v")
        }
        XCTAssertEqual(try setting(keyed, "plan_cache_mode"), "force_generic_plan")
        XCTAssertEqual(try setting(keyed, "enable_seqscan"), "off")
        XCTAssertEqual(try setting(keyed, "max_parallel_workers_per_gather"), "0")
        XCTAssertEqual(try setting(keyed, "jit"), "off")
        XCTAssertEqual(try setting(keyed, "idle_in_transaction_session_timeout"), "5min", "a frozen stage's locks are let go")
        let plain = try connect()
        XCTAssertEqual(try setting(plain, "plan_cache_mode"), "force_custom_plan")
        XCTAssertEqual(try setting(plain, "enable_seqscan"), "on")

        // A plan made while the table is empty is still an index plan once the table has grown.
        let table = uniqueTable()
        try keyed.execute(SQL(unsafeSQL: "CREATE TABLE \(table) (k text, n int, PRIMARY KEY (k, n))"))
        try keyed.execute(SQL(unsafeSQL: "PREPARE lookup(text[]) AS SELECT count(*) AS c FROM \(table) WHERE k = ANY($1)"))
        XCTAssertEqual(try keyed.query("EXECUTE lookup(ARRAY['k1'])").first?.int64("c"), 0)
        try keyed.execute(SQL(unsafeSQL: "INSERT INTO \(table) SELECT 'k' || (i / 3), i FROM generate_series(1, 30000) AS i"))
        XCTAssertEqual(try keyed.query("EXECUTE lookup(ARRAY['k1', 'k2'])").first?.int64("c"), 6)
        let plan = try keyed.query("EXPLAIN EXECUTE lookup(ARRAY['k1', 'k2'])").map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
        XCTAssertTrue(plan.contains("\(table)_pkey"), plan)
        XCTAssertTrue(plan.contains("$1"), "the generic plan: \(plan)")
    }

    func testPreparingCanBeTurnedOffAndIsForgottenOnReconnect() throws {
        var options = PGOptions.process
        options.preparesStatements = false
        let plain = try PGConnection(url: server.url, options: options)
        let table = uniqueTable()
        try plain.executeScript("CREATE TABLE \(table) (id bigint PRIMARY KEY)")
        for id in 0..<4 { try plain.execute("INSERT INTO \(unsafeSQL: table) VALUES (\(id))") }
        XCTAssertEqual(try prepared(on: plain, mentioning: table), [])

        let conn = try connect()
        func count() throws -> Int? { try conn.query("SELECT count(*) AS n FROM \(unsafeSQL: table) WHERE id >= \(0)").first?.int("n") }
        XCTAssertEqual(try count(), 4)
        XCTAssertEqual(try count(), 4)
        XCTAssertEqual(try prepared(on: conn, mentioning: table).count, 1)
        let pid = try XCTUnwrap(conn.query("SELECT pg_backend_pid() AS pid").first).int("pid")
        _ = try plain.query("SELECT pg_terminate_backend(\(Int32(pid)))")
        XCTAssertThrowsError(try count())
        try conn.reset()
        XCTAssertEqual(try count(), 4, "a new session: the old name is not used")
        XCTAssertEqual(try count(), 4)
    }

    func testBrokenConnectionIsDetectedRetryableAndResettable() throws {
        let victim = try connect()
        let killer = try connect()
        let pid = try XCTUnwrap(victim.query("SELECT pg_backend_pid() AS pid").first).int("pid")
        XCTAssertEqual(try killer.query("SELECT pg_terminate_backend(\(Int32(pid))) AS ok").first?.bool("ok"), true)
        XCTAssertThrowsError(try victim.query("SELECT 1 AS one")) { error in
            XCTAssertEqual((error as? PGError)?.isRetryable, true, "\(error)")
        }
        XCTAssertTrue(victim.isBroken)
        try victim.reset()
        XCTAssertFalse(victim.isBroken)
        XCTAssertEqual(try victim.query("SELECT 1 AS one").first?.int("one"), 1)
        victim.close()
        XCTAssertThrowsError(try victim.query("SELECT 1")) { error in
            XCTAssertEqual((error as? PGError)?.kind, .usage)
        }
        try victim.reset()
        XCTAssertEqual(try victim.query("SELECT 2 AS two").first?.int("two"), 2)
    }

    func testConnectFailureIsAConnectionError() throws {
        let url = try server.url
        let wrongPort = url.replacingOccurrences(of: ":\(try server.port)/", with: ":1/")
        XCTAssertThrowsError(try PGConnection(url: wrongPort)) { error in
            XCTAssertEqual((error as? PGError)?.kind, .connection)
            XCTAssertEqual((error as? PGError)?.isRetryable, true)
        }
    }
}
