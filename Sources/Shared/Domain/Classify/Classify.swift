/// Classify's pure step: turns what is new about a subscription into membership commands.
/// Decisions come from the transactions' facts (cancellation date, is_upgraded, switch target,
/// product levels), not from the notification's type name (R3), and every command says why.
public func classify(_ unique: UniqueEvent, catalog: Catalog) -> [MembershipCommand] {
    var classification = Classification(unique: unique, catalog: catalog)
    classification.run()
    return classification.commands
}

struct Classification {
    let unique: UniqueEvent
    let catalog: Catalog
    var commands: [MembershipCommand] = []

    var event: AppleEvent { unique.event }
    /// The typed notification type, when it is about this subscription (R16: a V1 body's type and
    /// top-level facts describe one subscription of its `unified_receipt`, not the others).
    var type: NotificationType? {
        guard event.notification?.aboutAnotherSubscription != true else { return nil }
        return event.notificationType
    }

    /// How the input is named in reasons: `CANCEL`, `DID_CHANGE_RENEWAL_PREF/UPGRADE`, `app-receipt`.
    var via: String {
        guard let notification = event.notification else { return event.source.rawValue }
        return notification.type + (notification.subtype.map { "/\($0)" } ?? "")
    }

    init(unique: UniqueEvent, catalog: Catalog) {
        self.unique = unique
        self.catalog = catalog
    }

    mutating func run() {
        if let expected = catalog.bundleId,
           let actual = event.bundleId ?? event.transactions.lazy.compactMap(\.bundleId).first, actual != expected {
            add("record", .record("foreign-bundle"),
                "\(via) for bundle \(actual), but this catalog is for \(expected): nothing granted", cause())
            return
        }
        linkUser()
        for change in unique.purchases { purchase(change) }
        unmatchedTopLevelCancellation()
        let renewal = renewalState()
        if let renewal { add("renewal", .renewal(renewal), "\(via): renewal state", cause()) }
        gracePeriod(renewal)
        graceEnded(renewal)
        recordNotification()
    }

    // MARK: user mapping (R6)

    mutating func linkUser() {
        let transfer = catalog.accounts.transfer
        if let raw = event.appUserId, !raw.isEmpty {
            let user = UserId.normalized(raw)
            // The upload is the claim (R17): when it was made, or when the receipt was, if later. A
            // verifyReceipt answer is dated when Apple was asked, which may be much later (a retry, a
            // replay): not when the account claimed.
            let claimed = event.source == .verifyReceipt ? event.receivedAtMs : max(event.receivedAtMs, event.appleStatedAtMs)
            add("link", .linkUser(UserLink(userId: user, via: UserLink.receiptUpload, transfer: transfer, claimedAtMs: claimed)),
                "receipt uploaded by app user \(user)", cause())
            return
        }
        guard catalog.accounts.appAccountToken == .userId else { return }
        // The app's account id travels as appAccountToken (StoreKit 2) / applicationUsername
        // (StoreKit 1): it survives a storefront change that gives the user a new
        // original_transaction_id (S10). The latest purchase's token wins.
        let carriers = (event.transactions + unique.purchases.map(\.transaction))
            .sorted { ($0.purchaseDateMs, $0.transactionId) > ($1.purchaseDateMs, $1.transactionId) }
        let token = carriers.lazy.compactMap(\.appAccountToken).first { !$0.isEmpty }
            ?? event.renewalInfo?.appAccountToken.flatMap { $0.isEmpty ? nil : $0 }
        guard let token else { return }
        let user = UserId.normalized(token)   // R17: a UUID in any case is one user; other ids exactly
        let claim = TokenClaim(carriers: carriers.filter { $0.appAccountToken.map { UserId.same($0, user) } ?? false },
                               earliestOriginalMs: event.transactions.compactMap(\.originalPurchaseDateMs).min(),
                               statedAtMs: event.appleStatedAtMs)
        add("link", .linkUser(UserLink(userId: user, via: claim.via, transfer: transfer, claimedAtMs: claim.atMs)),
            "\(via) carries appAccountToken \(user)", cause())
    }

    // MARK: purchases

