/// What a user (or an unlinked subscription) holds in one group: the read model behind
/// `GET /v1/users/{user_id}/membership` and the `user_membership` table.
public struct GroupMembership: Codable, Sendable, Equatable {
    public var group: String
    /// The union of granted intervals.
    public var intervals: [Interval]
    /// End of the last interval; nil when there is none or it is open-ended (see `openEnded`).
    public var expiresMs: Int64?
    public var openEnded: Bool
    /// The product of the latest purchase in the group, and the subscription it belongs to.
    public var currentProduct: String?
    public var currentSubscriptionKey: String?
    public var autoRenewStatus: Bool?
    /// The product the subscription renews into when it differs from the current one (R5: a
    /// downgrade or a crossgrade to another duration waits for the next renewal).
    public var pendingProduct: String?
    public var pendingChange: String?
    public var isInBillingRetry: Bool?
    public var gracePeriodExpiresMs: Int64?
    /// Consumable units held (R13); nil for groups without consumables.
    public var balance: Int?
    public var subscriptionKeys: [String]
    /// R18: the Apple environments the group's subscriptions are from (a Sandbox grant is marked).
    public var environments: [String]?

    public init(group: String, intervals: [Interval], currentProduct: String? = nil, currentSubscriptionKey: String? = nil,
                autoRenewStatus: Bool? = nil, pendingProduct: String? = nil, pendingChange: String? = nil,
                isInBillingRetry: Bool? = nil, gracePeriodExpiresMs: Int64? = nil, balance: Int? = nil,
                subscriptionKeys: [String] = [], environments: [String]? = nil) {
        self.group = group
        self.intervals = intervals
        self.expiresMs = intervals.last?.endMs
        self.openEnded = intervals.last.map { $0.endMs == nil } ?? false
        self.currentProduct = currentProduct
        self.currentSubscriptionKey = currentSubscriptionKey
        self.autoRenewStatus = autoRenewStatus
        self.pendingProduct = pendingProduct
        self.pendingChange = pendingChange
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresMs = gracePeriodExpiresMs
        self.balance = balance
        self.subscriptionKeys = subscriptionKeys
        self.environments = environments
    }

    public func isActive(atMs now: Int64) -> Bool { intervals.contains { $0.contains(now) } }
}

/// The membership of the given subscriptions (one user's, or a single one) per group.
public func groupMemberships(of states: [SubscriptionState]) -> [GroupMembership] {
    let ordered = states.sorted { $0.subscriptionKey < $1.subscriptionKey }
    var groups: Set<String> = []
    for state in ordered {
        for grant in state.grants.values { groups.insert(grant.group) }
        for grace in state.graces.values { groups.insert(grace.group) }
    }
    return groups.sorted().map { group in
        let holders = ordered.filter { $0.holds(group: group) }
        let intervals = Interval.union(holders.flatMap { $0.entitlement(group: group) })
        // The current product: the latest purchase that still grants something (else the latest at all).
        // One pass keeping the two latest, not arrays of every grant paired with its state: this runs
        // for every user each membership batch touches.
        var latestGranting: (grant: PurchaseGrant, state: SubscriptionState)?
        var latestAny: (grant: PurchaseGrant, state: SubscriptionState)?
        for state in holders {
            for grant in state.grants.values where grant.group == group {
                if latestAny.map({ isLater(grant, than: $0.grant) }) ?? true { latestAny = (grant, state) }
                if state.granted[grant.purchaseId] != nil, latestGranting.map({ isLater(grant, than: $0.grant) }) ?? true {
                    latestGranting = (grant, state)
                }
            }
        }
        let current = latestGranting ?? latestAny
        let renewal = current?.grant.productKind == .autoRenewable ? current?.state.renewal : nil
        // A product change takes effect at a renewal: with auto-renew off nothing will renew, whatever
        // product Apple still names.
        let pending = renewal?.autoRenewStatus == false ? nil
            : renewal?.autoRenewProductId.flatMap { $0 != current?.grant.productId ? $0 : nil }
        let hasUnits = holders.contains { $0.holdsUnits(group: group) }
        return GroupMembership(
            group: group, intervals: intervals, currentProduct: current?.grant.productId,
            currentSubscriptionKey: current?.state.subscriptionKey, autoRenewStatus: renewal?.autoRenewStatus,
            pendingProduct: pending, pendingChange: pending == nil ? nil : renewal?.pendingChange,
            isInBillingRetry: renewal?.isInBillingRetry, gracePeriodExpiresMs: renewal?.gracePeriodExpiresMs,
            balance: hasUnits ? holders.reduce(0) { $0.saturatingAdding($1.balance(group: group)) } : nil,
            subscriptionKeys: holders.map(\.subscriptionKey),
            environments: Set(holders.compactMap(\.environment)).sorted())
    }
}

