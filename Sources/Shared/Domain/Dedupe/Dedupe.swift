/// A purchase as dedupe remembers it: identity, merged facts, every transaction id (alias).
public struct KnownPurchase: Codable, Sendable, Equatable {
    public var purchaseId: String
    public var facts: TransactionFacts
    public var aliases: [String]

    public init(purchaseId: String, facts: TransactionFacts, aliases: [String]) {
        self.purchaseId = purchaseId
        self.facts = facts
        self.aliases = aliases
    }
}

/// Dedupe's pure step (R1, R2, S1, S14): match each reported transaction to a known purchase by
/// identity, then by `web_order_line_item_id`, then by transaction id alias; emit only what is new
/// or changed, and the updated memory.
public struct DedupeResult: Sendable, Equatable {
    /// New purchases and purchases whose facts changed, in purchase order.
    public var changes: [PurchaseChange]
    /// The whole memory of the subscription after this event.
    public var updated: [KnownPurchase]
    /// Purchases whose stored record (facts or aliases) must be written back.
    public var touched: Set<String>
}

/// The key under which an input counts as "already seen": Apple's `notificationUUID` when there is
/// one (Apple's retries of a V2 notification carry the same UUID; forum thread 700173), else the
/// decoded event id (a digest of the raw bytes for V1 bodies and receipts).
public func seenKey(of event: AppleEvent) -> String {
    if let uuid = event.notification?.uuid, !uuid.isEmpty { return "uuid:\(uuid.lowercased())" }
    return event.eventId
}

public func dedupe(event: AppleEvent, known: [KnownPurchase]) -> DedupeResult {
    var memory = known
    var changes: [String: PurchaseChange] = [:]
    var order: [String] = []
    var touched: Set<String> = []
    // V2 REFUND_REVERSED: Apple reinstated a refunded purchase; its transaction no longer carries a
    // revocation, which "latest non-nil wins" would otherwise never forget.
    let reinstates = event.notification?.type == "REFUND_REVERSED"
    let reported = event.transactions.sorted { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }
    for transaction in reported {
        let identity = PurchaseIdentity(subscriptionKey: event.subscriptionKey, bundleId: event.bundleId,
                                        transaction: transaction).description
        let change: PurchaseChange?
        if let index = match(transaction, identity: identity, in: memory) {
            var purchase = memory[index]
            let merged = merge(purchase.facts, with: transaction, reinstate: reinstates)
            let factsChanged = materiallyDiffers(purchase.facts, merged)
            var recordChanged = factsChanged || merged != purchase.facts
            if !purchase.aliases.contains(transaction.transactionId) {
                purchase.aliases.append(transaction.transactionId)
                recordChanged = true
            }
            purchase.facts = merged
            memory[index] = purchase
            if recordChanged { touched.insert(purchase.purchaseId) }
            change = factsChanged ? PurchaseChange(purchaseId: purchase.purchaseId, kind: .changed,
                                                   transaction: merged, aliases: purchase.aliases) : nil
        } else {
            // Two distinct purchase events of one product in the same second (only possible with
            // different web order line items) keep apart by adding the web order id to the second.
            var id = identity
            if memory.contains(where: { $0.purchaseId == identity }), let web = transaction.webOrderLineItemId {
                id = "\(identity)|w:\(web)"
            }
            let purchase = KnownPurchase(purchaseId: id, facts: transaction, aliases: [transaction.transactionId])
            memory.append(purchase)
            touched.insert(id)
            change = PurchaseChange(purchaseId: id, kind: .new, transaction: transaction, aliases: purchase.aliases)
        }
        if let change {
            if changes[change.purchaseId] == nil { order.append(change.purchaseId) }
            // A later copy in the same event overrides an earlier one, keeping "new" if it was new.
            let kind = changes[change.purchaseId]?.kind ?? change.kind
            changes[change.purchaseId] = PurchaseChange(purchaseId: change.purchaseId, kind: kind,
                                                        transaction: change.transaction, aliases: change.aliases)
        }
    }
    return DedupeResult(changes: order.compactMap { changes[$0] }, updated: memory, touched: touched)
}

/// Which known purchase a reported transaction is a copy of, if any (R1):
/// 1. the identity (bundle + product + purchase second, within the subscription) — unless both
///    copies carry a web order line item id and they differ: then they are two purchase events;
/// 2. the same web order line item id and product (a copy whose purchase second drifted);
/// 3. a transaction id already seen for the purchase (an alias).
func match(_ transaction: TransactionFacts, identity: String, in memory: [KnownPurchase]) -> Int? {
    let web = transaction.webOrderLineItemId
    func webAgrees(_ purchase: KnownPurchase) -> Bool {
        guard let web, let known = purchase.facts.webOrderLineItemId else { return true }
        return web == known
    }
    let sameIdentity = memory.indices.filter {
        memory[$0].purchaseId == identity || memory[$0].purchaseId.hasPrefix(identity + "|w:")
    }
    if let index = sameIdentity.first(where: { webAgrees(memory[$0]) }) { return index }
    if let web, let index = memory.firstIndex(where: {
        $0.facts.webOrderLineItemId == web && $0.facts.productId == transaction.productId
    }) {
        return index
    }
    return memory.firstIndex { $0.aliases.contains(transaction.transactionId) }
}

