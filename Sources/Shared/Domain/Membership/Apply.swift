/// Membership's memory of one subscription: what each purchase should grant (Apple's latest facts)
/// and what it has been granted so far (the sum of its ledger entries).
public struct SubscriptionState: Codable, Sendable, Equatable {
    public var subscriptionKey: String
    public var userId: String?
    public var grants: [String: PurchaseGrant] = [:]
    public var granted: [String: Interval] = [:]
    public var credited: [String: Int] = [:]
    public var recordedCommands: Set<String> = []
    public var renewal: RenewalState?

    public init(subscriptionKey: String, userId: String? = nil) {
        self.subscriptionKey = subscriptionKey
        self.userId = userId
    }

    /// The entitlement of one group: the union of its purchases' granted intervals.
    public func entitlement(group: String) -> [Interval] {
        Interval.union(granted.compactMap { id, interval in grants[id]?.group == group ? interval : nil })
    }

    public var groups: [String] { Array(Set(grants.values.map(\.group))).sorted() }
}

/// Applies one command and returns the ledger entries it causes. Replaying the same command (or an
/// older one whose facts are already reflected) returns no entries: grants are reconciled to the
/// target, never added blindly (R2, replay corrects).
public func apply(_ command: MembershipCommand, to state: inout SubscriptionState) -> [LedgerEntry] {
    func entry(_ kind: LedgerEntry.Kind, purchase: String?, group: String?, interval: Interval?, amount: Int? = nil,
               before: [Interval], reason: String) -> LedgerEntry {
        LedgerEntry(kind: kind, subscriptionKey: state.subscriptionKey, purchaseId: purchase, group: group,
                    interval: interval, amount: amount, before: before,
                    after: group.map { state.entitlement(group: $0) } ?? before, reason: reason,
                    commandId: command.commandId, cause: command.cause)
    }
    func recordOnce(_ reason: String, purchase: String? = nil, group: String? = nil) -> [LedgerEntry] {
        guard state.recordedCommands.insert(command.commandId).inserted else { return [] }
        let current = group.map { state.entitlement(group: $0) } ?? []
        return [entry(.record, purchase: purchase, group: group, interval: nil, before: current, reason: reason)]
    }

    switch command.action {
    case .linkUser(let link):
        guard state.userId != link.userId else { return [] }
        let previous = state.userId
        state.userId = link.userId
        let reason = previous.map { "subscription moved from user \($0) to \(link.userId) (\(link.via))" }
            ?? "subscription linked to user \(link.userId) (\(link.via))"
        return [entry(.link, purchase: nil, group: nil, interval: nil, before: [], reason: reason)]

    case .renewal(let renewal):
        if let current = state.renewal, current.asOfMs > renewal.asOfMs { return [] }   // older news (S15)
        state.renewal = renewal
        return []

    case .record(let text):
        return recordOnce("\(command.reason): \(text)")

    case .purchase(let grant):
        state.grants[grant.purchaseId] = grant
        if grant.productKind == .consumable {
            // Credited exactly once per transaction; a refund debits it (the balance may go negative, R13).
            let target = grant.cut == nil ? (grant.credit ?? 1) : 0
            let current = state.credited[grant.purchaseId] ?? 0
            guard target != current else { return [] }
            state.credited[grant.purchaseId] = target
            return [entry(target > current ? .credit : .debit, purchase: grant.purchaseId, group: grant.group,
                          interval: nil, amount: abs(target - current), before: [], reason: command.reason)]
        }
        let target = entitledInterval(of: grant)
        var entries: [LedgerEntry] = []
        for delta in GrantDelta.between(granted: state.granted[grant.purchaseId], target: target) {
            let groupBefore = state.entitlement(group: grant.group)
            switch delta {
            case .add(let interval):
                let kind: LedgerEntry.Kind = state.granted[grant.purchaseId] == nil ? .grant : .extend
                state.granted[grant.purchaseId] = merged(state.granted[grant.purchaseId], adding: interval)
                entries.append(entry(kind, purchase: grant.purchaseId, group: grant.group, interval: interval,
                                     before: groupBefore, reason: command.reason))
            case .remove(let interval):
                state.granted[grant.purchaseId] = remaining(state.granted[grant.purchaseId], removing: interval)
                entries.append(entry(.cut, purchase: grant.purchaseId, group: grant.group, interval: interval,
                                     before: groupBefore, reason: command.reason))
            }
        }
        if entries.isEmpty, let cut = grant.cut, let end = grant.endMs, cut.atMs >= end {
            return recordOnce("\(command.reason); the period had already ended, nothing deducted (R11)",
                              purchase: grant.purchaseId, group: grant.group)
        }
        return entries
    }
}

private func merged(_ granted: Interval?, adding interval: Interval) -> Interval {
    guard let granted else { return interval }
    return Interval.union([granted, interval]).first ?? interval
}

private func remaining(_ granted: Interval?, removing interval: Interval) -> Interval? {
    guard let granted else { return nil }
    if interval.startMs <= granted.startMs { return nil }
    return Interval(startMs: granted.startMs, endMs: interval.startMs)
}
