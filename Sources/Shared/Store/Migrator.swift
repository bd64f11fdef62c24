import Postgres
import Runtime

/// One schema change. Migrations are append-only: once applied, a version's SQL must not
/// change (its checksum is recorded and checked on every run); fix forward with a new one.
/// The SQL runs as a script inside a transaction, so statements that refuse transactions
/// (`CREATE INDEX CONCURRENTLY`, `VACUUM`) do not belong here.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// FNV-1a 64 of the SQL's UTF-8: detects edits, not tampering.
    public var checksum: String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in sql.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "fnv1a64:" + String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// Applies migrations in version order, each in its own transaction together with its
/// `schema_migrations` row. A session advisory lock serialises concurrent migrators (two
/// processes starting together): the second waits, then finds everything applied.
/// Re-running is a no-op. Versions in the database that this binary does not know are
/// logged, not refused (a newer binary may have migrated already); a changed checksum of an
/// applied version is an error.
public enum Migrator {
    /// Arbitrary constant shared by every StoreLedger process ("StoreLdg").
    static let lockKey: Int64 = 0x5374_6F72_654C_6467

    /// Returns the versions applied by this call (empty when the schema was up to date).
    @discardableResult
    public static func migrate(_ conn: PGConnection, _ migrations: [Migration]) throws -> [Int] {
        let ordered = try validated(migrations)
        if conn.inTransaction {
            throw PGError(kind: .usage, message: "migrate needs a connection outside a transaction: each migration gets its own")
        }
        try conn.execute("SELECT pg_advisory_lock(\(lockKey))")
        defer { if !conn.isBroken { _ = try? conn.execute("SELECT pg_advisory_unlock(\(lockKey))") } }

        try conn.executeScript("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version bigint PRIMARY KEY,
                name text NOT NULL,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        var recorded: [Int: (name: String, checksum: String)] = [:]
        for row in try conn.query("SELECT version, name, checksum FROM schema_migrations") {
            recorded[try row.int("version")] = (try row.string("name"), try row.string("checksum"))
        }
        try checkApplied(ordered, recorded)

        var applied: [Int] = []
        for migration in ordered where recorded[migration.version] == nil {
            do {
                try conn.transaction { conn in
                    try conn.executeScript(migration.sql)
                    try conn.execute("""
                        INSERT INTO schema_migrations (version, name, checksum)
                        VALUES (\(migration.version), \(migration.name), \(migration.checksum))
                        """)
                }
            } catch let error as PGError {
                throw error.prefixed("migration \(migration.version) (\(migration.name)) failed")
            }
            applied.append(migration.version)
        }
        if !applied.isEmpty {
            Logger(component: "postgres").info("schema_migrated", [
                "applied": .string(applied.map(String.init).joined(separator: ",")),
                "version": .of(ordered.last?.version ?? 0),
            ])
        }
        return applied
    }

    private static func validated(_ migrations: [Migration]) throws -> [Migration] {
        let ordered = migrations.sorted { $0.version < $1.version }
        for (index, migration) in ordered.enumerated() {
            guard migration.version > 0 else {
                throw PGError(kind: .migration, message: "migration version \(migration.version) (\(migration.name)) must be positive")
            }
            if index > 0, ordered[index - 1].version == migration.version {
                throw PGError(kind: .migration, message: "migration version \(migration.version) is declared twice")
            }
        }
        return ordered
    }

    private static func checkApplied(_ migrations: [Migration], _ recorded: [Int: (name: String, checksum: String)]) throws {
        for migration in migrations {
            guard let applied = recorded[migration.version] else { continue }
            if applied.checksum != migration.checksum {
                throw PGError(kind: .migration, message: """
                    migration \(migration.version) (\(migration.name)) was applied with checksum \(applied.checksum) \
                    but this binary has \(migration.checksum): applied migrations must not change, add a new one
                    """)
            }
        }
        let known = Set(migrations.map(\.version))
        let unknown = recorded.keys.filter { !known.contains($0) }.sorted()
        if !unknown.isEmpty {
            Logger(component: "postgres").info("schema_newer_than_binary", [
                "unknown_versions": .string(unknown.map(String.init).joined(separator: ",")),
            ])
        }
    }
}
