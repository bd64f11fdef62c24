/// What a ledger entry means to the company's other services (issue 17): the vocabulary of
/// `storeledger.membership.events` and of webhooks, close to what subscription platforms publish
/// (RevenueCat's event types), so downstream code reads familiar names.
public enum MembershipEventType: String, Codable, Sendable, CaseIterable {
    case initialPurchase = "INITIAL_PURCHASE"
    case renewal = "RENEWAL"
    case productChange = "PRODUCT_CHANGE"
    case cancellation = "CANCELLATION"           // auto-renew turned off
    case uncancellation = "UNCANCELLATION"       // auto-renew turned back on
    case billingIssue = "BILLING_ISSUE"
    case gracePeriod = "GRACE_PERIOD"
    case expiration = "EXPIRATION"
    case refund = "REFUND"
    case refundReversed = "REFUND_REVERSED"
    case revoke = "REVOKE"
    case transfer = "TRANSFER"
    case subscriptionExtended = "SUBSCRIPTION_EXTENDED"
    case nonRenewingPurchase = "NON_RENEWING_PURCHASE"
    case consumableCredit = "CONSUMABLE_CREDIT"
    case consumableDebit = "CONSUMABLE_DEBIT"
    /// Renewal facts that fit none of the above (billing retry over, price-increase consent).
    case renewalInfoChanged = "RENEWAL_INFO_CHANGED"
}

/// When a product change takes effect (R5).
public enum ProductChangeMode: String, Codable, Sendable {
    case immediate
    case atRenewal = "at_renewal"
}

/// The meaning of one ledger entry, derived from the entry and its subscription's state before
/// and after the command that wrote it. Pure: the mapping is tested without PostgreSQL.
public struct EntryMeaning: Sendable, Equatable {
    public var type: MembershipEventType
    public var productChange: ProductChangeMode?
    public var fromProductId: String?
    public var toProductId: String?
    public var fromUserId: String?
    public var toUserId: String?
    /// The entry corrects what a purchase had been granted (a replay after a fix, or Apple
    /// correcting its own facts) rather than reporting something new that happened.
    public var correction = false

    public init(type: MembershipEventType, productChange: ProductChangeMode? = nil, fromProductId: String? = nil,
                toProductId: String? = nil, fromUserId: String? = nil, toUserId: String? = nil, correction: Bool = false) {
        self.type = type
        self.productChange = productChange
        self.fromProductId = fromProductId
        self.toProductId = toProductId
        self.fromUserId = fromUserId
        self.toUserId = toUserId
        self.correction = correction
    }
}

extension LedgerEntry {
    /// Whether the entry changes what a user has (and so becomes exactly one event): everything but
    /// evidence records, and owner changes of a subscription that grants nothing yet.
    public var changesMembership: Bool {
        switch kind {
        case .record: return false
        case .link, .unlink: return group != nil
        case .grant, .cut, .extend, .credit, .debit, .renewal: return true
        }
    }
}

/// Maps one ledger entry to its event meaning; nil when the entry changes nothing for a user.
/// - Parameters:
///   - before: the subscription's state before the command that wrote the entry (nil: first seen).
///   - after: its state after that command.
public func meaning(of entry: LedgerEntry, before: SubscriptionState?, after: SubscriptionState) -> EntryMeaning? {
    guard entry.changesMembership else { return nil }
    switch entry.kind {
    case .record: return nil
    case .credit: return EntryMeaning(type: .consumableCredit)
    case .debit: return EntryMeaning(type: .consumableDebit)
    case .link, .unlink:
        return EntryMeaning(type: .transfer, fromUserId: before?.userId,
                            toUserId: entry.kind == .link ? entry.userId : after.userId)
    case .renewal: return renewalMeaning(before: before?.renewal, after: after.renewal)
    case .grant: return grantMeaning(entry, before: before, after: after)
    case .extend: return extendMeaning(entry, before: before)
    case .cut: return cutMeaning(entry, before: before, after: after)
    }
}

private func isGrace(_ purchaseId: String?) -> Bool { purchaseId?.hasPrefix("grace|") ?? false }