    mutating func purchase(_ change: PurchaseChange) {
        let t = change.transaction
        let product = catalog.product(t.productId)
        var kind = product?.kind ?? inferredKind(t)
        // A restored non-consumable grants from its original purchase, whichever copy came first.
        let start = PurchaseIdentity.secondStartMs(ofMs: PurchaseIdentity.identifyingDateMs(of: t))
        var end: Int64?
        var notes: [String] = []
        if product == nil { notes.append("\(t.productId) is not in the catalog, kind \(kind.rawValue) inferred from Apple's facts") }
        switch kind {
        case .autoRenewable:
            end = t.expiresDateMs.map(wholeSecond) ?? product?.durationDays.map { periodEnd(start: start, days: $0) }
        case .nonRenewing:
            // Apple sends no expiry for non-renewing subscriptions: the catalog's duration decides (R13).
            end = product?.durationDays.map { periodEnd(start: start, days: $0) } ?? t.expiresDateMs.map(wholeSecond)
            if end == nil {
                kind = .unknown
                notes.append("non-renewing product without a catalog duration")
            }
        case .nonConsumable, .consumable, .unknown:
            end = nil
        }
        let cancellation = self.cancellation(of: t)
        let grant = PurchaseGrant(
            purchaseId: change.purchaseId, transactionId: firstTransactionId(change),
            originalTransactionId: t.originalTransactionId, productId: t.productId, productKind: kind,
            group: product?.entitlementGroup ?? t.subscriptionGroupIdentifier ?? t.productId,
            startMs: start, endMs: end, cut: cancellation?.cut,
            credit: kind == .consumable ? (product?.credits ?? 1).saturatingMultiplied(by: max(1, t.quantity)) : nil,
            finance: finance(t), level: product?.level, durationDays: product?.durationDays,
            inCatalog: product != nil, environment: event.environment)
        var reason = "\(via): \(t.productId) purchase \(grant.transactionId)"
        switch kind {
        case .consumable: reason += " credits \(grant.credit ?? 0) unit\(grant.credit == 1 ? "" : "s") of \(grant.group)"
        case .unknown: reason += " (\(change.kind == .new ? "new" : "updated"))"
        default:
            reason += " \(change.kind == .new ? "grants" : "now grants") \(Interval(startMs: start, endMs: end).description)"
        }
        if let cancellation { reason += "; cancelled at \(TimeText.iso(cancellation.cut.atMs)): \(cancellation.explanation)" }
        if event.environment != SubscriptionKey.production { notes.append("\(event.environment) purchase") }
        if grant.finance.isTrial { notes.append("free trial") }
        if grant.finance.isIntro { notes.append("introductory offer") }
        if let offer = grant.finance.promotionalOfferId { notes.append("promotional offer \(offer)") }
        if let code = grant.finance.offerCodeRefName { notes.append("offer code \(code)") }
        if !notes.isEmpty { reason += " [\(notes.joined(separator: "; "))]" }
        if grantsNothingHere {
            add("p:\(change.purchaseId)", .record("non-production"),
                "\(reason); nothing granted: the catalog grants no \(event.environment) purchases (R18)",
                cause(t, purchaseId: change.purchaseId))
            return
        }
        add("p:\(change.purchaseId)", .purchase(grant), reason, cause(t, purchaseId: change.purchaseId))
    }

