/// The slice of membership one batch works on: the subscriptions its commands address plus every
/// other subscription of the users involved, so that entitlements, and the before/after of each
/// ledger entry, are per user and group (R6: one user may hold several subscriptions, e.g. after a
/// storefront change gave them a new original_transaction_id).
public struct MembershipBook: Sendable, Equatable {
    public private(set) var subscriptions: [String: SubscriptionState]
    /// Subscription keys per user, kept in step with `userId` (only `changeOwner` moves one).
    private var keysByUser: [String: Set<String>] = [:]

    public init(_ states: [SubscriptionState] = []) {
        subscriptions = Dictionary(states.map { ($0.subscriptionKey, $0) }, uniquingKeysWith: { _, last in last })
        for state in subscriptions.values {
            if let user = state.userId { keysByUser[user, default: []].insert(state.subscriptionKey) }
        }
    }

    public static func == (a: MembershipBook, b: MembershipBook) -> Bool { a.subscriptions == b.subscriptions }

    public func states(ofUser user: String) -> [SubscriptionState] {
        (keysByUser[user] ?? []).sorted().compactMap { subscriptions[$0] }
    }

    public func userEntitlement(_ user: String, group: String) -> [Interval] {
        var intervals: [Interval] = []
        for key in keysByUser[user] ?? [] { subscriptions[key]?.collectEntitlement(group: group, into: &intervals) }
        return Interval.union(intervals)
    }

    /// The entitlement of `owner` (a user), or of the subscription alone while it has no user.
    public func entitlement(owner: String?, subscription key: String, group: String) -> [Interval] {
        if let owner { return userEntitlement(owner, group: group) }
        return subscriptions[key]?.entitlement(group: group) ?? []
    }

    public func balance(owner: String?, subscription key: String, group: String) -> Int {
        ownedKeys(by: owner, subscription: key).reduce(0) { $0.saturatingAdding(subscriptions[$1]?.balance(group: group) ?? 0) }
    }

    /// The keys of the owner's subscriptions (the subscription alone while it has no user): keys, not
    /// states, since every ledger entry asks and an array of states copied each one.
    func ownedKeys(by owner: String?, subscription key: String) -> Set<String> {
        guard let owner else { return [key] }
        return keysByUser[owner] ?? []
    }
}

/// Applies one command to one subscription (no other subscriptions of its user known).
public func apply(_ command: MembershipCommand, to state: inout SubscriptionState) -> [LedgerEntry] {
    var book = MembershipBook([state])
    let entries = book.apply(command)
    state = book.subscriptions[state.subscriptionKey] ?? state
    return entries
}

/// Two auto-renewable periods of one subscription overlapping by less than this are a renewal
/// boundary (Apple's renewal instant vs our purchase second), not a switch.
let supersedeTolerance: Int64 = 5_000

/// Apple attempts a renewal charge up to 24 hours before the period ends; the renewal's purchase date
/// is the charge, its service follows the period it renews.
/// https://developer.apple.com/help/app-store-connect/manage-subscriptions/offer-auto-renewable-subscriptions
let earlyRenewalWindow: Int64 = 86_400_000

/// Whether `successor`, starting before `grant` ends, is the renewal Apple charged early rather than a
/// switch that replaced `grant`: the same product (a switch always changes it), or, within the early
/// charge window, a change R5 applies at the renewal (a downgrade, another duration of the same level).
func isEarlyRenewal(_ successor: PurchaseGrant, of grant: PurchaseGrant, periodEndMs end: Int64) -> Bool {
    if successor.productId == grant.productId { return true }
    guard successor.startMs >= end.saturatingSubtracting(earlyRenewalWindow) else { return false }
    switch switchKind(from: grant, to: successor) {
    case .downgrade: return true
    case .crossgrade: return successor.durationDays != nil && successor.durationDays != grant.durationDays
    default: return false
    }
}

