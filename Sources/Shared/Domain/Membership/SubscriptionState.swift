/// Membership's memory of one subscription: what each purchase should grant (Apple's latest facts,
/// `grants`) and what it has been granted so far (the sum of its ledger entries, `granted`).
/// Stored as JSON in `subscriptions.state`; the offer signer reads `userId`, `grants` (their
/// `group`, `productId`, `finance` flags) and `groups` from it, so those stay stable.
public struct SubscriptionState: Codable, Sendable, Equatable {
    public var subscriptionKey: String
    public var userId: String?
    public var grants: [String: PurchaseGrant] = [:]
    /// Granted interval per purchase id (or grace id), the fold of this subscription's ledger.
    public var granted: [String: Interval] = [:]
    /// Consumable units credited per purchase id.
    public var credited: [String: Int] = [:]
    /// Keys of evidence already recorded, so a replay records nothing twice.
    public var recordedCommands: Set<String> = []
    public var renewal: RenewalState?
    /// Billing grace periods granted, by id `grace|<from ms>`.
    public var graces: [String: GraceRecord] = [:]
    /// R17: every account's claim on this subscription, by `<via>|<user id>`, with its time; the
    /// latest claim owns it (transfer policy move).
    public var claims: [String: Int64] = [:]
    /// Apple's environment of the subscription (R18), from the inputs about it.
    public var environment: String?
    /// Per group, the instants Apple said a grace period ended (GRACE_PERIOD_EXPIRED).
    public var graceEnds: [String: [Int64]] = [:]
    /// Per purchase id, the decoded-topic position of the input whose facts `grants` holds. Dedupe
    /// merges a purchase's facts in that topic's order, so a command from an earlier position is
    /// older news: a redelivered prefix (a stage killed between publish and offset commit) must not
    /// put back a grant without the refund that followed it (issue 9).
    public var factPositions: [String: RecordPosition] = [:]

    public init(subscriptionKey: String, userId: String? = nil) {
        self.subscriptionKey = subscriptionKey
        self.userId = userId
    }

    public struct GraceRecord: Codable, Sendable, Equatable {
        public var group: String
        public var productId: String?
        public var startMs: Int64
        public var endMs: Int64
        public init(group: String, productId: String?, startMs: Int64, endMs: Int64) {
            self.group = group
            self.productId = productId
            self.startMs = startMs
            self.endMs = endMs
        }
    }

    /// The group a granted id (purchase or grace period) belongs to.
    public func group(of id: String) -> String? { grants[id]?.group ?? graces[id]?.group }

    /// The entitlement of one group: the union of its purchases' granted intervals.
    public func entitlement(group: String) -> [Interval] {
        var intervals: [Interval] = []
        collectEntitlement(group: group, into: &intervals)
        return Interval.union(intervals)
    }

    /// The group's granted intervals, appended as they are (not yet a union).
    func collectEntitlement(group: String, into intervals: inout [Interval]) {
        for (id, interval) in granted where self.group(of: id) == group { intervals.append(interval) }
    }

    /// Consumable units held in one group (may be negative after a refund, R13).
    public func balance(group: String) -> Int {
        credited.reduce(0) { sum, item in grants[item.key]?.group == group ? sum.saturatingAdding(item.value) : sum }
    }

    /// Whether the group holds consumable units in this subscription.
    public func holdsUnits(group: String) -> Bool {
        grants.values.contains { $0.group == group && $0.productKind == .consumable }
    }

    /// Whether a purchase or grace period of this subscription is in `group`.
    public func holds(group: String) -> Bool {
        grants.values.contains { $0.group == group } || graces.values.contains { $0.group == group }
    }

    public var groups: [String] { Array(Set(grants.values.map(\.group)).union(graces.values.map(\.group))).sorted() }

    private enum CodingKeys: String, CodingKey {
        case subscriptionKey, userId, grants, granted, credited, recordedCommands, renewal, graces, claims, environment, graceEnds
        case factPositions
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        subscriptionKey = try container.decode(String.self, forKey: .subscriptionKey)
        userId = try container.decodeIfPresent(String.self, forKey: .userId)
        grants = try container.decodeIfPresent([String: PurchaseGrant].self, forKey: .grants) ?? [:]
        granted = try container.decodeIfPresent([String: Interval].self, forKey: .granted) ?? [:]
        credited = try container.decodeIfPresent([String: Int].self, forKey: .credited) ?? [:]
        recordedCommands = Set(try container.decodeIfPresent([String].self, forKey: .recordedCommands) ?? [])
        renewal = try container.decodeIfPresent(RenewalState.self, forKey: .renewal)
        graces = try container.decodeIfPresent([String: GraceRecord].self, forKey: .graces) ?? [:]
        claims = try container.decodeIfPresent([String: Int64].self, forKey: .claims) ?? [:]
        environment = try container.decodeIfPresent(String.self, forKey: .environment)
        graceEnds = try container.decodeIfPresent([String: [Int64]].self, forKey: .graceEnds) ?? [:]
        factPositions = try container.decodeIfPresent([String: RecordPosition].self, forKey: .factPositions) ?? [:]
    }

    /// Sets are encoded sorted: the stored state must be byte-identical however it was reached.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(subscriptionKey, forKey: .subscriptionKey)
        try container.encodeIfPresent(userId, forKey: .userId)
        try container.encode(grants, forKey: .grants)
        try container.encode(granted, forKey: .granted)
        try container.encode(credited, forKey: .credited)
        try container.encode(recordedCommands.sorted(), forKey: .recordedCommands)
        try container.encodeIfPresent(renewal, forKey: .renewal)
        try container.encode(graces, forKey: .graces)
        if !claims.isEmpty { try container.encode(claims, forKey: .claims) }
        try container.encodeIfPresent(environment, forKey: .environment)
        if !graceEnds.isEmpty { try container.encode(graceEnds, forKey: .graceEnds) }
        if !factPositions.isEmpty { try container.encode(factPositions, forKey: .factPositions) }
    }
}
