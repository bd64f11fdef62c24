/// One append-only ledger line (R4). The ledger is the source of truth; the membership table is
/// a projection rebuilt from it.
public struct LedgerEntry: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case grant      // interval added
        case cut        // interval removed (refund, revoke, switch)
        case extend     // an existing grant got longer (Apple corrected an expiry)
        case credit     // consumable balance added
        case debit      // consumable balance removed (refund)
        case record     // evidence only, nothing changed (R11: refund after the period ended)
        case link       // subscription linked to a user (R6)
    }

    public var kind: Kind
    public var subscriptionKey: String
    public var purchaseId: String?
    public var group: String?
    /// The interval added (grant/extend) or removed (cut).
    public var interval: Interval?
    public var amount: Int?
    /// Entitlement of the subscription's group before and after this entry: the union of intervals.
    public var before: [Interval]
    public var after: [Interval]
    public var reason: String
    public var commandId: String
    public var cause: Cause

    public init(kind: Kind, subscriptionKey: String, purchaseId: String?, group: String?, interval: Interval?,
                amount: Int? = nil, before: [Interval], after: [Interval], reason: String, commandId: String,
                cause: Cause) {
        self.kind = kind
        self.subscriptionKey = subscriptionKey
        self.purchaseId = purchaseId
        self.group = group
        self.interval = interval
        self.amount = amount
        self.before = before
        self.after = after
        self.reason = reason
        self.commandId = commandId
        self.cause = cause
    }
}

/// The difference between what a purchase has been granted so far (the sum of its ledger entries)
/// and what it should be granted now. Replaying a command computes the same target, so an unchanged
/// replay writes nothing and a fixed replay writes only the correction.
public enum GrantDelta: Equatable, Sendable {
    case add(Interval)
    case remove(Interval)

    public static func between(granted: Interval?, target: Interval?) -> [GrantDelta] {
        switch (granted, target) {
        case (nil, nil): return []
        case (nil, let t?): return [.add(t)]
        case (let g?, nil): return [.remove(g)]
        case (let g?, let t?):
            if g == t { return [] }
            guard g.startMs == t.startMs else { return [.remove(g), .add(t)] }
            if t.endOrMax < g.endOrMax { return [.remove(Interval(startMs: t.endOrMax, endMs: g.endMs))] }
            return [.add(Interval(startMs: g.endOrMax, endMs: t.endMs))]
        }
    }
}
