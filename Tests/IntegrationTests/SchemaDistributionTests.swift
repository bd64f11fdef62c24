import Foundation
import Postgres
import XCTest

/// The state is partitioned like the topics: every table of the migrated schema is listed in
/// docs/scaling.md with its distribution key, and its primary key leads with that key.
final class SchemaDistributionTests: XCTestCase {
    func testEveryTablesPrimaryKeyLeadsWithItsDistributionKey() throws {
        let server = try EmbeddedPostgres.start()
        defer { server.stop() }
        let migrate = Process()
        migrate.executableURL = URL(fileURLWithPath: try Cluster.binary())
        migrate.arguments = ["migrate", "--database-url", server.url]
        try migrate.run()
        migrate.waitUntilExit()
        XCTAssertEqual(migrate.terminationStatus, 0)

        let db = try PGConnection(url: server.url)
        defer { db.close() }
        // The first column of each table's primary key, in key order.
        let rows = try db.query("""
            SELECT c.relname AS table_name, a.attname AS first_key_column
            FROM pg_index i
            JOIN pg_class c ON c.oid = i.indrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
            WHERE i.indisprimary AND n.nspname = 'public'
            """)
        var firstKey: [String: String] = [:]
        for row in rows { firstKey[try row.string("table_name")] = try row.string("first_key_column") }
        let tables = try db.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").map { try $0.string("tablename") }
        XCTAssertGreaterThan(tables.count, 8)

        let documented = try Self.documentedDistribution()
        for table in tables.sorted() {
            guard let key = documented[table] else {
                XCTFail("table \(table) is not in docs/scaling.md's distribution table")
                continue
            }
            XCTAssertEqual(firstKey[table], key, "\(table)'s primary key must lead with its distribution key \(key)")
        }
        for table in Set(documented.keys).subtracting(tables).sorted() {
            XCTFail("docs/scaling.md lists \(table), which the schema does not have")
        }
    }

    /// `| `table` | `key` | … |` rows of docs/scaling.md.
    static func documentedDistribution() throws -> [String: String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/scaling.md"), encoding: .utf8)
        let row = try NSRegularExpression(pattern: "^\\| `([a-z_]+)` \\| `([a-z_]+)` \\|", options: .anchorsMatchLines)
        var out: [String: String] = [:]
        for match in row.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            out[String(text[Range(match.range(at: 1), in: text)!])] = String(text[Range(match.range(at: 2), in: text)!])
        }
        return out
    }
}