/// The later of two purchases by start, then purchase id: strictly, so the first of equals stays.
private func isLater(_ grant: PurchaseGrant, than other: PurchaseGrant) -> Bool {
    (other.startMs, other.purchaseId) < (grant.startMs, grant.purchaseId)
}

/// The ledger folded: what every purchase has been granted, per subscription, and who owns it.
/// Built either from the ledger (the source of truth) or from the stored states; the two must be
/// equal, which is how the projection is checked and rebuilt.
public struct LedgerProjection: Codable, Sendable, Equatable {
    public struct Purchase: Codable, Sendable, Equatable {
        public var group: String
        public var intervals: [Interval]
        public var credited: Int
        public init(group: String, intervals: [Interval], credited: Int) {
            self.group = group
            self.intervals = intervals
            self.credited = credited
        }
    }

    public struct Subscription: Codable, Sendable, Equatable {
        public var userId: String?
        public var purchases: [String: Purchase]
        public init(userId: String?, purchases: [String: Purchase]) {
            self.userId = userId
            self.purchases = purchases
        }
    }

    public var subscriptions: [String: Subscription]

    /// Folds entries in ledger order.
    public init(entries: [LedgerEntry]) {
        var subscriptions: [String: Subscription] = [:]
        for entry in entries {
            var subscription = subscriptions[entry.subscriptionKey] ?? Subscription(userId: nil, purchases: [:])
            switch entry.kind {
            case .link: subscription.userId = entry.userId
            case .unlink: subscription.userId = nil
            case .grant, .extend, .cut, .credit, .debit:
                guard let id = entry.purchaseId, let group = entry.group else { break }
                var purchase = subscription.purchases[id] ?? Purchase(group: group, intervals: [], credited: 0)
                purchase.group = group
                switch entry.kind {
                case .grant, .extend:
                    if let interval = entry.interval { purchase.intervals = Interval.union(purchase.intervals + [interval]) }
                case .cut:
                    if let interval = entry.interval { purchase.intervals = Interval.subtract(interval, from: purchase.intervals) }
                case .credit: purchase.credited = purchase.credited.saturatingAdding(entry.amount ?? 0)
                case .debit: purchase.credited = purchase.credited.saturatingSubtracting(entry.amount ?? 0)
                default: break
                }
                subscription.purchases[id] = purchase
            case .record, .renewal: break
            }
            subscriptions[entry.subscriptionKey] = subscription
        }
        self.subscriptions = subscriptions.mapValues(Self.normalized)
    }

    /// What the stored states say they have granted.
    public init(states: [SubscriptionState]) {
        var subscriptions: [String: Subscription] = [:]
        for state in states {
            var purchases: [String: Purchase] = [:]
            for (id, interval) in state.granted {
                guard let group = state.group(of: id) else { continue }
                purchases[id] = Purchase(group: group, intervals: [interval], credited: state.credited[id] ?? 0)
            }
            for (id, units) in state.credited where purchases[id] == nil {
                guard let group = state.group(of: id) else { continue }
                purchases[id] = Purchase(group: group, intervals: [], credited: units)
            }
            subscriptions[state.subscriptionKey] = Subscription(userId: state.userId, purchases: purchases)
        }
        self.subscriptions = subscriptions.mapValues(Self.normalized)
    }

    /// Purchases that hold nothing are left out, so "granted then fully refunded" equals "never granted".
    private static func normalized(_ subscription: Subscription) -> Subscription {
        Subscription(userId: subscription.userId,
                     purchases: subscription.purchases.filter { !$0.value.intervals.isEmpty || $0.value.credited != 0 })
    }

    /// Per owner (`user:<id>`, or `subscription:<key>` while unlinked) and group: the union of intervals.
    public var entitlements: [String: [String: [Interval]]] {
        var result: [String: [String: [Interval]]] = [:]
        for (key, subscription) in subscriptions {
            let owner = subscription.userId.map { "user:\($0)" } ?? "subscription:\(key)"
            for purchase in subscription.purchases.values where !purchase.intervals.isEmpty {
                result[owner, default: [:]][purchase.group, default: []] += purchase.intervals
            }
        }
        return result.mapValues { $0.mapValues(Interval.union) }
    }

    /// Per owner and group: consumable units held.
    public var balances: [String: [String: Int]] {
        var result: [String: [String: Int]] = [:]
        for (key, subscription) in subscriptions {
            let owner = subscription.userId.map { "user:\($0)" } ?? "subscription:\(key)"
            for purchase in subscription.purchases.values where purchase.credited != 0 {
                result[owner, default: [:]][purchase.group, default: 0] =
                    (result[owner]?[purchase.group] ?? 0).saturatingAdding(purchase.credited)
            }
        }
        return result
    }
}