    /// R3 and its V2 counterparts: why a purchase carries a cancellation date, decided from the
    /// facts. A switch shows as `is_upgraded`, as a purchase of another product of the
    /// subscription starting at the cancellation instant, or as a different `auto_renew_product_id`
    /// that takes effect at once (not a downgrade) with no `cancellation_reason`; `auto_renew_status`
    /// then separates (a) switch from (b) turn off and switch. Without switch markers it is (c) a
    /// refund by Apple support.
    func cancellation(of t: TransactionFacts) -> (cut: Cut, explanation: String)? {
        guard let at = t.cancellationDateMs.map(wholeSecond) else { return nil }
        let appleReason = t.cancellationReason
        let why = appleReason.map { $0 == "1" ? "cancellation_reason 1 (an issue in the app)" : "cancellation_reason \($0) (another reason)" }
        if t.typedRevocationType == .familyRevoke || type?.isRevoke == true {
            return (Cut(atMs: at, kind: .revoke, appleReason: appleReason), "revoked (family sharing access removed)")
        }
        let replacement = event.transactions
            .filter { $0.productId != t.productId && $0.purchaseDateMs.distanceMagnitude(to: at) <= CancellationTarget.replacementWindowMs }
            .min { $0.purchaseDateMs.distanceMagnitude(to: at) < $1.purchaseDateMs.distanceMagnitude(to: at) }
        let renewsAs = event.renewalInfo?.autoRenewProductId ?? event.notification?.autoRenewProductId
        // A downgrade or a crossgrade to another duration waits for the renewal (R5): it never
        // cancels the running purchase, so a pending one is no switch marker.
        let nextProduct = renewsAs.flatMap { $0 != t.productId ? $0 : nil }
            .flatMap { catalog.relation(from: t.productId, to: $0).takesEffectImmediately == false ? nil : $0 }
        var markers: [String] = []
        if t.isUpgraded == true { markers.append("is_upgraded") }
        if let replacement { markers.append("\(replacement.productId) bought at \(TimeText.iso(replacement.purchaseDateMs))") }
        if let nextProduct, appleReason == nil { markers.append("auto_renew_product_id \(nextProduct)") }
        let refundType = type?.isRefund == true && t.isUpgraded != true
        guard !markers.isEmpty, !refundType else {
            // A family member's copy ends when the organizer stops sharing or is refunded; the member paid
            // nothing and is refunded nothing. A receipt shows either as a cancellation date with no type
            // of its own ("refunded a transaction or revoked it from family sharing"): a revocation, unless
            // the organizer's switch ended it (the markers above).
            if t.isFamilyShared {
                return (Cut(atMs: at, kind: .revoke, appleReason: appleReason),
                        "revoked (a family member's shared access ended: never a refund of theirs)")
            }
            let prorated = t.typedRevocationType == .refundProrated
            let share = prorated ? t.revocationPercentage : nil
            let kind = prorated ? "prorated refund\(share.map { " of \(Double($0) / 1000)%" } ?? "")" : "refund"
            return (Cut(atMs: at, kind: .refund, appleReason: appleReason, refundedShare: share),
                    "\(kind) by Apple support\(why.map { ", \($0)" } ?? "") (R3 c)")
        }
        let target = replacement?.productId ?? nextProduct
        let autoRenew = event.notification?.autoRenewStatus ?? event.renewalInfo?.autoRenewStatus
        let markerText = markers.joined(separator: ", ")
        if autoRenew == false {
            return (Cut(atMs: at, kind: .cancelAndSwitch, appleReason: appleReason),
                    "switched\(target.map { " to \($0)" } ?? "") and turned auto-renew off (auto_renew_status false; \(markerText); R3 b)")
        }
        let relation = target.map { catalog.relation(from: t.productId, to: $0) } ?? .unknown
        return (Cut(atMs: at, kind: relation.cutKind, appleReason: appleReason),
                "\(relation.rawValue)\(target.map { " to \($0)" } ?? "") (auto_renew_status \(autoRenew.map(String.init) ?? "unknown"); \(markerText); R3 a, R5)")
    }

    func finance(_ t: TransactionFacts) -> FinanceFlags {
        // V2 says it through offerType (1 intro, 2 promotional, 3 offer code) and offerDiscountType.
        let trial = t.isTrialPeriod ?? (t.offerType == 1 && t.typedOfferDiscountType == .freeTrial)
        let intro = t.isInIntroOfferPeriod ?? (t.offerType == 1 && t.typedOfferDiscountType != .freeTrial)
        return FinanceFlags(isTrial: trial, isIntro: intro,
                            promotionalOfferId: t.promotionalOfferId ?? (t.offerType == 2 ? t.offerIdentifier : nil),
                            offerCodeRefName: t.offerCodeRefName ?? (t.offerType == 3 ? t.offerIdentifier : nil),
                            offerType: t.offerType, offerIdentifier: t.offerIdentifier,
                            offerDiscountType: t.offerDiscountType, offerPeriod: t.offerPeriod,
                            billingPlanType: t.billingPlanType, commitment: t.commitmentInfo)
    }

    // MARK: renewal state, grace period