/// Merges a new copy of a purchase into what is known. The rules commute, so copies arriving in any
/// order give the same facts (S14, S15): the earliest purchase instant (copies differ only in
/// milliseconds), the latest expiry (Apple only ever extends one), the earliest cancellation, and
/// "true" wins for the once-set flags. Other fields take the latest non-nil value.
func merge(_ old: TransactionFacts, with new: TransactionFacts, reinstate: Bool = false) -> TransactionFacts {
    var merged = old
    merged.purchaseDateMs = min(old.purchaseDateMs, new.purchaseDateMs)
    merged.webOrderLineItemId = old.webOrderLineItemId ?? new.webOrderLineItemId
    merged.originalPurchaseDateMs = minimum(old.originalPurchaseDateMs, new.originalPurchaseDateMs)
    merged.expiresDateMs = maximum(old.expiresDateMs, new.expiresDateMs)
    if reinstate && new.cancellationDateMs == nil {
        merged.cancellationDateMs = nil
        merged.cancellationReason = nil
        merged.revocationType = nil
    } else if let newCancel = new.cancellationDateMs, old.cancellationDateMs.map({ newCancel < $0 }) ?? true {
        merged.cancellationDateMs = newCancel
        merged.cancellationReason = new.cancellationReason ?? old.cancellationReason
        merged.revocationType = new.revocationType ?? old.revocationType
    } else {
        merged.cancellationReason = old.cancellationReason ?? new.cancellationReason
        merged.revocationType = old.revocationType ?? new.revocationType
    }
    merged.isUpgraded = either(old.isUpgraded, new.isUpgraded)
    merged.isTrialPeriod = either(old.isTrialPeriod, new.isTrialPeriod)
    merged.isInIntroOfferPeriod = either(old.isInIntroOfferPeriod, new.isInIntroOfferPeriod)
    merged.promotionalOfferId = new.promotionalOfferId ?? old.promotionalOfferId
    merged.offerCodeRefName = new.offerCodeRefName ?? old.offerCodeRefName
    merged.offerType = new.offerType ?? old.offerType
    merged.offerIdentifier = new.offerIdentifier ?? old.offerIdentifier
    merged.offerDiscountType = new.offerDiscountType ?? old.offerDiscountType
    merged.productType = new.productType ?? old.productType
    merged.inAppOwnershipType = new.inAppOwnershipType ?? old.inAppOwnershipType
    merged.subscriptionGroupIdentifier = new.subscriptionGroupIdentifier ?? old.subscriptionGroupIdentifier
    merged.appAccountToken = new.appAccountToken ?? old.appAccountToken
    merged.storefront = new.storefront ?? old.storefront
    merged.transactionReason = new.transactionReason ?? old.transactionReason
    merged.price = new.price ?? old.price
    merged.currency = new.currency ?? old.currency
    merged.bundleId = old.bundleId ?? new.bundleId
    return merged
}

private func minimum(_ a: Int64?, _ b: Int64?) -> Int64? {
    guard let a else { return b }
    guard let b else { return a }
    return min(a, b)
}

private func maximum(_ a: Int64?, _ b: Int64?) -> Int64? {
    guard let a else { return b }
    guard let b else { return a }
    return max(a, b)
}

private func either(_ a: Bool?, _ b: Bool?) -> Bool? {
    if a == true || b == true { return true }
    return a ?? b
}

/// Facts that change what membership grants or what finance sees. The purchase instant is not one
/// of them: membership grants from the purchase *second* (R1), which copies share.
func materiallyDiffers(_ a: TransactionFacts, _ b: TransactionFacts) -> Bool {
    a.expiresDateMs != b.expiresDateMs || a.cancellationDateMs != b.cancellationDateMs
        || a.cancellationReason != b.cancellationReason || a.isUpgraded != b.isUpgraded
        || a.isTrialPeriod != b.isTrialPeriod || a.isInIntroOfferPeriod != b.isInIntroOfferPeriod
        || a.promotionalOfferId != b.promotionalOfferId || a.offerCodeRefName != b.offerCodeRefName
        || a.offerType != b.offerType || a.offerIdentifier != b.offerIdentifier
        || a.revocationType != b.revocationType || a.appAccountToken != b.appAccountToken
        || a.productType != b.productType || a.quantity != b.quantity
}
