/// How dedupe tells purchases apart: R1 (`standard`), or, for replay tests only, a deliberately
/// wrong rule that trusts `transaction_id` as the identity (a restore then looks like a new purchase).
public enum DedupeRule: String, Sendable {
    case standard
    case trustTransactionId = "trust-transaction-id"
}

/// A purchase as dedupe remembers it: identity, merged facts, every transaction id (alias).
public struct KnownPurchase: Codable, Sendable, Equatable {
    public var purchaseId: String
    public var facts: TransactionFacts
    public var aliases: [String]
    /// When Apple stated the cancellation status in `facts` (cancelled or not), R14. nil in records
    /// written before it was kept: then the cancellation date (or nothing) stands for it.
    public var cancellationStatedAtMs: Int64?

    public init(purchaseId: String, facts: TransactionFacts, aliases: [String], cancellationStatedAtMs: Int64? = nil) {
        self.purchaseId = purchaseId
        self.facts = facts
        self.aliases = aliases
        self.cancellationStatedAtMs = cancellationStatedAtMs
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

/// - Parameter rule: `.trustTransactionId` is a deliberately wrong rule for replay tests only
///   (`Setting.testWrongRule`, issue 13): it breaks R1 the classic way.
public func dedupe(event: AppleEvent, known: [KnownPurchase], rule: DedupeRule = .standard) -> DedupeResult {
    var memory = known
    var changes: [String: PurchaseChange] = [:]
    var order: [String] = []
    var touched: Set<String> = []
    let statedAt = event.appleStatedAtMs
    let reported = withTopLevelCancellation(event, known: known)
        .sorted { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }
    if let pending = PendingCancellation.record(event, reported: reported),
       !memory.contains(where: { $0.purchaseId == pending.purchaseId }) {
        memory.append(pending)
        touched.insert(pending.purchaseId)
    }
    for var transaction in reported {
        var identity = PurchaseIdentity(subscriptionKey: event.subscriptionKey, bundleId: event.bundleId,
                                        transaction: transaction).description
        if rule == .trustTransactionId { identity += "|t:\(transaction.transactionId)" }
        let change: PurchaseChange?
        let copy = CancellationStatement(transaction, statedAtMs: statedAt)
        let matched = rule == .standard ? match(transaction, identity: identity, in: memory)
            : memory.firstIndex { $0.purchaseId == identity }
        if let index = matched {
            var purchase = memory[index]
            var merged = merge(purchase.facts, with: transaction)
            let current = CancellationStatement(purchase)
            let winner = copy.isNewer(than: current) ? copy.detailed(by: current) : current.detailed(by: copy)
            winner.apply(to: &merged)
            let factsChanged = materiallyDiffers(purchase.facts, merged)
            var recordChanged = factsChanged || merged != purchase.facts || purchase.cancellationStatedAtMs != winner.statedAtMs
            if !purchase.aliases.contains(transaction.transactionId) {
                purchase.aliases.append(transaction.transactionId)
                recordChanged = true
            }
            purchase.facts = merged
            purchase.cancellationStatedAtMs = winner.statedAtMs
            memory[index] = purchase
            if recordChanged { touched.insert(purchase.purchaseId) }
            change = factsChanged ? PurchaseChange(purchaseId: purchase.purchaseId, kind: .changed,
                                                   transaction: merged, aliases: purchase.aliases) : nil
        } else {
            // A top-level cancellation that arrived before this purchase (R15, S15) cuts it now, as it
            // would have had the purchase come first; a newer statement in the copy itself wins.
            var copy = copy
            if let pending = memory.last(where: { PendingCancellation.names($0, transaction) }) {
                let earlier = CancellationStatement(pending)
                if earlier.isNewer(than: copy) {
                    earlier.apply(to: &transaction)
                    copy = earlier
                }
            }
            // Two distinct purchase events of one product in the same second (only possible with
            // different web order line items) keep apart by adding the web order id to the second.
            var id = identity
            if memory.contains(where: { $0.purchaseId == identity }), let web = transaction.webOrderLineItemId {
                id = "\(identity)|w:\(web)"
            }
            let purchase = KnownPurchase(purchaseId: id, facts: transaction, aliases: [transaction.transactionId],
                                         cancellationStatedAtMs: copy.statedAtMs)
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

/// R15: a V1 CANCEL names the cancelled purchase event at its top level (`web_order_line_item_id`,
/// `cancellation_date_ms`), and `latest_receipt_info` need not show it cancelled, or at all. The
/// reported transactions, with the top-level cancellation put on the copy it names
/// (`CancellationTarget`): one in the input, else a known purchase. A cancellation that names nothing
/// changes nothing here; classify records it.
public func withTopLevelCancellation(_ event: AppleEvent, known: [KnownPurchase]) -> [TransactionFacts] {
    var transactions = event.transactions
    guard let meta = event.notification, meta.aboutAnotherSubscription != true, let at = meta.cancellationDateMs else {
        return transactions
    }
    let target = CancellationTarget(webOrderLineItemId: meta.webOrderLineItemId, originalTransactionId: meta.originalTransactionId, atMs: at)
    let named = target.names
    func cancelled(_ t: TransactionFacts) -> TransactionFacts {
        guard t.cancellationDateMs == nil else { return t }
        var copy = t
        copy.cancellationDateMs = at
        copy.cancellationReason = meta.cancellationReason ?? t.cancellationReason
        return copy
    }
    if let index = transactions.indices.filter({ named(transactions[$0]) }).min(by: { target.precedes(transactions[$0], transactions[$1]) }) {
        transactions[index] = cancelled(transactions[index])
    } else if let purchase = known.filter({ !PendingCancellation.isOne($0) && named($0.facts) }).min(by: { target.precedes($0.facts, $1.facts) }) {
        transactions.append(cancelled(purchase.facts))
    }
    return transactions
}

/// R15 with S15: a V1 CANCEL whose top-level cancellation names no purchase known yet (its body need
/// not list the purchase at all) is kept in dedupe's memory as a record of its own, and cuts the
/// purchase it names when that purchase first arrives, as it would have had the purchase come first.
/// The record is no purchase: nothing matches a transaction to it (its product is empty, it has no
/// alias), it grants nothing, and nothing but this rule reads it.
enum PendingCancellation {
    static let prefix = "pending-cancel:"

    static func isOne(_ purchase: KnownPurchase) -> Bool { purchase.purchaseId.hasPrefix(prefix) }

    /// The record to keep for `event`, when its top-level cancellation names none of `reported`.
    static func record(_ event: AppleEvent, reported: [TransactionFacts]) -> KnownPurchase? {
        guard let meta = event.notification, meta.aboutAnotherSubscription != true, let at = meta.cancellationDateMs else { return nil }
        let otid = meta.originalTransactionId ?? event.transactions.first?.originalTransactionId ?? event.subscriptionKey
        let facts = TransactionFacts(transactionId: "", originalTransactionId: otid, webOrderLineItemId: meta.webOrderLineItemId,
                                     productId: "", purchaseDateMs: at, cancellationDateMs: at,
                                     cancellationReason: meta.cancellationReason)
        let pending = KnownPurchase(purchaseId: "\(prefix)\(meta.webOrderLineItemId ?? "-")@\(at)", facts: facts, aliases: [],
                                    cancellationStatedAtMs: max(event.appleStatedAtMs, at))
        return reported.contains { names(pending, $0) } ? nil : pending
    }

    /// Whether `pending` (a kept cancellation) names `transaction`, as the CANCEL itself would have.
    static func names(_ pending: KnownPurchase, _ transaction: TransactionFacts) -> Bool {
        guard isOne(pending), let at = pending.facts.cancellationDateMs else { return false }
        return CancellationTarget(webOrderLineItemId: pending.facts.webOrderLineItemId,
                                  originalTransactionId: pending.facts.originalTransactionId, atMs: at).names(transaction)
    }
}

/// The purchase a top-level cancellation names (R15): by web order line item when it and the copy have
/// one, else the period of its subscription that was running at the cancellation instant.
struct CancellationTarget {
    var webOrderLineItemId: String?
    var originalTransactionId: String?
    var atMs: Int64

    /// A purchase made this close before the instant (or after it) is the one that replaced the
    /// cancelled period: an upgrade's or crossgrade's new purchase starts when the old one is
    /// cancelled, give or take Apple's milliseconds (R1). By the instant, it is never the one named.
    /// Classify takes the same window for a replacement as a switch marker.
    static let replacementWindowMs: Int64 = 60_000

    func names(_ t: TransactionFacts) -> Bool {
        // A copy that carries no web order id at all can still be the period named: by its instant.
        if let web = webOrderLineItemId, t.webOrderLineItemId != nil { return t.webOrderLineItemId == web }
        if let otid = originalTransactionId, t.originalTransactionId != otid { return false }
        return t.purchaseDateMs <= atMs.saturatingSubtracting(Self.replacementWindowMs) && atMs < (t.expiresDateMs ?? Int64.max)
            && !wasCancelledBefore(t)
    }

    /// A period cancelled before the instant (an upgrade's old purchase, an earlier refund) was no
    /// longer running then: the refund of its replacement names the replacement, not it.
    func wasCancelledBefore(_ t: TransactionFacts) -> Bool {
        t.cancellationDateMs.map { wholeSecond($0) < wholeSecond(atMs) } ?? false
    }

    /// Of two copies it names, whether `a` is rather the one cancelled: one carrying the web order id,
    /// then one already showing this cancellation, then the earlier period.
    func precedes(_ a: TransactionFacts, _ b: TransactionFacts) -> Bool {
        func rank(_ t: TransactionFacts) -> (Int, Int, Int64, String) {
            (webOrderLineItemId != nil && t.webOrderLineItemId == webOrderLineItemId ? 0 : 1,
             t.cancellationDateMs == atMs ? 0 : 1, t.purchaseDateMs, t.transactionId)
        }
        return rank(a) < rank(b)
    }
}

/// R14: a purchase's cancellation status (cancelled at a date, or not cancelled) as Apple stated it
/// at a time. Only a newer statement replaces it, so Apple's retry of a REFUND after its
/// REFUND_REVERSED, or an older receipt copy that still shows the refund, changes nothing. Statements
/// are totally ordered (time, then "cancelled" over "not", then the earlier cancellation), so copies
/// arriving in any order converge.
struct CancellationStatement {
    var dateMs: Int64?
    var reason: String?
    var revocationType: String?
    var revocationPercentage: Int?
    var statedAtMs: Int64

    /// A reported copy: a cancellation cannot have been stated before it happened.
    init(_ t: TransactionFacts, statedAtMs: Int64) {
        dateMs = t.cancellationDateMs
        reason = t.cancellationReason
        revocationType = t.revocationType
        revocationPercentage = t.revocationPercentage
        self.statedAtMs = max(statedAtMs, t.cancellationDateMs ?? Int64.min)
    }

    /// What is known (records from before R14 have no statement time: their cancellation date stands for it).
    init(_ purchase: KnownPurchase) {
        let t = purchase.facts
        dateMs = t.cancellationDateMs
        reason = t.cancellationReason
        revocationType = t.revocationType
        revocationPercentage = t.revocationPercentage
        statedAtMs = purchase.cancellationStatedAtMs ?? t.cancellationDateMs ?? Int64.min
    }

    func isNewer(than other: CancellationStatement) -> Bool {
        if statedAtMs != other.statedAtMs { return statedAtMs > other.statedAtMs }
        switch (dateMs, other.dateMs) {
        case (let mine?, let theirs?): return mine < theirs
        case (.some, nil): return true
        default: return false
        }
    }

    /// The same cancellation (same second) told by a copy without Apple's details: a receipt or a
    /// V1 body carries no revocation type or share, and may lack the reason. The details another
    /// statement gave of it stand, so a later receipt copy does not turn a prorated refund into a
    /// full one (R19).
    func detailed(by other: CancellationStatement) -> CancellationStatement {
        guard let mine = dateMs, let theirs = other.dateMs,
              PurchaseIdentity.second(ofMs: mine) == PurchaseIdentity.second(ofMs: theirs) else { return self }
        var result = self
        result.reason = reason ?? other.reason
        if revocationType == nil, revocationPercentage == nil {
            result.revocationType = other.revocationType
            result.revocationPercentage = other.revocationPercentage
        }
        return result
    }

    func apply(to facts: inout TransactionFacts) {
        facts.cancellationDateMs = dateMs
        facts.cancellationReason = reason
        facts.revocationType = revocationType
        facts.revocationPercentage = revocationPercentage
    }
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
/// milliseconds), the latest expiry (Apple only ever extends one), and "true" wins for the once-set
/// flags. Other fields take the latest non-nil value. The cancellation status is not merged but
/// taken from the newer statement (`CancellationStatement`, R14).
func merge(_ old: TransactionFacts, with new: TransactionFacts) -> TransactionFacts {
    var merged = old
    merged.purchaseDateMs = min(old.purchaseDateMs, new.purchaseDateMs)
    merged.webOrderLineItemId = old.webOrderLineItemId ?? new.webOrderLineItemId
    merged.originalPurchaseDateMs = minimum(old.originalPurchaseDateMs, new.originalPurchaseDateMs)
    merged.expiresDateMs = maximum(old.expiresDateMs, new.expiresDateMs)
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
    merged.offerPeriod = new.offerPeriod ?? old.offerPeriod
    merged.appTransactionId = new.appTransactionId ?? old.appTransactionId
    merged.billingPlanType = new.billingPlanType ?? old.billingPlanType
    merged.commitmentInfo = new.commitmentInfo ?? old.commitmentInfo
    merged.bundleId = old.bundleId ?? new.bundleId
    // A copy without a quantity reads as 1 (V1, verifyReceipt objects): the larger count is Apple's.
    merged.quantity = max(old.quantity, new.quantity)
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

/// Facts that change what membership grants or what finance sees, compared at the second (R1: a
/// receipt writes whole seconds, V2 milliseconds). The purchase second is one of them: a copy matched
/// by its web order id may say the purchase was made earlier (the first copy seen was a restore), and
/// the grant starts at the earliest (`merge`), whichever copy came first.
func materiallyDiffers(_ a: TransactionFacts, _ b: TransactionFacts) -> Bool {
    func second(_ ms: Int64?) -> Int64? { ms.map(PurchaseIdentity.second(ofMs:)) }
    return second(a.purchaseDateMs) != second(b.purchaseDateMs)
        || second(a.expiresDateMs) != second(b.expiresDateMs) || second(a.cancellationDateMs) != second(b.cancellationDateMs)
        || a.cancellationReason != b.cancellationReason || a.isUpgraded != b.isUpgraded
        || a.isTrialPeriod != b.isTrialPeriod || a.isInIntroOfferPeriod != b.isInIntroOfferPeriod
        || a.promotionalOfferId != b.promotionalOfferId || a.offerCodeRefName != b.offerCodeRefName
        || a.offerType != b.offerType || a.offerIdentifier != b.offerIdentifier
        || a.revocationType != b.revocationType || a.appAccountToken != b.appAccountToken
        || a.productType != b.productType || a.quantity != b.quantity || a.revocationPercentage != b.revocationPercentage
        || a.offerDiscountType != b.offerDiscountType || a.offerPeriod != b.offerPeriod
        || a.billingPlanType != b.billingPlanType || a.commitmentInfo != b.commitmentInfo
        || a.subscriptionGroupIdentifier != b.subscriptionGroupIdentifier
}