extension MembershipBook {
    /// Applies one command and returns the ledger entries it causes. Every purchase is reconciled to
    /// what Apple's facts say it should grant, never added blindly: replaying the same command (or an
    /// older one whose facts are already reflected) returns no entries, and a corrected command
    /// returns only the difference (R2, replay corrects).
    public mutating func apply(_ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        if subscriptions[key] == nil { subscriptions[key] = SubscriptionState(subscriptionKey: key) }
        if let environment = command.cause.environment { subscriptions[key]!.environment = environment }
        switch command.action {
        case .linkUser(let link):
            return applyLink(link, command)
        case .renewal(let renewal):
            return applyRenewal(renewal, command)
        case .record:
            return recordOnce(command.commandId, command, reason: command.reason)
        case .purchase(let grant):
            return applyPurchase(grant, command)
        case .gracePeriod(let grace):
            return applyGrace(grace, command)
        case .endGrace(let end):
            return applyGraceEnd(end, command)
        }
    }

    // MARK: purchases

    private mutating func applyPurchase(_ grant: PurchaseGrant, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        let position = command.cause.decodedPosition
        let held = subscriptions[key]!.factPositions[grant.purchaseId]
        let older = position.flatMap { position in held.map { position.isBefore($0) } } ?? false
        // A replay's compensation restates the purchase as the whole corrected history says: never older news.
        if older, !ReplayCompensation.isCompensation(command) {
            return []   // older news about this purchase, redelivered after newer news was applied
        }
        if let position, !older { subscriptions[key]!.factPositions[grant.purchaseId] = position }
        var entries: [LedgerEntry] = []
        // A corrected catalog moved the product to another group: take the grant out of the old one.
        if let previous = subscriptions[key]!.grants[grant.purchaseId], previous.group != grant.group,
           let granted = subscriptions[key]!.granted[grant.purchaseId] {
            let owner = subscriptions[key]!.userId
            let before = entitlement(owner: owner, subscription: key, group: previous.group)
            subscriptions[key]!.granted[grant.purchaseId] = nil
            entries.append(entry(.cut, command, owner: owner, purchase: grant.purchaseId, product: grant.productId,
                                 group: previous.group, interval: granted, before: before,
                                 reason: "\(command.reason); \(grant.productId) now belongs to group \(grant.group), not \(previous.group)"))
        }
        let wasKnown = subscriptions[key]!.grants[grant.purchaseId] != nil
        subscriptions[key]!.grants[grant.purchaseId] = grant
        switch grant.productKind {
        case .consumable:
            entries += reconcileCredit(grant, command)
        case .unknown:
            entries += recordOnce("unknown:\(grant.purchaseId)", command, group: nil, purchase: grant.purchaseId,
                                  product: grant.productId,
                                  reason: "\(command.reason); the product type is unknown (not in the catalog, Apple did not say): nothing granted")
        case .autoRenewable, .nonRenewing, .nonConsumable:
            entries += reconcile(group: grant.group, subscription: key, command, leading: grant.purchaseId)
        }
        guard let cut = grant.cut else { return entries }
        let recordKey = "cut:\(grant.purchaseId):\(cut.atMs)"
        let afterEnd = grant.endMs.map { cut.atMs >= $0 } ?? false
        if !afterEnd, entries.contains(where: { $0.purchaseId == grant.purchaseId }) {
            // The cut is in the ledger already (as a cut, or as a grant that stops at it): a redelivery
            // of this command must not add the "already applied" evidence below (FuzzPipeline found
            // it; issue 9).
            subscriptions[key]!.recordedCommands.insert(recordKey)
        } else {
            // Nothing deducted, but Apple's cancellation is evidence support must be able to show (R4,
            // R11): also when the purchase first arrives with it (S15), so the ledger reads the same in
            // any order.
            let alreadyApplied = !afterEnd && wasKnown
            let text = afterEnd
                ? "the cancellation at \(TimeText.iso(cut.atMs)) is after the period ended at \(TimeText.iso(grant.endMs!)): nothing deducted (R11)"
                : alreadyApplied ? "the cancellation at \(TimeText.iso(cut.atMs)) was already applied"
                : "it arrived already cancelled at \(TimeText.iso(cut.atMs)): nothing \(grant.productKind == .consumable ? "credited" : "granted")"
            // The instant marks evidence of its own on support's timeline; a confirmation of a cut
            // already drawn there carries none.
            entries += recordOnce(recordKey, command, group: grant.group, purchase: grant.purchaseId, product: grant.productId,
                                  at: alreadyApplied ? nil : cut.atMs, cutKind: cut.kind, reason: "\(command.reason); \(text)")
        }
        return entries
    }