    func renewalState() -> RenewalState? {
        let info = event.renewalInfo
        let note = event.notification
        // Without pending_renewal_info a V1 body still says what happened through its type.
        let retryByType: Bool? = type?.failedRenewal == true ? true : type?.recovered == true ? false : nil
        let autoRenew = note?.autoRenewStatus ?? info?.autoRenewStatus
        let nextProduct = info?.autoRenewProductId ?? note?.autoRenewProductId
        guard info != nil || autoRenew != nil || nextProduct != nil || retryByType != nil else { return nil }
        let latest = event.transactions.max { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }
        let product = info?.productId ?? latest?.productId
        let pending = product.flatMap { current in nextProduct.flatMap { $0 != current ? catalog.relation(from: current, to: $0).rawValue : nil } }
        return RenewalState(autoRenewStatus: autoRenew, productId: product, autoRenewProductId: nextProduct,
                            isInBillingRetry: info?.isInBillingRetryPeriod ?? retryByType,
                            gracePeriodExpiresMs: info?.gracePeriodExpiresDateMs.map(wholeSecond), asOfMs: asOf,
                            pendingChange: pending, expirationIntent: info?.expirationIntent ?? note?.expirationIntent,
                            priceIncreaseStatus: info?.priceIncreaseStatus,
                            asOfRank: asOfRank, sourceEventId: event.eventId)
    }

    /// When Apple stated this input's facts, from the input itself (never our clock), so that replays
    /// and reorderings order renewal news the same way (S15): V2's signed date; else the latest date
    /// the input carries (purchase, cancellation, auto-renew status change) — for a failed renewal,
    /// the expiry that failed to renew.
    /// Ties of `asOf`: a renewal or recovery at the instant a renewal failed came after the failure
    /// (grace period recovery keeps the original renewal date); any other change stated at a
    /// purchase's or renewal's instant came after it. A V1 body about a renewal preference carries no
    /// date of its own, so it is dated by the newest purchase it lists: after a DID_RENEW, the
    /// renewal's instant, which it must outrank (a downgrade chosen in the second period was lost).
    var asOfRank: Int {
        switch type?.role {
        case nil, .purchase?: return 0
        case .renewal?: return 2
        case .change?: return type?.failedRenewal == true ? 1 : 3
        }
    }

    var asOf: Int64 {
        if let stated = event.statedAtMs { return stated }   // a receipt's creation date (R14)
        var dates = [event.notification?.signedDateMs, event.notification?.autoRenewStatusChangeDateMs]
            + event.transactions.flatMap { [$0.purchaseDateMs, $0.cancellationDateMs] }
        if type?.failedRenewal == true { dates += event.transactions.map(\.expiresDateMs) }
        return dates.compactMap { $0 }.max() ?? event.receivedAtMs
    }

    mutating func gracePeriod(_ renewal: RenewalState?) {
        guard let renewal, let until = renewal.gracePeriodExpiresMs,
              renewal.isInBillingRetry == true || type?.failedRenewal == true else { return }
        // Apple keeps serving through the grace period (DID_FAIL_TO_RENEW / GRACE_PERIOD).
        let product = renewal.productId
        let from = event.transactions.filter { $0.productId == product || product == nil }.compactMap(\.expiresDateMs).max().map(wholeSecond)
        let group = product.flatMap { catalog.product($0)?.entitlementGroup }
        let reason = "\(via): billing failed, Apple keeps serving through the grace period until \(TimeText.iso(until))"
        if grantsNothingHere {
            add("grace", .record("non-production"), "\(reason); nothing granted: the catalog grants no \(event.environment) purchases (R18)", cause())
            return
        }
        add("grace", .gracePeriod(GracePeriodGrant(productId: product, group: group, fromMs: from, untilMs: until)), reason, cause())
    }

    /// R18: the catalog records this environment's purchases without granting (`nonProductionPurchases: record`).
    var grantsNothingHere: Bool {
        event.environment != SubscriptionKey.production && catalog.nonProductionPurchases == .record
    }

    /// Apple ends a grace period early with GRACE_PERIOD_EXPIRED: service stops then, not at the
    /// grace end granted earlier.
    mutating func graceEnded(_ renewal: RenewalState?) {
        guard type?.endsGrace == true else { return }
        let product = renewal?.productId ?? event.transactions.last?.productId
        let group = product.flatMap { catalog.product($0)?.entitlementGroup }
        add("grace-end", .endGrace(GraceEnd(productId: product, group: group, atMs: wholeSecond(asOf))),
            "\(via): Apple ended the billing grace period at \(TimeText.iso(wholeSecond(asOf)))", cause())
    }

    // MARK: evidence