private func grantMeaning(_ entry: LedgerEntry, before: SubscriptionState?, after: SubscriptionState) -> EntryMeaning {
    if isGrace(entry.purchaseId) { return EntryMeaning(type: .gracePeriod) }
    guard let id = entry.purchaseId, let grant = after.grants[id] else { return EntryMeaning(type: .initialPurchase) }
    // A purchase granted before, now granted anew (its start moved): a correction of the same purchase.
    let correction = before?.granted[id] != nil
    switch grant.productKind {
    case .nonRenewing, .nonConsumable, .consumable, .unknown:
        return EntryMeaning(type: .nonRenewingPurchase, correction: correction)
    case .autoRenewable: break
    }
    // The latest earlier period of the group in this subscription decides: none = first purchase,
    // another product = a change (immediate when it overlaps, i.e. supersedes, the earlier period).
    let earlier = (before?.grants.values ?? after.grants.values).filter {
        $0.productKind == .autoRenewable && $0.group == grant.group && $0.purchaseId != id && $0.startMs < grant.startMs
    }.max { ($0.startMs, $0.purchaseId) < ($1.startMs, $1.purchaseId) }
    guard let earlier else { return EntryMeaning(type: .initialPurchase, correction: correction) }
    guard earlier.productId != grant.productId else { return EntryMeaning(type: .renewal, correction: correction) }
    let overlaps = grant.startMs < (earlier.endMs ?? Int64.max).saturatingSubtracting(supersedeTolerance)
    return EntryMeaning(type: .productChange, productChange: overlaps ? .immediate : .atRenewal,
                        fromProductId: earlier.productId, toProductId: grant.productId, correction: correction)
}

private func extendMeaning(_ entry: LedgerEntry, before: SubscriptionState?) -> EntryMeaning {
    if isGrace(entry.purchaseId) { return EntryMeaning(type: .gracePeriod) }
    // Apple took back a refund or revocation: the cut it caused is given back.
    if let id = entry.purchaseId, let cut = before?.grants[id]?.cut, cut.kind == .refund || cut.kind == .revoke {
        return EntryMeaning(type: .refundReversed)
    }
    return EntryMeaning(type: .subscriptionExtended)
}

private func cutMeaning(_ entry: LedgerEntry, before: SubscriptionState?, after: SubscriptionState) -> EntryMeaning {
    switch entry.cutKind {
    case .refund: return EntryMeaning(type: .refund)
    case .revoke: return EntryMeaning(type: .revoke)
    case .upgrade, .crossgrade, .downgrade, .switch, .cancelAndSwitch:
        // The old purchase ends where its successor starts; its own event names both products.
        let successor = entry.interval.flatMap { cutAt in
            after.grants.values.first {
                $0.group == entry.group && $0.purchaseId != entry.purchaseId && $0.startMs == cutAt.startMs
            }
        }
        return EntryMeaning(type: .productChange, productChange: .immediate, fromProductId: entry.productId,
                            toProductId: successor?.productId)
    case .correction:
        // A replay after a fix took back a purchase that is none of its own (issue 13).
        return EntryMeaning(type: .expiration, correction: true)
    case nil:
        // No Apple cut: a grace period Apple ended, or a purchase whose facts now grant less.
        return EntryMeaning(type: .expiration, correction: !isGrace(entry.purchaseId) && before?.granted[entry.purchaseId ?? ""] != nil)
    }
}

private func renewalMeaning(before: RenewalState?, after: RenewalState?) -> EntryMeaning {
    guard let after else { return EntryMeaning(type: .renewalInfoChanged) }
    if let on = after.autoRenewStatus, on != before?.autoRenewStatus, before?.autoRenewStatus != nil || !on {
        return EntryMeaning(type: on ? .uncancellation : .cancellation)
    }
    if after.isInBillingRetry == true, before?.isInBillingRetry != true { return EntryMeaning(type: .billingIssue) }
    if let grace = after.gracePeriodExpiresMs, grace != before?.gracePeriodExpiresMs { return EntryMeaning(type: .billingIssue) }
    if let next = after.autoRenewProductId, let current = after.productId, next != current,
       next != before?.autoRenewProductId || current != before?.productId {
        return EntryMeaning(type: .productChange, productChange: .atRenewal, fromProductId: current, toProductId: next)
    }
    if after.expirationIntent != nil, after.expirationIntent != before?.expirationIntent { return EntryMeaning(type: .expiration) }
    return EntryMeaning(type: .renewalInfoChanged)
}

/// A ledger entry with the meaning the events publish.
public struct DescribedEntry: Sendable, Equatable {
    public var entry: LedgerEntry
    public var meaning: EntryMeaning?
    /// The purchase's facts after the command (transaction ids, finance flags), when it has one.
    public var grant: PurchaseGrant?
    public var renewal: RenewalState?
}

extension MembershipBook {
    /// `apply(_:)`, with every entry's meaning taken from its subscription's state around the command.
    public mutating func applyDescribing(_ command: MembershipCommand) -> [DescribedEntry] {
        let before = subscriptions[command.subscriptionKey]
        let entries = apply(command)
        let after = subscriptions[command.subscriptionKey] ?? SubscriptionState(subscriptionKey: command.subscriptionKey)
        return entries.map { entry in
            DescribedEntry(entry: entry, meaning: meaning(of: entry, before: before, after: after),
                           grant: entry.purchaseId.flatMap { after.grants[$0] }, renewal: after.renewal)
        }
    }
}
