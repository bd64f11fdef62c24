import Foundation
import XCTest

/// Contract: the Store module (Sources/Shared/Store) owns every SQL statement. Any string literal
/// elsewhere under Sources/ that reads as SQL (a statement keyword leading the literal or a clause,
/// `SELECT … FROM`, `INSERT INTO`, `ON CONFLICT`, a `pg_` function call…) fails this test. Comments
/// and English prose (log messages, help texts, "the PostgreSQL COMMIT") do not.
final class SQLPlacementTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func testNoSQLOutsideTheStoreModule() throws {
        let sources = Self.root.appendingPathComponent("Sources")
        let store = sources.appendingPathComponent("Shared/Store").path + "/"
        var scanned = 0
        var findings: [String] = []
        let files = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift", !file.path.hasPrefix(store) else { continue }
            scanned += 1
            let text = try String(contentsOf: file, encoding: .utf8)
            for literal in SwiftLiterals.strings(in: text) where SQLText.looksLikeSQL(literal.text) {
                findings.append("\(file.path.dropFirst(Self.root.path.count + 1)):\(literal.line): \(literal.text.prefix(80))")
            }
        }
        XCTAssertGreaterThan(scanned, 100, "the scan must see the source tree")
        XCTAssertEqual(findings, [], "SQL belongs in Sources/Shared/Store (a typed function there):\n" + findings.joined(separator: "\n"))
    }

    func testTheStoreModuleIsWhereTheSQLIs() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("Sources/Shared/Store/MembershipStore.swift"), encoding: .utf8)
        XCTAssertTrue(SwiftLiterals.strings(in: text).contains { SQLText.looksLikeSQL($0.text) }, "the detector must recognise Store's own statements")
    }

    func testStatementsInLiteralsAreFound() {
        let source = #"""
            let a = db.query("SELECT id FROM users WHERE email = \(email)")
            try db.execute("""
                INSERT INTO t (a) VALUES (\(x))
                ON CONFLICT DO NOTHING
                """)
            try conn.executeScript("BEGIN")
            try conn.executeScript("COMMIT")
            try conn.executeScript("ROLLBACK TO SAVEPOINT sp")
            let s = "UPDATE seen_events s SET deliveries = 1"
            let d = "DELETE FROM purchases WHERE subscription_key = ANY(\(keys))"
            let c = #"CREATE TABLE x (id int)"#
            let p = "\(nested("quoted")) SELECT pg_backend_pid() AS pid"
            let w = "  WITH moved AS (DELETE FROM a RETURNING *) SELECT 1"
            let q = "SET statement_timeout = 0"
            """#
        let flagged = SwiftLiterals.strings(in: source).filter { SQLText.looksLikeSQL($0.text) }.map(\.line)
        XCTAssertEqual(flagged, [1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    }

    func testProseCommentsAndLogMessagesAreNot() {
        let source = #"""
            // SELECT id FROM users: a comment is not a statement
            /* INSERT INTO t VALUES (1) */
            /// ```
            /// let sql: SQL = "SELECT id FROM users"
            /// ```
            logger.info("schema_migrated", ["applied": .string("1,2")])
            let help = "Batch latency from process to the PostgreSQL COMMIT (buckets 1 ms to 30 s)."
            let pem = "-----BEGIN CERTIFICATE-----"
            let message = "Select a product, then insert the receipt: update the app and delete nothing"
            let stop = "Tests only: a stage stopped itself before COMMIT."
            let url = "postgres://postgres@127.0.0.1:5432/storeledger"
            let mode = "READ COMMITTED"
            let type = "REVOKE"
            """#
        XCTAssertEqual(SwiftLiterals.strings(in: source).filter { SQLText.looksLikeSQL($0.text) }.map(\.text), [])
        XCTAssertEqual(SwiftLiterals.strings(in: source).count, 10, "every literal outside comments is seen")
    }
}

/// What reads as SQL: upper-case keywords as our statements write them.
enum SQLText {
    /// A statement keyword leading the literal, or a statement after a `;`.
    static let leading = try! NSRegularExpression(pattern: """
        (^|;)\\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT|LISTEN|NOTIFY|\
        UNLISTEN|TRUNCATE|COPY|SET|SHOW|WITH|VACUUM|ANALYZE|EXPLAIN)(\\s|;|$)
        """)
    /// Clauses no prose has, anywhere in the literal.
    static let clauses = try! NSRegularExpression(pattern: """
        \\bSELECT\\b[\\s\\S]*\\bFROM\\b|\\bINSERT INTO\\b|\\bDELETE FROM\\b|\\bUPDATE [a-z_]+( [a-z_]+)? SET\\b|\
        \\b(CREATE|ALTER|DROP) (TABLE|INDEX|UNIQUE INDEX|VIEW|SEQUENCE|DATABASE|ROLE|SYSTEM|EXTENSION|SCHEMA)\\b|\
        \\b(GRANT|REVOKE) [A-Z, ]+ ON\\b|\\bON CONFLICT\\b|\\bFOR (UPDATE|SHARE)\\b|\\bpg_[a-z_]+\\(|\\b(jsonb_to_recordset|unnest|nextval)\\(
        """)

    static func looksLikeSQL(_ text: String) -> Bool {
        let range = NSRange(text.startIndex..., in: text)
        return leading.firstMatch(in: text, range: range) != nil || clauses.firstMatch(in: text, range: range) != nil
    }
}

/// The string literals of Swift source, with interpolations replaced by `$`, outside comments.
/// Handles `"…"`, `"""…"""`, raw `#"…"#` forms and nested interpolations with strings inside.
enum SwiftLiterals {
    struct Literal { var line: Int; var text: String }

    static func strings(in source: String) -> [Literal] {
        let chars = Array(source)
        var literals: [Literal] = []
        var index = 0
        var line = 1
        scanCode(chars, &index, &line, &literals, untilParen: false)
        return literals
    }

    /// Code until the end (or, inside an interpolation, its closing parenthesis).
    private static func scanCode(_ c: [Character], _ i: inout Int, _ line: inout Int, _ out: inout [Literal], untilParen: Bool) {
        var depth = 0
        while i < c.count {
            let ch = c[i]
            if ch == "\n" { line += 1; i += 1; continue }
            if ch == "/", i + 1 < c.count, c[i + 1] == "/" {
                while i < c.count, c[i] != "\n" { i += 1 }
                continue
            }
            if ch == "/", i + 1 < c.count, c[i + 1] == "*" {
                var nesting = 0
                repeat {
                    if c[i] == "/", i + 1 < c.count, c[i + 1] == "*" { nesting += 1; i += 2; continue }
                    if c[i] == "*", i + 1 < c.count, c[i + 1] == "/" { nesting -= 1; i += 2; continue }
                    if c[i] == "\n" { line += 1 }
                    i += 1
                } while i < c.count && nesting > 0
                continue
            }
            if ch == "#" || ch == "\"" {
                var hashes = 0
                var j = i
                while j < c.count, c[j] == "#" { hashes += 1; j += 1 }
                if j < c.count, c[j] == "\"" {
                    i = j
                    out.append(scanString(c, &i, &line, &out, hashes: hashes))
                    continue
                }
                i += 1
                continue
            }
            if untilParen {
                if ch == "(" { depth += 1 }
                if ch == ")" {
                    if depth == 0 { i += 1; return }
                    depth -= 1
                }
            }
            i += 1
        }
    }

    /// A literal starting at its opening quote; interpolations are scanned as code (their own literals recorded too).
    private static func scanString(_ c: [Character], _ i: inout Int, _ line: inout Int, _ out: inout [Literal], hashes: Int) -> Literal {
        let startLine = line
        let multiline = i + 2 < c.count && c[i + 1] == "\"" && c[i + 2] == "\""
        i += multiline ? 3 : 1
        var text = ""
        let closing = String(repeating: "\"", count: multiline ? 3 : 1) + String(repeating: "#", count: hashes)
        let escape = "\\" + String(repeating: "#", count: hashes)
        while i < c.count {
            if matches(c, i, closing) { i += closing.count; break }
            if matches(c, i, escape) {
                let after = i + escape.count
                if after < c.count, c[after] == "(" {
                    i = after + 1
                    scanCode(c, &i, &line, &out, untilParen: true)
                    text += "$"
                    continue
                }
                if after < c.count {
                    if c[after] == "\n" { line += 1 }
                    text.append(c[after])
                    i = after + 1
                    continue
                }
            }
            if c[i] == "\n" { line += 1 }
            text.append(c[i])
            i += 1
        }
        return Literal(line: startLine, text: text)
    }

    private static func matches(_ c: [Character], _ i: Int, _ token: String) -> Bool {
        var j = i
        for ch in token {
            guard j < c.count, c[j] == ch else { return false }
            j += 1
        }
        return true
    }
}
