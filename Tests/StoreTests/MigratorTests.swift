import Foundation
import Postgres
import Store
import Synchronization
import TestSupport
import XCTest

/// Contract: migrations apply once, in order, each atomically with its schema_migrations row;
/// re-running is a no-op; a failed migration leaves nothing behind; an edited migration is
/// refused; two processes migrating at the same moment apply each version exactly once.
final class MigratorTests: PGTestCase {
    /// Each test gets its own database so schema_migrations starts empty.
    private func freshDatabase() throws -> String {
        try server.createDatabase("m_\(UUID().uuidString.prefix(8).lowercased())")
    }

    private let base = [
        Migration(version: 1, name: "accounts", sql: "CREATE TABLE accounts (id bigint PRIMARY KEY, name text NOT NULL);"),
        Migration(version: 2, name: "accounts_email", sql: """
            ALTER TABLE accounts ADD COLUMN email text;
            CREATE UNIQUE INDEX accounts_email ON accounts (email);
            """),
    ]

    func testAppliesOnceAndRerunIsANoOp() throws {
        let conn = try PGConnection(url: try freshDatabase())
        XCTAssertEqual(try Migrator.migrate(conn, base.reversed()), [1, 2])
        XCTAssertEqual(try Migrator.migrate(conn, base), [])
        let third = Migration(version: 3, name: "note", sql: "ALTER TABLE accounts ADD COLUMN note text")
        XCTAssertEqual(try Migrator.migrate(conn, base + [third]), [3])
        XCTAssertEqual(try conn.query("SELECT version FROM schema_migrations ORDER BY version").map { try $0.int("version") },
                       [1, 2, 3])
        XCTAssertEqual(try conn.execute("INSERT INTO accounts (id, name, email, note) VALUES (\(1), \("a"), \("e"), \("n"))"), 1)
        XCTAssertEqual(try Migrator.migrate(conn, base), [], "a newer database is accepted by an older binary")
    }

    func testFailedMigrationLeavesNothingBehind() throws {
        let conn = try PGConnection(url: try freshDatabase())
        let broken = Migration(version: 3, name: "broken", sql: "CREATE TABLE half (id int); SELECT no_such_function();")
        XCTAssertThrowsError(try Migrator.migrate(conn, base + [broken])) { error in
            XCTAssertTrue("\(error)".contains("migration 3 (broken) failed"), "\(error)")
        }
        XCTAssertEqual(try conn.query("SELECT to_regclass('half') IS NULL AS gone").first?.bool("gone"), true)
        XCTAssertEqual(try conn.query("SELECT max(version) AS v FROM schema_migrations").first?.int("v"), 2)
    }

    func testEditedMigrationIsRefused() throws {
        let conn = try PGConnection(url: try freshDatabase())
        try Migrator.migrate(conn, base)
        let edited = [base[0], Migration(version: 2, name: "accounts_email", sql: base[1].sql + "\n-- tweak")]
        XCTAssertThrowsError(try Migrator.migrate(conn, edited)) { error in
            XCTAssertEqual((error as? PGError)?.kind, .migration)
            XCTAssertTrue("\(error)".contains("migration 2 (accounts_email) was applied with checksum"), "\(error)")
        }
    }

    func testDuplicateVersionsAreRefused() throws {
        let conn = try PGConnection(url: try freshDatabase())
        XCTAssertThrowsError(try Migrator.migrate(conn, base + [Migration(version: 2, name: "again", sql: "SELECT 1")])) { error in
            XCTAssertEqual((error as? PGError)?.kind, .migration)
        }
    }

    func testConcurrentMigratorsApplyEachVersionOnce() throws {
        let url = try freshDatabase()
        // The slow first migration keeps the race window open.
        let migrations = [Migration(version: 1, name: "slow", sql: "SELECT pg_sleep(0.3); CREATE TABLE slow (id int);")] +
            base.map { Migration(version: $0.version + 1, name: $0.name, sql: $0.sql) }
        let results = Mutex<[Result<[Int], PGError>]>([])
        let group = DispatchGroup()
        for _ in 0..<3 {
            DispatchQueue.global().async(group: group) {
                let result: Result<[Int], PGError>
                do {
                    let conn = try PGConnection(url: url)
                    result = .success(try Migrator.migrate(conn, migrations))
                } catch {
                    result = .failure(error as? PGError ?? PGError(kind: .usage, message: "\(error)"))
                }
                results.withLock { $0.append(result) }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        let applied = try results.withLock { try $0.map { try $0.get() } }
        XCTAssertEqual(applied.flatMap { $0 }.sorted(), [1, 2, 3], "each version applied exactly once: \(applied)")
        XCTAssertEqual(applied.filter(\.isEmpty).count, 2)
    }

    func testMigrationChecksumIsStable() {
        let migration = Migration(version: 1, name: "x", sql: "CREATE TABLE a (id int)")
        XCTAssertEqual(migration.checksum, Migration(version: 9, name: "y", sql: "CREATE TABLE a (id int)").checksum)
        XCTAssertNotEqual(migration.checksum, Migration(version: 1, name: "x", sql: "CREATE TABLE a (id bigint)").checksum)
        XCTAssertTrue(migration.checksum.hasPrefix("fnv1a64:"))
        XCTAssertEqual(migration.checksum.count, 8 + 16)
    }
}
