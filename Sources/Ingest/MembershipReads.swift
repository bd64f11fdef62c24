import Auth
import Domain
import Foundation
import HTTPServer
import Postgres
import Store

/// The read side of the membership API: projections and ledger lines straight from PostgreSQL.
/// `active` is the only thing computed at read time (it depends on the clock).
struct MembershipReads: Sendable {
    let pool: PGPool

    func ping() throws {
        try pool.withConnection { try MembershipQueries($0).ping() }
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
        /// The newest lines (`?limit=`), oldest first; `ledgerTruncated` when older ones were left out.
        var ledger: [LedgerLine]
        var ledgerTruncated: Bool
    }

    private static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A user token reads only a subscription linked to its user; for it an unknown key and someone
    /// else's look the same (403), so it cannot probe which subscriptions exist.
    ///
    /// R18: a key without `@Environment` names Production's subscription; when Production has none
    /// the first of the other environments that has one answers (apps and Apple's test tools know
    /// the `original_transaction_id`, not StoreLedger's key). `environment` picks one explicitly.
    func subscription(_ requested: String, environment: String? = nil, ledgerLimit: Int = EdgeChecks.subscriptionLedgerLimit,
                      readableBy principal: Principal?) throws -> HTTPResponse {
        try pool.withConnection { db in
            let queries = MembershipQueries(db)
            var key = SubscriptionKey.normalized(requested)
            var state: SubscriptionState?
            if requested.contains("@") {
                state = try queries.subscription(key)
            } else if let environment {
                key = SubscriptionKey.make(originalTransactionId: requested, environment: environment)
                state = try queries.subscription(key)
            } else {
                for candidate in SubscriptionKey.environments {
                    key = SubscriptionKey.make(originalTransactionId: requested, environment: candidate)
                    state = try queries.subscription(key)
                    if state != nil { break }
                }
                if state == nil { key = requested }
            }
            if let principal, case .user = principal,
               !(state?.userId.map { AccessPolicy.actsFor(principal, user: $0) } ?? false) {
                return .error(status: 403, reason: "a user token reads only subscriptions linked to its own user")
            }
            guard let state else {
                return .error(status: 404, reason: "no subscription \(key) is known")
            }
            var ledger = try queries.ledger(subscription: key, limit: ledgerLimit + 1)
            let truncated = ledger.count > ledgerLimit
            if truncated { ledger.removeFirst() }
            // A user reads the lines of the time it held the subscription (and those before any
            // owner), and never another account's id.
            if case .user(let id)? = principal {
                ledger = ledger.filter { $0.userId.map { UserId.same($0, id) } ?? true }.map { $0.hidingOtherAccounts(from: id) }
            }
            let now = Self.nowMs()
            return .json(SubscriptionView(subscriptionKey: key, userId: state.userId, environment: state.environment,
                                          membership: groupMemberships(of: [state]).map { GroupView($0, now: now) },
                                          ledger: ledger, ledgerTruncated: truncated))
        }
    }

    /// Per group: active, expiry, current product, auto-renew state, pending change, intervals,
    /// balance; from the `user_membership` projection the membership stage maintains.
    func userMembership(_ requested: String) throws -> HTTPResponse {
        let user = UserId.normalized(requested)   // R17: a UUID user id in any case
        return try pool.withConnection { db in
            let queries = MembershipQueries(db)
            let groups = try queries.groupMemberships(ofUser: user)
            let subscriptions = try queries.subscriptionKeys(ofUser: user)
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
    /// `before`: the entry id the previous page ended at (its oldest line): a user's whole evidence
    /// is readable a page at a time, however long it grows.
    func userLedger(_ requested: String, limit: Int, before: Int64? = nil, readableBy principal: Principal? = nil) throws -> HTTPResponse {
        let user = UserId.normalized(requested)
        return try pool.withConnection { db in
            var lines = try MembershipQueries(db).ledger(ofUser: user, order: .newestFirst, limit: min(limit, 10_000), before: before)
            if case .user? = principal { lines = lines.map { $0.hidingOtherAccounts(from: user) } }
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
}
