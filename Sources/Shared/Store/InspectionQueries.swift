import Postgres

/// Read-only looks at the database for the benches, the demo and their progress checks: ledger
/// counts and times, the busiest user, and PostgreSQL's own lock and deadlock statistics.
public struct InspectionQueries {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// Every ledger entry, counted.
    public func ledgerCount() throws -> Int {
        try db.query("SELECT count(*)::bigint AS n FROM ledger").first?.int("n") ?? 0
    }

    /// Entries inserted so far, from the ledger's id sequence: constant time however long the ledger
    /// (a rolled-back batch leaves gaps, so confirm the end with `ledgerCount`).
    public func ledgerSequence() throws -> Int {
        try db.query("SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM ledger_entry_id_seq").first?.int("n") ?? 0
    }

    /// Ledger entries per kind, most frequent first.
    public func ledgerKinds() throws -> [(kind: String, count: Int)] {
        try db.query("SELECT kind, count(*) AS n FROM ledger GROUP BY kind ORDER BY count(*) DESC, kind")
            .map { (try $0.string("kind"), try $0.int("n")) }
    }

    /// Of these users, the one with the most ledger lines.
    public func busiestUser(among users: [String]) throws -> String? {
        try db.query("""
            SELECT user_id FROM ledger WHERE user_id = ANY(\(users)) GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT 1
            """).first?.string("user_id")
    }

    /// The first ledger entry's time (ms since 1970) of each of these subscriptions, among entries after `entryId`.
    public func firstEntryTimes(of keys: [String], after entryId: Int64) throws -> [String: Double] {
        var times: [String: Double] = [:]
        for row in try db.query("""
            SELECT subscription_key, (extract(epoch FROM min(created_at)) * 1000)::float8 AS ms FROM ledger
            WHERE subscription_key = ANY(\(keys)) AND entry_id > \(entryId) GROUP BY subscription_key
            """) {
            times[try row.string("subscription_key")] = try row.double("ms")
        }
        return times
    }

    /// This connection's server process id (to leave its work out of measurements).
    public func backendProcessId() throws -> Int32? {
        try db.query("SELECT pg_backend_pid() AS pid").first.map { Int32(try $0.int("pid")) }
    }

    /// The server's WAL insert position in bytes (two readings apart: the WAL written between them, by everyone).
    public func walPosition() throws -> Int64 {
        try db.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS b").first.map { try $0.int64("b") } ?? 0
    }

    /// The statements (first 70 characters, whitespace folded) of backends of this database waiting for a lock.
    public func statementsWaitingForLocks() throws -> [String] {
        try db.query("""
            SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS q FROM pg_stat_activity
            WHERE wait_event_type = 'Lock' AND datname = current_database()
            """).map { try $0.string("q") }
    }

    /// Deadlocks PostgreSQL detected in this database since its statistics were reset.
    public func deadlocks() throws -> Int64 {
        try db.query("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").first?.int64("deadlocks") ?? 0
    }
}