    /// Consumables are credited exactly once per transaction; a refund debits the credit (a prorated
    /// one its refunded share, R19), even when the balance goes negative (R13).
    private mutating func reconcileCredit(_ grant: PurchaseGrant, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        let credit = grant.credit ?? 1
        let target = credit - (grant.cut?.refundedUnits(of: credit) ?? 0)
        let current = subscriptions[key]!.credited[grant.purchaseId] ?? 0
        subscriptions[key]!.credited[grant.purchaseId] = target
        guard target != current else { return [] }
        let owner = subscriptions[key]!.userId
        return [entry(target > current ? .credit : .debit, command, owner: owner, purchase: grant.purchaseId,
                      product: grant.productId, group: grant.group, amount: Int(clamping: target.distanceMagnitude(to: current)), before: [],
                      cutKind: target < current ? grant.cut?.kind : nil, reason: command.reason)]
    }

    /// Brings every purchase (and grace period) of one group in one subscription to its target
    /// interval, the commanded one first, and returns one entry per change.
    private mutating func reconcile(group: String, subscription key: String, _ command: MembershipCommand,
                                    leading: String?) -> [LedgerEntry] {
        var ids: [String] = []
        for (id, grant) in subscriptions[key]!.grants where grant.group == group && grant.productKind.grantsTime { ids.append(id) }
        for (id, grace) in subscriptions[key]!.graces where grace.group == group { ids.append(id) }
        ids.sort()
        if let leading, let index = ids.firstIndex(of: leading) {
            ids.remove(at: index)
            ids.insert(leading, at: 0)
        }
        // Gathered once: the loop below changes only `granted`, which no target reads.
        let facts = TargetFacts(subscriptions[key]!, group: group)
        var entries: [LedgerEntry] = []
        for id in ids {
            let target = Target(of: id, in: facts)
            for delta in GrantDelta.between(granted: subscriptions[key]!.granted[id], target: target.interval) {
                let owner = subscriptions[key]!.userId
                let before = entitlement(owner: owner, subscription: key, group: group)
                let granted = subscriptions[key]!.granted[id]
                let product = subscriptions[key]!.grants[id]?.productId ?? subscriptions[key]!.graces[id]?.productId
                switch delta {
                case .add(let interval):
                    subscriptions[key]!.granted[id] = granted.map { Interval.union([$0, interval]).first ?? interval } ?? interval
                    entries.append(entry(granted == nil ? .grant : .extend, command, owner: owner, purchase: id, product: product,
                                         group: group, interval: interval, before: before,
                                         reason: reason(for: id, leading: leading, target: target, command)))
                case .remove(let interval):
                    subscriptions[key]!.granted[id] = granted.flatMap { g in
                        interval.startMs <= g.startMs ? nil : Interval(startMs: g.startMs, endMs: interval.startMs)
                    }
                    entries.append(entry(.cut, command, owner: owner, purchase: id, product: product, group: group,
                                         interval: interval, before: before, cutKind: target.cutKind,
                                         reason: reason(for: id, leading: leading, target: target, command)))
                }
            }
        }
        return entries
    }

