import Foundation
@testable import Postgres
import XCTest

/// Pure tests of statement building and of the text formats: no server needed.
final class SQLTests: XCTestCase {
    func testInterpolatedValuesBecomeNumberedBinds() {
        let email = "a@b.c"
        let sql: SQL = "SELECT id FROM users WHERE email = \(email) AND age > \(42) AND note IS \(String?.none)"
        XCTAssertEqual(sql.text, "SELECT id FROM users WHERE email = $1 AND age > $2 AND note IS $3")
        XCTAssertEqual(sql.bindCount, 3)
        let binds = sql.render().binds
        XCTAssertEqual(binds.map(\.type), [.text, .int8, .text])
        XCTAssertTrue(binds[2].isNull)
    }

    func testFragmentsAreRenumberedWhenComposed() {
        let rows: [SQL] = [(1, "a"), (2, "b"), (3, "c")].map { id, name in "(\(id), \(name))" }
        var sql: SQL = "INSERT INTO t (id, name) VALUES \(fragment: .join(rows, separator: ", "))"
        sql += " RETURNING \(identifier: "id")"
        XCTAssertEqual(sql.text, #"INSERT INTO t (id, name) VALUES ($1, $2), ($3, $4), ($5, $6) RETURNING "id""#)
        XCTAssertEqual(sql.bindCount, 6)
        let joined = SQL("a = \(1)") + " AND " + SQL("b = \(2)")
        XCTAssertEqual(joined.text, "a = $1 AND b = $2")
    }

    func testIdentifiersAreQuotedAndUnsafeSQLIsRaw() {
        let sql: SQL = "SELECT * FROM \(identifier: #"we"ird"#) ORDER BY \(unsafeSQL: "created_at DESC")"
        XCTAssertEqual(sql.text, #"SELECT * FROM "we""ird" ORDER BY created_at DESC"#)
        XCTAssertEqual(SQL(unsafeSQL: "SELECT 1").text, "SELECT 1")
    }

    func testDescriptionsNeverShowValues() {
        let secret = "hunter2-secret"
        let sql: SQL = "UPDATE users SET password = \(secret), blob = \([UInt8]([1, 2])), at = \(Date())"
        XCTAssertFalse(sql.description.contains(secret))
        XCTAssertFalse("\(sql.render().binds)".contains(secret))
        XCTAssertEqual(secret.pgValue.description, "<text value>")
    }

    func testArrayLiteralsEscapeQuotesBackslashesAndNULL() {
        XCTAssertEqual(PGArrayLiteral.encode(["a", #"b"c"#, #"d\e"#, "NULL", nil, "", "{x,y}"]),
                       #"{"a","b\"c","d\\e","NULL",NULL,"","{x,y}"}"#)
        XCTAssertEqual(PGArrayLiteral.encode([]), "{}")
        // A quote or backslash that starts a grapheme (here with a combining acute) is still escaped.
        XCTAssertEqual(PGArrayLiteral.encode(["\"\u{301}x", "\\\u{301}", "é日本🎉"]), "{\"\\\"\u{301}x\",\"\\\\\u{301}\",\"é日本🎉\"}")
        XCTAssertEqual([Int64](arrayLiteral: 1, -2).pgValue.type, .int8Array)
        XCTAssertEqual([UInt8]([0, 1]).pgValue.type, .bytea)
        XCTAssertEqual([String?]([nil]).pgValue.type, .textArray)
    }

    func testTimestampFormatting() {
        XCTAssertEqual(PGTimestamp.format(Date(timeIntervalSince1970: 0)), "1970-01-01 00:00:00+00")
        XCTAssertEqual(PGTimestamp.format(Date(timeIntervalSince1970: 1_700_000_000.123)), "2023-11-14 22:13:20.123000+00")
        XCTAssertEqual(PGTimestamp.format(Date(timeIntervalSince1970: -0.000001)), "1969-12-31 23:59:59.999999+00")
        XCTAssertEqual(PGTimestamp.format(Date(timeIntervalSince1970: 951_782_400)), "2000-02-29 00:00:00+00")
    }

    func testTimestampParsingHandlesFractionsOffsetsAndSpecials() throws {
        XCTAssertEqual(PGTimestamp.parse("2023-11-14 22:13:20.123+00"), Date(timeIntervalSince1970: 1_700_000_000.123))
        XCTAssertEqual(PGTimestamp.parse("2023-11-15 03:43:20.5+05:30"), Date(timeIntervalSince1970: 1_700_000_000.5))
        XCTAssertEqual(PGTimestamp.parse("2023-11-14 20:13:20-02"), Date(timeIntervalSince1970: 1_700_000_000))
        XCTAssertEqual(PGTimestamp.parse("1970-01-01 00:00:00-00:00:30"), Date(timeIntervalSince1970: 30))
        XCTAssertEqual(PGTimestamp.parse("2023-11-14 22:13:20"), Date(timeIntervalSince1970: 1_700_000_000))
        XCTAssertEqual(PGTimestamp.parse("infinity"), .distantFuture)
        XCTAssertEqual(PGTimestamp.parse("-infinity"), .distantPast)
        let bc = try XCTUnwrap(PGTimestamp.parse("0044-03-15 12:00:00+00 BC"))
        XCTAssertEqual(PGTimestamp.format(bc), "0044-03-15 12:00:00+00 BC")
        for bad in ["", "2023-11-14", "2023-13-01 00:00:00+00", "2023-11-14 22:13:20.1234567+00", "2023-11-14 22:13:20+00 junk"] {
            XCTAssertNil(PGTimestamp.parse(bad), bad)
        }
    }

    func testTimestampRoundTripsAtMicrosecondPrecision() {
        for seconds in [0.0, 1.5, -1.5, 1_700_000_000.123456, 253_402_300_799.999999, -62_135_596_800] {
            let date = Date(timeIntervalSince1970: seconds)
            XCTAssertEqual(PGTimestamp.parse(PGTimestamp.format(date)), date, "\(seconds)")
        }
    }
}
