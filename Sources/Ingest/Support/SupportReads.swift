import Domain
import Foundation
import Postgres

/// The support pages' reads from PostgreSQL: a user's projection and ledger for the timeline, and
/// what a searched id names (a user, a transaction, an original transaction).
public struct SupportReads: Sendable {
    let pool: PGPool
    /// A page shows at most this many ledger lines (the oldest); the page says when it stopped.
    static let maxLedgerLines = 5_000
    /// Apple's environments (R18): an original transaction id names one subscription in each.
    static let environments = [SubscriptionKey.production, "Sandbox", "Xcode", "LocalTesting"]

    init(pool: PGPool) { self.pool = pool }

    /// For `storeledger user show`: one connection, opened on first use.
    public init(databaseURL: String) { pool = PGPool(url: databaseURL, size: 1) }

    /// nil when nothing is known about the user (no projection row, no subscription, no ledger line).
    public func timeline(user requested: String, nowMs: Int64) throws -> MembershipTimeline? {
        let user = UserId.normalized(requested)   // R17: a UUID user id in any case
        return try pool.withConnection { db in
            let decoder = JSONDecoder()
            let memberships = try db.query("SELECT view::text AS view FROM user_membership WHERE user_id = \(user) ORDER BY group_id")
                .map { try decoder.decode(GroupMembership.self, from: Data(try $0.string("view").utf8)) }
            // The user's lines, and those of their subscriptions from before any user was linked.
            var lines = try MembershipReads(pool: pool).ledgerLines(db, """
                SELECT * FROM ledger WHERE user_id = \(user)
                UNION ALL
                SELECT l.* FROM ledger l JOIN subscriptions s ON s.subscription_key = l.subscription_key
                WHERE s.user_id = \(user) AND l.user_id IS NULL
                ORDER BY entry_id LIMIT \(Self.maxLedgerLines + 1)
                """)
            guard !memberships.isEmpty || !lines.isEmpty else { return nil }
            let truncated = lines.count > Self.maxLedgerLines
            if truncated { lines.removeLast() }
            return MembershipTimeline(userId: user, memberships: memberships, ledger: lines, ledgerTruncated: truncated, nowMs: nowMs)
        }
    }

    /// Every user or unlinked subscription `query` names, as a user id, a transaction id (any alias,
    /// R1) or an original transaction id (in any environment, R18).
    func search(_ query: String) throws -> [SupportPage.SearchMatch] {
        let user = UserId.normalized(query)
        return try pool.withConnection { db in
            var matches: [SupportPage.SearchMatch] = []
            let users = try db.query("""
                SELECT user_id FROM subscriptions WHERE user_id = \(user)
                UNION SELECT user_id FROM user_membership WHERE user_id = \(user)
                UNION SELECT user_id FROM ledger WHERE user_id = \(user)
                LIMIT 1
                """)
            matches += try users.map { SupportPage.SearchMatch(userId: try $0.string("user_id"), subscriptionKey: nil, how: "user id") }
            let transactions = try db.query("""
                SELECT DISTINCT a.subscription_key, s.user_id FROM transaction_aliases a
                LEFT JOIN subscriptions s ON s.subscription_key = a.subscription_key
                WHERE a.transaction_id = \(query) ORDER BY a.subscription_key LIMIT 20
                """)
            matches += try transactions.map { row in
                SupportPage.SearchMatch(userId: try row.decode("user_id"), subscriptionKey: try row.string("subscription_key"),
                                        how: "transaction id, subscription \(try row.string("subscription_key"))")
            }
            let keys = Self.environments.map { SubscriptionKey.make(originalTransactionId: query, environment: $0) }
            let subscriptions = try db.query("""
                SELECT subscription_key, user_id FROM subscriptions
                WHERE subscription_key IN (\(keys[0]), \(keys[1]), \(keys[2]), \(keys[3])) ORDER BY subscription_key
                """)
            matches += try subscriptions.map { row in
                SupportPage.SearchMatch(userId: try row.decode("user_id"), subscriptionKey: try row.string("subscription_key"),
                                        how: "original transaction id, subscription \(try row.string("subscription_key"))")
            }
            // One line per user: the first way it was found is enough.
            var seenUsers: Set<String> = []
            return matches.filter { match in match.userId.map { seenUsers.insert($0).inserted } ?? true }
        }
    }
}