    private func reason(for id: String, leading: String?, target: Target, _ command: MembershipCommand) -> String {
        let state = subscriptions[command.subscriptionKey]!
        guard case .superseded(let successor, let kind) = target.endedBy else {
            if id == leading { return command.reason }
            return "\(command.reason); \(describe(id, in: state)) reconciled to \(target.interval?.description ?? "nothing")"
        }
        let switchText = "\(describe(id, in: state)) superseded by \(successor.productId) purchase \(successor.transactionId) at \(TimeText.iso(successor.startMs)) (\(kind.rawValue), R5)"
        return id == leading ? "\(command.reason); \(switchText)" : switchText
    }

    private func describe(_ id: String, in state: SubscriptionState) -> String {
        if let grant = state.grants[id] { return "\(grant.productId) purchase \(grant.transactionId)" }
        return "grace period \(id)"
    }

    // MARK: grace periods

    private mutating func applyGrace(_ grace: GracePeriodGrant, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        let state = subscriptions[key]!
        let group = state.graceGroup(grace.group, productId: grace.productId)
        let from = grace.fromMs ?? state.renewables.filter { $0.group == group }.compactMap(\.endMs).max()
        guard let group, let from, grace.untilMs > from else {
            return recordOnce(command.commandId, command, group: group, purchase: nil, product: grace.productId,
                              reason: "\(command.reason); no period to extend, nothing granted")
        }
        let id = "grace|\(from)"
        subscriptions[key]!.graces[id] = SubscriptionState.GraceRecord(group: group, productId: grace.productId,
                                                                      startMs: from, endMs: grace.untilMs)
        return reconcile(group: group, subscription: key, command, leading: id)
    }

    /// Apple ended the grace period: every grace window of the group that contains the instant ends
    /// there (Target). Kept as a set of instants, so the order of grace grants and ends does not matter.
    private mutating func applyGraceEnd(_ end: GraceEnd, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        guard let group = subscriptions[key]!.graceGroup(end.group, productId: end.productId) else { return [] }
        let instants = Set((subscriptions[key]!.graceEnds[group] ?? []) + [end.atMs])
        subscriptions[key]!.graceEnds[group] = instants.sorted()
        return reconcile(group: group, subscription: key, command, leading: nil)
    }

    // MARK: renewal state

    private mutating func applyRenewal(_ renewal: RenewalState, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        if let current = subscriptions[key]!.renewal, current.isNewer(than: renewal) {
            return []   // older news (S15)
        }
        let previous = subscriptions[key]!.renewal
        subscriptions[key]!.renewal = renewal
        // The first statement is not a change; later ones are evidence when their facts differ.
        guard let previous, !renewal.sameFacts(as: previous) else { return [] }
        let state = subscriptions[key]!
        let group = [renewal.productId, renewal.autoRenewProductId].compactMap { $0 }.lazy
            .compactMap { product in state.grants.values.first { $0.productId == product }?.group }.first
        let owner = state.userId
        let current = group.map { entitlement(owner: owner, subscription: key, group: $0) } ?? []
        return [entry(.renewal, command, owner: owner, purchase: nil, product: renewal.productId, group: group,
                      before: current, reason: "\(command.reason) (\(describeChange(from: previous, to: renewal)))")]
    }

    // MARK: users (R6)

    /// Keep-first: another account's claim on a subscription `current` owns is recorded (once per
    /// claimant) and changes nothing.
    private mutating func refuseClaim(_ link: UserLink, of current: String, _ command: MembershipCommand) -> [LedgerEntry] {
        recordOnce("claim:\(link.userId)", command, group: nil, purchase: nil, product: nil,
                   reason: "\(command.reason); user \(link.userId) claimed this subscription of user \(current): refused (transfer policy keep-first)")
    }

