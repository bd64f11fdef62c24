import Foundation
import Postgres
import Store
import XCTest

/// The state is partitioned like the topics: every table of the migrated schema is listed in
/// docs/scaling.md with its distribution key, and its primary key leads with that key.
final class SchemaDistributionTests: XCTestCase {
    /// A private server with every migration applied by `storeledger migrate`.
    private func migratedServer() throws -> EmbeddedPostgres {
        let server = try EmbeddedPostgres.start()
        let migrate = Process()
        migrate.executableURL = URL(fileURLWithPath: try Cluster.binary())
        migrate.arguments = ["migrate", "--database-url", server.url]
        try migrate.run()
        migrate.waitUntilExit()
        XCTAssertEqual(migrate.terminationStatus, 0)
        return server
    }

    /// Issue 9: the same change written twice by one command is refused by the schema itself; the
    /// same change with another reason (a replay's compensation after a later fix) is not. Each row
    /// carries its change's identity as the membership stage writes it (migration 12).
    func testTheLedgerRefusesAChangeWrittenTwiceByOneCommand() throws {
        let server = try migratedServer()
        defer { server.stop() }
        let db = try PGConnection(url: server.url)
        defer { db.close() }
        func insert(_ reason: String, amount: Int?) throws {
            let key = LedgerRow.changeKey(commandId: "e1#p:p1", kind: "credit", purchaseId: "p1", group: "coins", startMs: nil, endMs: nil,
                                          amount: amount, cutKind: nil, reason: reason)
            try db.execute("""
                INSERT INTO ledger (subscription_key, kind, purchase_id, group_id, amount, before_intervals, after_intervals,
                                    reason, command_id, cause, change_key)
                VALUES ('s1', 'credit', 'p1', 'coins', \(amount), '[]', '[]', \(reason), 'e1#p:p1', '{}', \(key))
                """)
        }
        try insert("credits 100 units", amount: 100)
        XCTAssertThrowsError(try insert("credits 100 units", amount: 100)) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "23505", "\(error)")
        }
        try insert("replay after a fix (version 2): credits 100 units", amount: 100)
        try insert("credits 200 units", amount: 200)
        try insert("no amount", amount: nil)
        XCTAssertThrowsError(try insert("no amount", amount: nil), "NULLs count as equal")
        XCTAssertEqual(try db.query("SELECT count(*)::int AS n FROM ledger").first?.int("n"), 4)
    }

    func testEveryTablesPrimaryKeyLeadsWithItsDistributionKey() throws {
        let server = try migratedServer()
        defer { server.stop() }
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
