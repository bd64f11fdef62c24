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
    public var changes: [PurchaseChange]
    public var updated: [KnownPurchase]
}

public func dedupe(event: AppleEvent, known: [KnownPurchase]) -> DedupeResult {
    var memory = known
    var changes: [String: PurchaseChange] = [:]
    var order: [String] = []
    for transaction in event.transactions.sorted(by: { $0.purchaseDateMs < $1.purchaseDateMs }) {
        let identity = PurchaseIdentity(subscriptionKey: event.subscriptionKey, bundleId: event.bundleId,
                                        transaction: transaction).description
        let index = memory.firstIndex { $0.purchaseId == identity }
            ?? transaction.webOrderLineItemId.flatMap { web in
                memory.firstIndex { $0.facts.webOrderLineItemId == web && $0.facts.productId == transaction.productId }
            }
            ?? memory.firstIndex { $0.aliases.contains(transaction.transactionId) }
        let change: PurchaseChange?
        if let index {
            var purchase = memory[index]
            let merged = merge(purchase.facts, with: transaction)
            var aliases = purchase.aliases
            if !aliases.contains(transaction.transactionId) { aliases.append(transaction.transactionId) }
            let factsChanged = materiallyDiffers(purchase.facts, merged)
            purchase.facts = merged
            purchase.aliases = aliases
            memory[index] = purchase
            change = factsChanged ? PurchaseChange(purchaseId: purchase.purchaseId, kind: .changed,
                                                   transaction: merged, aliases: aliases) : nil
        } else {
            let purchase = KnownPurchase(purchaseId: identity, facts: transaction, aliases: [transaction.transactionId])
            memory.append(purchase)
            change = PurchaseChange(purchaseId: identity, kind: .new, transaction: transaction,
                                    aliases: purchase.aliases)
        }
        if let change {
            if changes[change.purchaseId] == nil { order.append(change.purchaseId) }
            // A later copy in the same event overrides an earlier one, keeping "new" if it was new.
            let kind = changes[change.purchaseId]?.kind ?? change.kind
            changes[change.purchaseId] = PurchaseChange(purchaseId: change.purchaseId, kind: kind,
                                                        transaction: change.transaction, aliases: change.aliases)
        }
    }
    return DedupeResult(changes: order.compactMap { changes[$0] }, updated: memory)
}

/// Latest non-nil value of each fact wins; the identity fields (product, purchase date) stay as
/// first seen, since copies differ only in milliseconds (S14).
func merge(_ old: TransactionFacts, with new: TransactionFacts) -> TransactionFacts {
    var merged = old
    merged.webOrderLineItemId = new.webOrderLineItemId ?? old.webOrderLineItemId
    merged.originalPurchaseDateMs = new.originalPurchaseDateMs ?? old.originalPurchaseDateMs
    merged.expiresDateMs = new.expiresDateMs ?? old.expiresDateMs
    merged.cancellationDateMs = new.cancellationDateMs ?? old.cancellationDateMs
    merged.cancellationReason = new.cancellationReason ?? old.cancellationReason
    merged.isUpgraded = new.isUpgraded ?? old.isUpgraded
    merged.isTrialPeriod = new.isTrialPeriod ?? old.isTrialPeriod
    merged.isInIntroOfferPeriod = new.isInIntroOfferPeriod ?? old.isInIntroOfferPeriod
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
    merged.revocationType = new.revocationType ?? old.revocationType
    merged.bundleId = old.bundleId ?? new.bundleId
    return merged
}

/// Facts that change what membership grants or what finance sees.
func materiallyDiffers(_ a: TransactionFacts, _ b: TransactionFacts) -> Bool {
    a.expiresDateMs != b.expiresDateMs || a.cancellationDateMs != b.cancellationDateMs
        || a.cancellationReason != b.cancellationReason || a.isUpgraded != b.isUpgraded
        || a.isTrialPeriod != b.isTrialPeriod || a.isInIntroOfferPeriod != b.isInIntroOfferPeriod
        || a.promotionalOfferId != b.promotionalOfferId || a.offerCodeRefName != b.offerCodeRefName
        || a.revocationType != b.revocationType || a.appAccountToken != b.appAccountToken
}
