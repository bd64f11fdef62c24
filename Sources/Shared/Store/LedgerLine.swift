import Domain
import Foundation
import Postgres

/// One `ledger` row as the membership API, support and `storeledger user show` show it.
public struct LedgerLine: Encodable, Sendable {
    public var entryId: Int64
    public var subscriptionKey: String
    public var userId: String?
    public var kind: String
    public var purchaseId: String?
    public var productId: String?
    public var group: String?
    public var interval: Interval?
    public var amount: Int?
    public var before: [Interval]
    public var after: [Interval]
    public var balanceAfter: Int?
    public var cutKind: String?
    public var reason: String
    public var commandId: String
    public var cause: Cause
    /// R18: Apple's environment of the subscription the line is about.
    public var environment: String?
    public var createdAt: String

    public init(entryId: Int64, subscriptionKey: String, userId: String?, kind: String, purchaseId: String?, productId: String?,
                group: String?, interval: Interval?, amount: Int?, before: [Interval], after: [Interval], balanceAfter: Int?,
                cutKind: String?, reason: String, commandId: String, cause: Cause, environment: String?, createdAt: String) {
        self.entryId = entryId
        self.subscriptionKey = subscriptionKey
        self.userId = userId
        self.kind = kind
        self.purchaseId = purchaseId
        self.productId = productId
        self.group = group
        self.interval = interval
        self.amount = amount
        self.before = before
        self.after = after
        self.balanceAfter = balanceAfter
        self.cutKind = cutKind
        self.reason = reason
        self.commandId = commandId
        self.cause = cause
        self.environment = environment
        self.createdAt = createdAt
    }

    /// The line as the end user `user` may read it: other accounts' ids hidden (OwnershipReason).
    public func hidingOtherAccounts(from user: String) -> LedgerLine {
        var line = self
        line.reason = OwnershipReason.hidingOtherAccounts(reason, keeping: user)
        return line
    }

    static func decode(_ rows: PGRows) throws -> [LedgerLine] {
        let decoder = JSONDecoder()
        func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T { try decoder.decode(type, from: Data(text.utf8)) }
        return try rows.map { row in
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

/// `state` columns hold a `SubscriptionState` as JSON; every reader decodes them the same way.
func subscriptionStates(_ rows: PGRows) throws -> [SubscriptionState] {
    let decoder = JSONDecoder()
    return try rows.map { try storedDocument(try $0.string("state"), fallback: decoder) }
}

/// A stored document read directly (`StoredJSONReader`), or by `decoder` when the reader declines it:
/// the same value either way, and the decoder's error when neither can read it.
func storedDocument<T: StoredJSONDocument>(_ text: String, fallback decoder: JSONDecoder) throws -> T {
    var text = text
    if let value = text.withUTF8({ StoredJSONReader.document($0, T.read) }) { return value }
    return try decoder.decode(T.self, from: Data(text.utf8))
}