    private mutating func applyLink(_ link: UserLink, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        let current = subscriptions[key]!.userId
        if let at = link.claimedAtMs { return applyClaim(link, at: at, command) }
        guard current != link.userId else { return [] }
        var entries: [LedgerEntry] = []
        if let current {
            guard link.transfer == .move else {
                return refuseClaim(link, of: current, command)
            }
            entries += changeOwner(of: key, from: current, to: nil, command,
                                   reason: "\(command.reason); moved from user \(current) to user \(link.userId) (transfer policy move)")
        }
        entries += changeOwner(of: key, from: nil, to: link.userId, command,
                               reason: current == nil
                                   ? "\(command.reason); subscription linked to user \(link.userId) via \(link.via)"
                                   : "\(command.reason); moved to user \(link.userId) from user \(current!) (transfer policy move)")
        return entries
    }

    /// R17: only a claim moves a subscription, and the latest claim owns it. A receipt upload claims
    /// when it was uploaded (a later upload by the same account renews its claim); a token claims as
    /// of the first purchase carrying it, so a renewal repeating the token is no new claim. A token seen
    /// on renewals only claims provisionally, as of the original purchase, until a purchase carrying it
    /// says when it was set. Claims are kept with their times and the owner is the latest, so any
    /// arrival order gives the same owner. Under the keep-first policy the earliest claim owns it
    /// (each account's first claim counts), so there too the order of arrival changes nothing; a
    /// later account's claim is recorded as refused.
    private mutating func applyClaim(_ link: UserLink, at: Int64, _ command: MembershipCommand) -> [LedgerEntry] {
        let key = command.subscriptionKey
        let keepFirst = link.transfer == .keepFirst
        let claimKey = "\(link.via)|\(link.userId)"
        let exactKey = "\(UserLink.appAccountToken)|\(link.userId)"
        if link.via == UserLink.renewedAppAccountToken, subscriptions[key]!.claims[exactKey] != nil { return [] }
        if link.via == UserLink.appAccountToken { subscriptions[key]!.claims["\(UserLink.renewedAppAccountToken)|\(link.userId)"] = nil }
        let current = subscriptions[key]!.userId
        // An owner linked before claims were kept (or through an untimed link) holds it from the
        // start under keep-first: the first account keeps it.
        if keepFirst, let current, !subscriptions[key]!.claimants.contains(current) {
            subscriptions[key]!.claims["\(UserLink.ownerBeforeClaims)|\(current)"] = Int64.min
        }
        let previous = subscriptions[key]!.claims[claimKey]
        subscriptions[key]!.claims[claimKey] = link.isUpload && !keepFirst ? max(previous ?? at, at) : min(previous ?? at, at)
        guard let owner = keepFirst ? earliestClaimant(subscriptions[key]!.claims) : latestClaimant(subscriptions[key]!.claims) else { return [] }
        if owner.user == current {
            guard keepFirst, let current, link.userId != current else { return [] }
            return refuseClaim(link, of: current, command)
        }
        let claim = keepFirst ? "\(owner.via) claim of \(TimeText.iso(owner.at)) is the earliest (transfer policy keep-first)"
            : "\(owner.via) claim of \(TimeText.iso(owner.at)) is the latest (R17)"
        var entries: [LedgerEntry] = []
        if let current {
            entries += changeOwner(of: key, from: current, to: nil, command,
                                   reason: "\(command.reason); moved from user \(current) to user \(owner.user): its \(claim)")
        }
        entries += changeOwner(of: key, from: nil, to: owner.user, command,
                               reason: current == nil
                                   ? "\(command.reason); subscription linked to user \(owner.user) via \(owner.via)"
                                   : "\(command.reason); moved to user \(owner.user) from user \(current!): its \(claim)")
        return entries
    }

