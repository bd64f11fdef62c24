import Domain

/// A half-open span of whole seconds `[start, end)`; `end == nil` is open-ended (lifetime).
/// The oracle compares at second precision: Apple's copies of one date differ in milliseconds
/// (receipts have none, S14), so every boundary is floored to its second on both sides.
public struct Span: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var start: Int64
    public var end: Int64?

    public init(start: Int64, end: Int64?) {
        self.start = start
        self.end = end
    }

    /// From milliseconds, flooring both boundaries.
    public init(startMs: Int64, endMs: Int64?) {
        self.init(start: AppleDates.floorSeconds(startMs), end: endMs.map(AppleDates.floorSeconds))
    }

    var endOrMax: Int64 { end ?? .max }
    public var isEmpty: Bool { endOrMax <= start }

    public static func < (a: Span, b: Span) -> Bool { (a.start, a.endOrMax) < (b.start, b.endOrMax) }

    public var description: String {
        "[\(AppleDates.rfc3339(start * 1000)), \(end.map { AppleDates.rfc3339($0 * 1000) } ?? "∞"))"
    }

    /// Sorted, disjoint, non-touching spans covering the same seconds.
    public static func union(_ spans: [Span]) -> [Span] {
        var merged: [Span] = []
        for span in spans.filter({ !$0.isEmpty }).sorted() {
            if let last = merged.last, span.start <= last.endOrMax {
                if span.endOrMax > last.endOrMax { merged[merged.count - 1].end = span.end }
            } else {
                merged.append(span)
            }
        }
        return merged
    }
}

/// What one user should hold in one group: the seconds they are entitled to, and for consumable
/// groups the balance.
public struct GroupExpectation: Sendable, Equatable {
    public var group: String
    public var spans: [Span]
    public var balance: Int?
}

public struct UserExpectation: Sendable, Equatable {
    public var userId: String
    /// Keyed by group; groups with nothing to hold are absent.
    public var groups: [String: GroupExpectation]
}

/// The independent oracle: each user's expected entitlement computed from the simulator's own
/// ground truth, with none of StoreLedger's dedupe/classify/membership code. The rules are the
/// domain's, stated once and simply:
/// - every charged period of a subscription entitles `[purchase, expiry)`; a non-renewing
///   subscription `[purchase, purchase + catalog duration)`; a non-consumable `[purchase, ∞)`;
/// - a cancellation (refund, revoke, or the switch instant of an upgrade/crossgrade) cuts that
///   purchase at the cancellation time; after its end it cuts nothing (R11);
/// - Apple keeps serving through a billing grace period, until a refund or revocation of one of
///   the subscription's purchases during it (a switch's cancellation is no refund);
/// - a consumable credits its units once, a refunded one none (R13);
/// - a subscription belongs to the app account that claimed it last: a receipt upload claims when it
///   is made, a new app account token from the first purchase carrying it; restored on another
///   account, all of it moves there (R6, R17);
/// - the user holds the union over every Apple ID and original_transaction_id they own (R6);
/// - purchases outside Production count only when the catalog grants them (R18).
public enum Oracle {
    public static func expectation(for user: SimUser, in state: StoreState,
                                   environments: Set<SimEnvironment>? = nil) -> UserExpectation {
        let environments = environments ?? granting(state.config.catalog)
        var spans: [String: [Span]] = [:]
        var balances: [String: Int] = [:]
        for otid in user.subscriptionIds + user.claimedSubscriptionIds.filter({ !user.subscriptionIds.contains($0) }) {
            guard let subscription = state.subscriptions[otid], owner(of: subscription, in: state) == user.userId,
                  environments.contains(subscription.environment) else { continue }
            for t in subscription.transactions {
                if t.kind == .consumable {
                    balances[t.group, default: 0] += t.cancellationMs == nil ? t.credits : 0
                    continue
                }
                var end = t.paidEndMs
                if let cut = t.cancellationMs { end = min(end ?? .max, cut) }
                spans[t.group, default: []].append(Span(startMs: t.purchaseMs, endMs: end))
            }
            let refunds = subscription.transactions.filter { !$0.isUpgraded }.compactMap(\.cancellationMs)
            for grace in subscription.graceWindows {
                let stop = refunds.filter { $0 >= grace.fromMs && $0 < grace.untilMs }.min() ?? grace.untilMs
                spans[subscription.group, default: []].append(Span(startMs: grace.fromMs, endMs: stop))
            }
        }
        var groups: [String: GroupExpectation] = [:]
        for (group, list) in spans {
            let union = Span.union(list)
            if !union.isEmpty { groups[group] = GroupExpectation(group: group, spans: union, balance: nil) }
        }
        for (group, balance) in balances {
            groups[group, default: GroupExpectation(group: group, spans: [], balance: nil)].balance = balance
        }
        return UserExpectation(userId: user.userId, groups: groups)
    }

    /// Who holds a subscription: the latest claim on it. A receipt upload claims when it is made; an
    /// app account token claims from the first purchase that carries it (a renewal repeating it does not).
    public static func owner(of subscription: SimSubscription, in state: StoreState) -> String {
        var claims = subscription.uploadClaims
        var firstUse: [String: Int64] = [:]
        for t in subscription.transactions { firstUse[t.appAccountToken] = min(firstUse[t.appAccountToken] ?? .max, t.purchaseMs) }
        for (token, atMs) in firstUse {
            // The app's token is the account id itself when that is a UUID (the catalog's user-id policy).
            let account = state.users[token] != nil ? token
                : state.users.values.first { $0.appAccountToken == token }?.userId ?? subscription.userId
            claims.append(SimClaim(account: account, atMs: atMs))
        }
        return claims.max { ($0.atMs, $0.account) < ($1.atMs, $1.account) }?.account ?? subscription.userId
    }

    /// The environments whose purchases grant under the catalog's `nonProductionPurchases`.
    public static func granting(_ catalog: Catalog) -> Set<SimEnvironment> {
        catalog.nonProductionPurchases == .grant ? Set(SimEnvironment.allCases) : [.production]
    }
}