    /// R15: a top-level CANCEL that names no purchase of this input or of dedupe's memory is still
    /// evidence (R4), never dropped.
    mutating func unmatchedTopLevelCancellation() {
        guard let meta = event.notification, meta.aboutAnotherSubscription != true, let at = meta.cancellationDateMs else { return }
        let cancelled = unique.purchases.map(\.transaction) + event.transactions
        // A purchase of this input it names is a match too, when dedupe found the cancellation known
        // already or older than what it holds (a V2 REFUND came first): no change, and nothing unmatched.
        let target = CancellationTarget(webOrderLineItemId: meta.webOrderLineItemId, originalTransactionId: meta.originalTransactionId, atMs: at)
        let matched = event.transactions.contains(where: target.names) || cancelled.contains { t in
            guard let date = t.cancellationDateMs else { return false }
            return meta.webOrderLineItemId.map { $0 == t.webOrderLineItemId } ?? (wholeSecond(date) == wholeSecond(at))
        }
        guard !matched else { return }
        let web = meta.webOrderLineItemId.map { " web_order_line_item_id \($0)" } ?? ""
        add("cancel", .record("unmatched-cancellation"),
            "\(via): cancellation at \(TimeText.iso(at))\(web) names no purchase known here: recorded, nothing cut now; dedupe keeps it and it cuts the purchase it names when that arrives (R15, S15)", cause())
    }

    /// Informational and unknown types (and unknown subtypes) are evidence on their own, and so is a
    /// notification that names no purchase and no renewal state at all (a refund whose transaction
    /// is not in the body): R4, nothing is dropped unseen. A known type that brings nothing new (Apple
    /// telling us again what we know) leaves no ledger entry: dedupe counted its delivery.
    mutating func recordNotification() {
        guard let type, let notification = event.notification else { return }
        let raw = notification.type
        if case .unknown = type {
            add("record", .record(raw), "\(via): notification type unknown to this version, kept raw and recorded", cause())
        } else if let what = type.information {
            add("record", .record(raw), "\(via): \(what)", cause())
        } else if let subtype = notification.subtype, notification.typedSubtype == nil {
            add("record", .record(raw), "\(via): subtype \(subtype) unknown to this version, kept raw and recorded", cause())
        } else if commands.isEmpty, event.transactions.isEmpty, event.renewalInfo == nil {
            add("record", .record(raw), "\(via) names no purchase and no renewal state in this input: recorded, nothing changed", cause())
        }
    }

    // MARK: building commands

    func cause(_ transaction: TransactionFacts? = nil, purchaseId: String? = nil) -> Cause {
        Cause(source: event.source, eventId: event.eventId, notificationType: event.notification?.type,
              notificationSubtype: event.notification?.subtype, notificationUUID: event.notification?.uuid,
              transactionId: transaction?.transactionId, purchaseId: purchaseId, rawPosition: event.rawPosition,
              decodedPosition: unique.decodedPosition, environment: event.environment, provenance: event.provenance)
    }

    mutating func add(_ suffix: String, _ action: MembershipCommand.Action, _ reason: String, _ cause: Cause) {
        commands.append(MembershipCommand(commandId: "\(event.eventId)#\(suffix)", subscriptionKey: event.subscriptionKey,
                                          action: action, reason: reason, cause: cause))
    }
}

/// The purchase's original transaction id among its aliases: the smallest (Apple numbers restores
/// after the original), so the choice does not depend on which copy arrived first.
func firstTransactionId(_ change: PurchaseChange) -> String {
    (change.aliases + [change.transaction.transactionId]).min { ($0.count, $0) < ($1.count, $1) } ?? change.transaction.transactionId
}

/// `start` plus a catalog duration in days (checked: durations and dates are bounded where records
/// enter a stage, but no input may make this trap).
func periodEnd(start: Int64, days: Int) -> Int64 {
    start.saturatingAdding(Int64(days).saturatingMultiplied(by: 86_400_000))
}

/// Expiries, cancellations and grace ends at second precision, like purchase dates (R1): copies of
/// one date differ in milliseconds (a receipt writes whole seconds), which must never show as a
/// sub-second cut or extension.
func wholeSecond(_ ms: Int64) -> Int64 { PurchaseIdentity.secondStartMs(ofMs: ms) }

/// Without a catalog entry, Apple's own `type` (V2) decides, else an expiry means a subscription.
public func inferredKind(_ t: TransactionFacts) -> ProductKind {
    switch t.productType {
    case "Auto-Renewable Subscription": return .autoRenewable
    case "Non-Renewing Subscription": return .nonRenewing
    case "Non-Consumable": return .nonConsumable
    case "Consumable": return .consumable
    default: return t.expiresDateMs != nil ? .autoRenewable : .unknown
    }
}
