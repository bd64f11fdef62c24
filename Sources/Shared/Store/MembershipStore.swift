import Domain
import Foundation
import Postgres

/// Membership's transaction (migrations 1, 2, 6): subscription states, the users' locks, the
/// append-only ledger (R4), the outbox (issue 17), the finance facts per purchase (`grants`, R10)
/// and the per-user projection. Every write is one set-based statement per batch, deferred
/// (`PGConnection.executeDeferred`): they reach the server in one round trip when the batch is done
/// (the stage sends them before it publishes) or with the next statement whose rows it reads.
public struct MembershipStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// The states of these subscriptions, locked for the batch (FOR UPDATE, in key order).
    public func lockStates(_ keys: [String]) throws -> [SubscriptionState] {
        try subscriptionStates(try db.query("""
            SELECT state::text AS state FROM subscriptions WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key FOR UPDATE
            """))
    }

    /// Creates the users' rows if needed and locks them in id order (R6): two batches touching one
    /// user serialise here. Both statements are deferred: they reach the server with the next query,
    /// in order, so that query runs under the locks. The lock answers with one row, not one per user:
    /// a deferred statement's answer waits on the server until the client reads the pipeline.
    public func lockUsers(_ users: [String]) throws {
        let list = users.sorted()
        try db.executeDeferred("INSERT INTO users (user_id) SELECT u FROM unnest(\(list)::text[]) AS t(u) ORDER BY u ON CONFLICT DO NOTHING")
        try db.executeDeferred("""
            SELECT count(*) FROM (SELECT user_id FROM users WHERE user_id = ANY(\(list)) ORDER BY user_id FOR UPDATE) AS locked
            """)
    }

    /// The users' other subscriptions (not among `keys`), unlocked: their users' locks protect them.
    public func states(ofUsers users: [String], excluding keys: [String]) throws -> [SubscriptionState] {
        try subscriptionStates(try db.query("""
            SELECT state::text AS state FROM subscriptions
            WHERE user_id = ANY(\(users.sorted())) AND NOT (subscription_key = ANY(\(keys))) ORDER BY subscription_key
            """))
    }

    /// Takes `count` ledger entry ids before the insert, ascending, so each outbox row can name its
    /// entry. Taken under the users' locks: one user's ids grow in commit order. The sequence is named
    /// (bigserial's name for it, as `InspectionQueries` reads it): `pg_get_serial_sequence` looked it up
    /// in the catalog once per id.
    public func reserveEntryIds(_ count: Int) throws -> [Int64] {
        try db.query("""
            SELECT nextval('ledger_entry_id_seq') AS id FROM generate_series(1, \(count))
            """).map { try $0.int64("id") }.sorted()
    }

    /// One insert per batch, in entry id order (the order the entries were made).
    public func appendLedger(_ rows: [LedgerRow]) throws {
        try BulkRows.insert(rows.sorted { $0.id < $1.id }, into: "ledger", on: db)
    }

    /// The outbox rows of the batch's membership-changing entries (same transaction as the ledger).
    public func appendOutbox(_ rows: [OutboxRow]) throws {
        try BulkRows.insert(rows, into: "membership_outbox", on: db)
    }

    /// Writes the subscriptions' states: inserts the new, upserts the stored (`BulkRows.write`).
    public func saveStates(_ rows: [SubscriptionRow]) throws {
        try BulkRows.write(rows, into: "subscriptions", key: ["subscription_key"], on: db)
    }

    /// Writes the finance facts of these purchases: inserts the new, upserts the stored (`BulkRows.write`).
    public func saveGrants(_ rows: [GrantRow]) throws {
        try BulkRows.write(rows, into: "grants", key: ["subscription_key", "purchase_id"], on: db)
    }

    /// Rewrites the per-user projection of these users: their rows are replaced by `rows`.
    public func replaceUserMembership(users: [String], with rows: [UserMembershipRow]) throws {
        guard !users.isEmpty else { return }
        try db.executeDeferred("DELETE FROM user_membership WHERE user_id = ANY(\(users))")
        try BulkRows.insert(rows, into: "user_membership", on: db)
    }
}