    /// Sets the subscription's owner; one entry per group, written from the point of view of the user
    /// gaining (link) or losing (unlink) the subscription's entitlements.
    private mutating func changeOwner(of key: String, from old: String?, to new: String?, _ command: MembershipCommand,
                                      reason: String) -> [LedgerEntry] {
        let viewer = new ?? old
        let groups = subscriptions[key]!.groups
        let before = Dictionary(uniqueKeysWithValues: groups.map { ($0, entitlement(owner: viewer, subscription: key, group: $0)) })
        if let old { keysByUser[old]?.remove(key) }
        if let new { keysByUser[new, default: []].insert(key) }
        subscriptions[key]!.userId = new
        let kind: LedgerEntry.Kind = new == nil ? .unlink : .link
        guard !groups.isEmpty else {
            return [entry(kind, command, owner: viewer, purchase: nil, product: nil, group: nil, before: [], reason: reason)]
        }
        return groups.map { group in
            entry(kind, command, owner: viewer, purchase: nil, product: nil, group: group, before: before[group] ?? [],
                  reason: reason)
        }
    }

    // MARK: entries

    /// - Parameter at: the instant the recorded fact is about (a cancellation's), kept as the entry's
    ///   empty interval `[at, at)` so support can place the evidence on the timeline (R4, R11).
    private mutating func recordOnce(_ recordKey: String, _ command: MembershipCommand, group: String? = nil,
                                     purchase: String? = nil, product: String? = nil, at: Int64? = nil, cutKind: Cut.Kind? = nil,
                                     reason: String) -> [LedgerEntry] {
        let key = command.subscriptionKey
        guard subscriptions[key]!.recordedCommands.insert(recordKey).inserted else { return [] }
        let owner = subscriptions[key]!.userId
        let current = group.map { entitlement(owner: owner, subscription: key, group: $0) } ?? []
        return [entry(.record, command, owner: owner, purchase: purchase, product: product, group: group,
                      interval: at.map { Interval(startMs: $0, endMs: $0) }, before: current, cutKind: cutKind, reason: reason)]
    }

    /// Builds an entry after the state change it describes: `after` (and the balance) is read now.
    private func entry(_ kind: LedgerEntry.Kind, _ command: MembershipCommand, owner: String?, purchase: String?,
                       product: String?, group: String?, interval: Interval? = nil, amount: Int? = nil,
                       before: [Interval], cutKind: Cut.Kind? = nil, reason: String) -> LedgerEntry {
        let key = command.subscriptionKey
        let after = group.map { entitlement(owner: owner, subscription: key, group: $0) } ?? before
        let holdsUnits = group.map { group in ownedKeys(by: owner, subscription: key).contains { subscriptions[$0]?.holdsUnits(group: group) ?? false } } ?? false
        let balance = holdsUnits ? group.map { self.balance(owner: owner, subscription: key, group: $0) } : nil
        return LedgerEntry(kind: kind, subscriptionKey: key, userId: owner, purchaseId: purchase, productId: product,
                           group: group, interval: interval, amount: amount, before: before, after: after,
                           balanceAfter: balance, cutKind: cutKind, reason: reason, commandId: command.commandId,
                           cause: command.cause, environment: subscriptions[key]?.environment)
    }
}

extension SubscriptionState {
    /// Every user with a claim on this subscription (R17): any of them may own it after the next claim.
    public var claimants: Set<String> { Set(claims.keys.compactMap { claimParts($0)?.user }) }

    /// The purchases that renew: auto-renewable ones, less those a replay took back (none of their
    /// own, they replace no period).
    var renewables: [PurchaseGrant] { grants.values.filter { $0.productKind == .autoRenewable && !$0.isTakenBack } }

    /// The group a grace-period fact is about: as Apple named it, else its product's, else the
    /// latest renewing purchase's.
    func graceGroup(_ group: String?, productId: String?) -> String? {
        let renewables = self.renewables
        return group ?? productId.flatMap { product in renewables.first { $0.productId == product }?.group }
            ?? renewables.max { ($0.startMs, $0.purchaseId) < ($1.startMs, $1.purchaseId) }?.group
    }
}

/// A claim's key, `via|user`, in its parts.
private func claimParts(_ key: String) -> (via: String, user: String)? {
    guard let bar = key.firstIndex(of: "|") else { return nil }
    return (String(key[..<bar]), String(key[key.index(after: bar)...]))
}

