import Domain
import Foundation
import HTTPServer
import Postgres

/// The read side of the membership API: projections and ledger lines straight from PostgreSQL.
struct MembershipReads: Sendable {
    let pool: PGPool

    func ping() throws {
        _ = try pool.withConnection { try $0.query("SELECT 1 AS one") }
    }

    struct LedgerLine: Encodable {
        var entryId: Int64
        var subscriptionKey: String
        var userId: String?
        var kind: String
        var purchaseId: String?
        var group: String?
        var interval: Interval?
        var amount: Int?
        var before: [Interval]
        var after: [Interval]
        var reason: String
        var commandId: String
        var cause: Cause
        var createdAt: String
    }

    struct GroupMembership: Encodable {
        var group: String
        var active: Bool
        var expiresMs: Int64?
        var intervals: [Interval]
        var currentProduct: String?
        var autoRenewStatus: Bool?
        var pendingProduct: String?
        var isInBillingRetry: Bool?
    }

    struct SubscriptionView: Encodable {
        var subscriptionKey: String
        var userId: String?
        var membership: [GroupMembership]
        var ledger: [LedgerLine]
    }

    func subscription(_ key: String) throws -> HTTPResponse {
        try pool.withConnection { db in
            let states = try loadStates(db, "SELECT state::text AS state FROM subscriptions WHERE subscription_key = \(key)")
            guard let state = states.first else {
                return .error(status: 404, reason: "no subscription \(key) is known")
            }
            let ledger = try ledgerLines(db, "SELECT * FROM ledger WHERE subscription_key = \(key) ORDER BY entry_id")
            return .json(SubscriptionView(subscriptionKey: key, userId: state.userId,
                                          membership: groups(of: [state]), ledger: ledger))
        }
    }

    func userMembership(_ user: String) throws -> HTTPResponse {
        try pool.withConnection { db in
            let states = try loadStates(db, "SELECT state::text AS state FROM subscriptions WHERE user_id = \(user) ORDER BY subscription_key")
            guard !states.isEmpty else { return .error(status: 404, reason: "no subscription is linked to user \(user)") }
            struct View: Encodable { var userId: String; var subscriptions: [String]; var groups: [GroupMembership] }
            return .json(View(userId: user, subscriptions: states.map(\.subscriptionKey), groups: groups(of: states)))
        }
    }

    func userLedger(_ user: String, limit: Int) throws -> HTTPResponse {
        try pool.withConnection { db in
            let lines = try ledgerLines(db, """
                SELECT l.* FROM ledger l JOIN subscriptions s ON s.subscription_key = l.subscription_key
                WHERE s.user_id = \(user) ORDER BY l.created_at DESC, l.entry_id DESC LIMIT \(max(1, min(limit, 10_000)))
                """)
            struct View: Encodable { var userId: String; var entries: [LedgerLine] }
            return .json(View(userId: user, entries: lines))
        }
    }

    private func loadStates(_ db: PGConnection, _ sql: SQL) throws -> [SubscriptionState] {
        let decoder = JSONDecoder()
        return try db.query(sql).map { try decoder.decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) }
    }

    /// Membership per group across the given subscriptions: the union of their granted intervals.
    private func groups(of states: [SubscriptionState], now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> [GroupMembership] {
        var byGroup: [String: [Interval]] = [:]
        var latest: [String: (PurchaseGrant, SubscriptionState)] = [:]
        for state in states {
            for group in state.groups { byGroup[group, default: []] += state.entitlement(group: group) }
            for grant in state.grants.values where latest[grant.group].map({ $0.0.startMs < grant.startMs }) ?? true {
                latest[grant.group] = (grant, state)
            }
        }
        return byGroup.keys.sorted().map { group in
            let intervals = Interval.union(byGroup[group]!)
            let active = intervals.contains { $0.startMs <= now && ($0.endMs ?? .max) > now }
            let current = latest[group]
            let renewal = current?.1.renewal
            let pending = renewal?.autoRenewProductId.flatMap { $0 != current?.0.productId ? $0 : nil }
            return GroupMembership(group: group, active: active, expiresMs: intervals.last?.endMs, intervals: intervals,
                                   currentProduct: current?.0.productId, autoRenewStatus: renewal?.autoRenewStatus,
                                   pendingProduct: pending, isInBillingRetry: renewal?.isInBillingRetry)
        }
    }

    private func ledgerLines(_ db: PGConnection, _ sql: SQL) throws -> [LedgerLine] {
        let decoder = JSONDecoder()
        func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T { try decoder.decode(type, from: Data(text.utf8)) }
        return try db.query(sql).map { row in
            let start: Int64? = try row.decode("interval_start_ms")
            let end: Int64? = try row.decode("interval_end_ms")
            return LedgerLine(
                entryId: try row.int64("entry_id"), subscriptionKey: try row.string("subscription_key"),
                userId: try row.decode("user_id"), kind: try row.string("kind"), purchaseId: try row.decode("purchase_id"),
                group: try row.decode("group_id"), interval: start.map { Interval(startMs: $0, endMs: end) },
                amount: try row.decode("amount"),
                before: try decode([Interval].self, try row.string("before_intervals")),
                after: try decode([Interval].self, try row.string("after_intervals")),
                reason: try row.string("reason"), commandId: try row.string("command_id"),
                cause: try decode(Cause.self, try row.string("cause")), createdAt: try row.string("created_at"))
        }
    }
}
