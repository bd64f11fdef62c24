import Domain
import Foundation
import Postgres
import Store

/// The support pages' reads from PostgreSQL: a user's projection and ledger for the timeline, and
/// what a searched id names (a user, a transaction, an original transaction).
public struct SupportReads: Sendable {
    let pool: PGPool
    /// A page shows at most this many ledger lines (the newest); the page says when it stopped.
    static let maxLedgerLines = 5_000

    init(pool: PGPool) { self.pool = pool }

    /// For `storeledger user show`: one connection, opened on first use.
    public init(databaseURL: String) { pool = PGPool(url: databaseURL, size: 1) }

    /// nil when nothing is known about the user (no projection row, no subscription, no ledger line).
    public func timeline(user requested: String, nowMs: Int64) throws -> MembershipTimeline? {
        let user = UserId.normalized(requested)   // R17: a UUID user id in any case
        return try pool.withConnection { db in
            let queries = MembershipQueries(db)
            let memberships = try queries.groupMemberships(ofUser: user)
            // The user's lines, and those of their subscriptions from before any user was linked: the
            // newest ones when there are too many (the customer asks about what changed lately),
            // shown oldest first.
            var lines = try queries.ledger(ofUser: user, order: .newestFirst, limit: Self.maxLedgerLines + 1)
            guard !memberships.isEmpty || !lines.isEmpty else { return nil }
            let truncated = lines.count > Self.maxLedgerLines
            if truncated { lines.removeLast() }
            return MembershipTimeline(userId: user, memberships: memberships, ledger: lines.reversed(), ledgerTruncated: truncated, nowMs: nowMs)
        }
    }

    /// Every user or unlinked subscription `query` names, as a user id, a transaction id (any alias,
    /// R1) or an original transaction id (in any environment, R18).
    func search(_ query: String) throws -> [SupportPage.SearchMatch] {
        let user = UserId.normalized(query)
        return try pool.withConnection { db in
            let queries = SupportQueries(db)
            var matches: [SupportPage.SearchMatch] = []
            if try queries.isKnownUser(user) { matches.append(SupportPage.SearchMatch(userId: user, subscriptionKey: nil, how: "user id")) }
            matches += try queries.subscriptions(transaction: query).map {
                SupportPage.SearchMatch(userId: $0.userId, subscriptionKey: $0.subscriptionKey, how: "transaction id, subscription \($0.subscriptionKey)")
            }
            // StoreLedger's own key (`<id>@Sandbox`, in any case) names one environment; a bare id any.
            let keys = query.contains("@") ? [SubscriptionKey.normalized(query)]
                : SubscriptionKey.environments.map { SubscriptionKey.make(originalTransactionId: query, environment: $0) }
            matches += try queries.subscriptions(keys: keys).map {
                SupportPage.SearchMatch(userId: $0.userId, subscriptionKey: $0.subscriptionKey,
                                        how: "original transaction id, subscription \($0.subscriptionKey)")
            }
            // One line per user, and per unlinked subscription: the first way it was found is enough.
            var seen: Set<String> = []
            return matches.filter { match in seen.insert(match.userId.map { "user:\($0)" } ?? "key:\(match.subscriptionKey ?? "")").inserted }
        }
    }
}