/// The keep-first policy's owner: the earliest claim (an upload before a token at the same instant).
/// A token seen on renewals only is dated as of the original purchase for want of better, which would
/// make it the earliest here: it counts only when no other claim is known.
func earliestClaimant(_ claims: [String: Int64]) -> (user: String, via: String, at: Int64)? {
    func rank(_ claim: (user: String, via: String, at: Int64)) -> (Int, Int64, Int, String) {
        (claim.via == UserLink.renewedAppAccountToken ? 1 : 0, claim.at, claim.via == UserLink.receiptUpload ? 0 : 1, claim.user)
    }
    return claims.compactMap { key, at -> (user: String, via: String, at: Int64)? in claimParts(key).map { ($0.user, $0.via, at) } }
        .min { rank($0) < rank($1) }
}

/// The owner the claims give (R17): the latest claim; at the same instant a receipt upload beats a
/// token (a restore follows the purchase it restores), then the greater user id, so it is a total order.
func latestClaimant(_ claims: [String: Int64]) -> (user: String, via: String, at: Int64)? {
    let parsed = claims.compactMap { key, at -> (user: String, via: String, at: Int64)? in
        claimParts(key).map { ($0.user, $0.via, at) }
    }
    return parsed.max { a, b in
        (a.at, a.via == UserLink.receiptUpload ? 1 : 0, a.user) < (b.at, b.via == UserLink.receiptUpload ? 1 : 0, b.user)
    }
}

extension ProductKind {
    /// Products whose purchases grant time (the others credit units or are unknown).
    var grantsTime: Bool { self == .autoRenewable || self == .nonRenewing || self == .nonConsumable }
}

/// What the targets of one group in one subscription read: its purchases, grace periods and their
/// ends, and the group's auto-renewable periods in start order (then purchase id), gathered once per
/// reconcile rather than per purchase (each copied the whole state and filtered every purchase).
struct TargetFacts {
    let grants: [String: PurchaseGrant]
    let graces: [String: SubscriptionState.GraceRecord]
    let graceEnds: [String: [Int64]]
    let renewables: [PurchaseGrant]

    init(_ state: SubscriptionState, group: String) {
        grants = state.grants
        graces = state.graces
        graceEnds = state.graceEnds
        renewables = state.renewables.filter { $0.group == group }
            .sorted { ($0.startMs, $0.purchaseId) < ($1.startMs, $1.purchaseId) }
    }
}

/// What one purchase (or grace period) should be granted now, and what ends it.
struct Target {
    enum EndedBy {
        case period
        case apple(Cut)
        case superseded(PurchaseGrant, Cut.Kind)
    }
    var interval: Interval?
    var endedBy: EndedBy

    var cutKind: Cut.Kind? {
        switch endedBy {
        case .period: return nil
        case .apple(let cut): return cut.kind
        case .superseded(_, let kind): return kind
        }
    }

    /// `[start, end)`, cut at Apple's cancellation, and for auto-renewables cut where a later period
    /// of the same group in the same subscription starts: within one subscription Apple's periods
    /// follow each other, so an overlap means the later purchase replaced this one (an upgrade or
    /// crossgrade takes effect immediately, R5; V2 says so only on the new transaction) unless it is
    /// the renewal charged early, which leaves the period it renews whole (a refund of that renewal
    /// before the period ends cuts only the renewal, R3).
    init(of id: String, in facts: TargetFacts) {
        if let grace = facts.graces[id] {
            self = Target(grace: grace, in: facts)
            return
        }
        guard let grant = facts.grants[id], grant.productKind.grantsTime else {
            self.init(interval: nil, endedBy: .period)
            return
        }
        var interval = Interval(startMs: grant.startMs, endMs: grant.endMs)
        var endedBy = EndedBy.period
        if let cut = grant.cut, cut.atMs < interval.endOrMax {
            interval.endMs = cut.atMs
            endedBy = .apple(cut)
        }
        if grant.productKind == .autoRenewable {
            let end = interval.endOrMax
            // The earliest later period of the group that is not this one's early renewal: the
            // group's renewables are in start order, so the first that qualifies.
            let successor = facts.renewables.first {
                $0.purchaseId != id && $0.startMs > grant.startMs && $0.startMs < end.saturatingSubtracting(supersedeTolerance)
                    && !isEarlyRenewal($0, of: grant, periodEndMs: end)
            }
            if let successor {
                interval.endMs = successor.startMs
                endedBy = .superseded(successor, switchKind(from: grant, to: successor))
            }
        }
        self.init(interval: interval.isEmpty ? nil : interval, endedBy: endedBy)
    }

