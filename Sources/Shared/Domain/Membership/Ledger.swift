/// One append-only ledger line (R4). The ledger is the source of truth; the membership tables are
/// projections rebuilt from it (`LedgerProjection(entries:)`).
public struct LedgerEntry: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case grant      // interval added
        case cut        // interval removed (refund, revoke, switch)
        case extend     // an existing grant got longer (Apple corrected or extended an expiry)
        case credit     // consumable balance added
        case debit      // consumable balance removed (refund)
        case record     // evidence only, nothing changed (R11: refund after the period ended)
        case link       // subscription linked to a user (R6); `userId` is the new owner
        case unlink     // subscription moved away from a user (transfer policy); `userId` is the old owner
        case renewal    // auto-renew state changed (on/off, pending product, billing retry); no interval change
    }

    public var kind: Kind
    public var subscriptionKey: String
    /// The user whose entitlement `before`/`after` describe: the subscription's owner when the entry
    /// was written (nil while the subscription is not linked to any user yet).
    public var userId: String?
    public var purchaseId: String?
    public var productId: String?
    public var group: String?
    /// The interval added (grant/extend) or removed (cut).
    public var interval: Interval?
    /// Units credited or debited (consumables).
    public var amount: Int?
    /// The owner's entitlement in `group` before and after this entry: the union of intervals of
    /// the user's subscriptions (of this subscription alone while it has no user).
    public var before: [Interval]
    public var after: [Interval]
    /// The owner's balance in `group` after a credit/debit (consumables; may be negative, R13).
    public var balanceAfter: Int?
    /// Why an interval was cut (refund, revoke, upgrade, crossgrade, ...).
    public var cutKind: Cut.Kind?
    public var reason: String
    public var commandId: String
    public var cause: Cause
    /// Apple's environment of the subscription (R18): a Sandbox grant is marked as one.
    public var environment: String?

    public init(kind: Kind, subscriptionKey: String, userId: String? = nil, purchaseId: String?, productId: String? = nil,
                group: String?, interval: Interval?, amount: Int? = nil, before: [Interval], after: [Interval],
                balanceAfter: Int? = nil, cutKind: Cut.Kind? = nil, reason: String, commandId: String, cause: Cause,
                environment: String? = nil) {
        self.kind = kind
        self.subscriptionKey = subscriptionKey
        self.userId = userId
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
    }
}
