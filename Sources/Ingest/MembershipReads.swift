import Auth
import Domain
import Foundation
import HTTPServer
import Postgres

/// The read side of the membership API: projections and ledger lines straight from PostgreSQL.
/// `active` is the only thing computed at read time (it depends on the clock).
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
        var productId: String?
        var group: String?
        var interval: Interval?
        var amount: Int?
        var before: [Interval]
        var after: [Interval]
        var balanceAfter: Int?
        var cutKind: String?
        var reason: String
        var commandId: String
        var cause: Cause
        /// R18: Apple's environment of the subscription the line is about.
        var environment: String?
        var createdAt: String
    }

    /// A group's membership plus `active` at the time of the read.
    struct GroupView: Encodable {
        var membership: GroupMembership
        var active: Bool

        init(_ membership: GroupMembership, now: Int64) {
            self.membership = membership
            self.active = membership.isActive(atMs: now)
        }

        private enum Keys: String, CodingKey { case active }
        func encode(to encoder: any Encoder) throws {
            try membership.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(active, forKey: .active)
        }
    }

    struct SubscriptionView: Encodable {
        var subscriptionKey: String
        var userId: String?
        /// R18: Production, Sandbox, Xcode or LocalTesting.
        var environment: String?
        var membership: [GroupView]
        var ledger: [LedgerLine]
    }

    private static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A user token reads only a subscription linked to its user; for it an unknown key and someone
    /// else's look the same (403), so it cannot probe which subscriptions exist.
    func subscription(_ key: String, readableBy principal: Principal?) throws -> HTTPResponse {
        try pool.withConnection { db in
            let states = try loadStates(db, "SELECT state::text AS state FROM subscriptions WHERE subscription_key = \(key)")
            if let principal, case .user = principal,
               !(states.first?.userId.map { AccessPolicy.actsFor(principal, user: $0) } ?? false) {
                return .error(status: 403, reason: "a user token reads only subscriptions linked to its own user")
            }
            guard let state = states.first else {
                return .error(status: 404, reason: "no subscription \(key) is known")
            }
            let ledger = try ledgerLines(db, "SELECT * FROM ledger WHERE subscription_key = \(key) ORDER BY entry_id")
            let now = Self.nowMs()
            return .json(SubscriptionView(subscriptionKey: key, userId: state.userId, environment: state.environment,
                                          membership: groupMemberships(of: [state]).map { GroupView($0, now: now) },
                                          ledger: ledger))
        }
    }

    /// Per group: active, expiry, current product, auto-renew state, pending change, intervals,
    /// balance; from the `user_membership` projection the membership stage maintains.
    func userMembership(_ requested: String) throws -> HTTPResponse {
        let user = UserId.normalized(requested)   // R17: a UUID user id in any case
        return try pool.withConnection { db in
            let decoder = JSONDecoder()
            let rows = try db.query("SELECT view::text AS view FROM user_membership WHERE user_id = \(user) ORDER BY group_id")
            let groups = try rows.map { try decoder.decode(GroupMembership.self, from: Data(try $0.string("view").utf8)) }
            let subscriptions = try db.query("SELECT subscription_key FROM subscriptions WHERE user_id = \(user) ORDER BY subscription_key")
                .map { try $0.string("subscription_key") }
            guard !groups.isEmpty || !subscriptions.isEmpty else {
                return .error(status: 404, reason: "no subscription is linked to user \(user)")
            }
            struct View: Encodable { var userId: String; var subscriptions: [String]; var groups: [GroupView] }
            let now = Self.nowMs()
            return .json(View(userId: user, subscriptions: subscriptions, groups: groups.map { GroupView($0, now: now) }))
        }
    }

    /// The user's ledger, newest first: entries written while the user owned a subscription, plus
    /// those of their subscriptions from before any user was linked (kept, then applied on link).
    func userLedger(_ requested: String, limit: Int) throws -> HTTPResponse {
        let user = UserId.normalized(requested)
        return try pool.withConnection { db in
            let lines = try ledgerLines(db, """
                SELECT * FROM ledger WHERE user_id = \(user)
                UNION ALL
                SELECT l.* FROM ledger l JOIN subscriptions s ON s.subscription_key = l.subscription_key
                WHERE s.user_id = \(user) AND l.user_id IS NULL
                ORDER BY entry_id DESC LIMIT \(max(1, min(limit, 10_000)))
                """)
            struct View: Encodable { var userId: String; var entries: [LedgerLine] }
            return .json(View(userId: user, entries: lines))
        }
    }

    /// Support's view of one user: membership (null when none is linked) and the newest ledger
    /// lines together, spliced from the two answers already encoded as JSON.
    func supportView(_ requested: String) throws -> HTTPResponse {
        let membership = try userMembership(requested)
        let ledger = try userLedger(requested, limit: 500)
        guard ledger.status == 200, let user = try? JSONEncoder().encode(UserId.normalized(requested)) else { return ledger }
        let body = Array(#"{"ledger":"#.utf8) + ledger.body + Array(#","membership":"#.utf8)
            + (membership.status == 200 ? membership.body : Array("null".utf8)) + Array(#","userId":"#.utf8) + [UInt8](user) + [UInt8(ascii: "}")]
        return .json(data: Data(body))
    }

    private func loadStates(_ db: PGConnection, _ sql: SQL) throws -> [SubscriptionState] {
        let decoder = JSONDecoder()
        return try db.query(sql).map { try decoder.decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) }
    }

    func ledgerLines(_ db: PGConnection, _ sql: SQL) throws -> [LedgerLine] {
        let decoder = JSONDecoder()
        func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T { try decoder.decode(type, from: Data(text.utf8)) }
        return try db.query(sql).map { row in
            let start: Int64? = try row.decode("interval_start_ms")
            let end: Int64? = try row.decode("interval_end_ms")
            return LedgerLine(
                entryId: try row.int64("entry_id"), subscriptionKey: try row.string("subscription_key"),
                userId: try row.decode("user_id"), kind: try row.string("kind"), purchaseId: try row.decode("purchase_id"),
                productId: try row.decode("product_id"), group: try row.decode("group_id"),
                interval: start.map { Interval(startMs: $0, endMs: end) }, amount: try row.decode("amount"),
                before: try decode([Interval].self, try row.string("before_intervals")),
                after: try decode([Interval].self, try row.string("after_intervals")),
                balanceAfter: try row.decode("balance_after"), cutKind: try row.decode("cut_kind"),
                reason: try row.string("reason"), commandId: try row.string("command_id"),
                cause: try decode(Cause.self, try row.string("cause")), environment: try row.decode("environment"),
                createdAt: try row.string("created_at"))
        }
    }
}