    /// Apple serves through a grace period until it ends it: at GRACE_PERIOD_EXPIRED, or at a
    /// refund or revocation during the grace period of the period it follows (or a later purchase of
    /// the group). A late refund of a period long over deducts nothing (R11), grace included.
    init(grace: SubscriptionState.GraceRecord, in facts: TargetFacts) {
        var interval = Interval(startMs: grace.startMs, endMs: grace.endMs)
        var endedBy = EndedBy.period
        let within = { (at: Int64) in at >= grace.startMs && at < grace.endMs }
        if let ended = facts.graceEnds[grace.group]?.first(where: within) { interval.endMs = ended }
        // The period the grace follows ends where it starts (whole seconds both), a later one after.
        let cuts = facts.grants.values.filter { $0.group == grace.group && ($0.endMs ?? .max) >= grace.startMs }.compactMap(\.cut)
            .filter { ($0.kind == .refund || $0.kind == .revoke) && within($0.atMs) }
        if let cut = cuts.min(by: { ($0.atMs, $0.kind.rawValue) < ($1.atMs, $1.kind.rawValue) }), cut.atMs < interval.endOrMax {
            interval.endMs = cut.atMs
            endedBy = .apple(cut)
        }
        self.init(interval: interval.isEmpty ? nil : interval, endedBy: endedBy)
    }

    init(interval: Interval?, endedBy: EndedBy) {
        self.interval = interval
        self.endedBy = endedBy
    }
}

/// R5 from the catalog facts carried on the grants: a lower level number is a higher service.
func switchKind(from old: PurchaseGrant, to new: PurchaseGrant) -> Cut.Kind {
    guard old.productId != new.productId, let from = old.level, let to = new.level else { return .switch }
    if to < from { return .upgrade }
    if to > from { return .downgrade }
    return .crossgrade
}

func describeChange(from old: RenewalState?, to new: RenewalState) -> String {
    var parts: [String] = []
    if old?.autoRenewStatus != new.autoRenewStatus, let status = new.autoRenewStatus {
        parts.append("auto-renew \(status ? "on" : "off")")
    }
    if old?.autoRenewProductId != new.autoRenewProductId || old?.productId != new.productId {
        if let next = new.autoRenewProductId, let current = new.productId, next != current {
            parts.append("renews as \(next) instead of \(current)\(new.pendingChange.map { " (\($0))" } ?? "")")
        } else if let next = new.autoRenewProductId ?? new.productId {
            parts.append("renews as \(next)")
        }
    }
    if old?.isInBillingRetry != new.isInBillingRetry, let retry = new.isInBillingRetry {
        parts.append(retry ? "in billing retry" : "billing retry over")
    }
    if old?.gracePeriodExpiresMs != new.gracePeriodExpiresMs, let grace = new.gracePeriodExpiresMs {
        parts.append("grace period until \(TimeText.iso(grace))")
    }
    if old?.expirationIntent != new.expirationIntent, let intent = new.expirationIntent {
        parts.append("expiration intent \(intent)")
    }
    if old?.priceIncreaseStatus != new.priceIncreaseStatus, let status = new.priceIncreaseStatus {
        parts.append("price increase status \(status)")
    }
    return parts.isEmpty ? "renewal facts updated" : parts.joined(separator: ", ")
}
