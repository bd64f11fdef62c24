import Domain
import Foundation
import Postgres

/// The read side of membership (the membership API, support, offer eligibility): the projections
/// and ledger lines the membership stage writes, as typed values.
public struct MembershipQueries {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// Ledger order for a user's lines.
    public enum Order: Sendable { case oldestFirst, newestFirst }

    /// Readiness: the server answers a statement.
    public func ping() throws {
        _ = try db.query("SELECT 1 AS one")
    }

    /// The subscription's state (`GET /v1/subscriptions/{id}`), nil when unknown.
    public func subscription(_ key: String) throws -> SubscriptionState? {
        try subscriptionStates(try db.query("SELECT state::text AS state FROM subscriptions WHERE subscription_key = \(key)")).first
    }

    /// Every state of the subscriptions linked to the user (one per Apple ID), by key.
    public func subscriptions(ofUser user: String) throws -> [SubscriptionState] {
        try subscriptionStates(try db.query("SELECT state::text AS state FROM subscriptions WHERE user_id = \(user) ORDER BY subscription_key"))
    }

    /// The keys of the subscriptions linked to the user.
    public func subscriptionKeys(ofUser user: String) throws -> [String] {
        try db.query("SELECT subscription_key FROM subscriptions WHERE user_id = \(user) ORDER BY subscription_key")
            .map { try $0.string("subscription_key") }
    }

    /// The subscription's newest `limit` ledger lines, oldest first: a subscription's ledger grows
    /// without bound (every claim of it writes lines), a read must not.
    public func ledger(subscription key: String, limit: Int) throws -> [LedgerLine] {
        try LedgerLine.decode(try db.query("""
            SELECT * FROM (SELECT * FROM ledger WHERE subscription_key = \(key) ORDER BY entry_id DESC LIMIT \(max(1, limit))) AS newest
            ORDER BY entry_id
            """))
    }

    /// The user's ledger: entries written while the user owned a subscription, plus those of their
    /// subscriptions from before any user was linked (kept, then applied on link).
    /// `before`: only entries older than this one (the next page of a newest-first read).
    public func ledger(ofUser user: String, order: Order, limit: Int, before: Int64? = nil) throws -> [LedgerLine] {
        let direction: SQL = order == .newestFirst ? "DESC" : "ASC"
        let bound = before ?? Int64.max
        return try LedgerLine.decode(try db.query("""
            SELECT * FROM ledger WHERE user_id = \(user) AND entry_id < \(bound)
            UNION ALL
            SELECT l.* FROM ledger l JOIN subscriptions s ON s.subscription_key = l.subscription_key
            WHERE s.user_id = \(user) AND l.user_id IS NULL AND l.entry_id < \(bound)
            ORDER BY entry_id \(fragment: direction) LIMIT \(max(1, limit))
            """))
    }

    /// The user's per-group membership (the `user_membership` projection), by group.
    public func groupMemberships(ofUser user: String) throws -> [GroupMembership] {
        let decoder = JSONDecoder()
        return try db.query("SELECT view::text AS view FROM user_membership WHERE user_id = \(user) ORDER BY group_id")
            .map { try decoder.decode(GroupMembership.self, from: Data(try $0.string("view").utf8)) }
    }

    /// The users whose linked subscriptions know `transactionId` under any alias (R1).
    public func owners(transaction transactionId: String) throws -> Set<String> {
        Set(try db.query("""
            SELECT DISTINCT s.user_id FROM transaction_aliases a JOIN subscriptions s ON s.subscription_key = a.subscription_key
            WHERE a.transaction_id = \(transactionId) AND s.user_id IS NOT NULL
            """).map { try $0.string("user_id") })
    }
}
