/// Classify's pure step: turns what is new about a subscription into membership commands.
/// Decisions come from the transactions' facts (cancellation date, is_upgraded, product levels),
/// not from the notification's type name (R3), and every command says why.
public func classify(_ unique: UniqueEvent, catalog: Catalog) -> [MembershipCommand] {
    let event = unique.event
    var commands: [MembershipCommand] = []
    func cause(_ transaction: TransactionFacts? = nil, purchaseId: String? = nil) -> Cause {
        Cause(source: event.source, eventId: event.eventId, notificationType: event.notification?.type,
              notificationSubtype: event.notification?.subtype, notificationUUID: event.notification?.uuid,
              transactionId: transaction?.transactionId, purchaseId: purchaseId, rawPosition: event.rawPosition,
              decodedPosition: unique.decodedPosition)
    }
    func add(_ suffix: String, _ action: MembershipCommand.Action, _ reason: String, _ cause: Cause) {
        commands.append(MembershipCommand(commandId: "\(event.eventId)#\(suffix)", subscriptionKey: event.subscriptionKey,
                                          action: action, reason: reason, cause: cause))
    }

    if let userId = event.appUserId {
        add("link", .linkUser(UserLink(userId: userId, via: "receipt-upload")),
            "receipt uploaded by app user \(userId)", cause())
    }
    for change in unique.purchases {
        let grant = purchaseGrant(change, catalog: catalog)
        add("p:\(change.purchaseId)", .purchase(grant), describe(grant, change: change, event: event),
            cause(change.transaction, purchaseId: change.purchaseId))
    }
    if let renewal = event.renewalInfo {
        let state = RenewalState(autoRenewStatus: renewal.autoRenewStatus ?? event.notification?.autoRenewStatus,
                                 productId: renewal.productId, autoRenewProductId: renewal.autoRenewProductId,
                                 isInBillingRetry: renewal.isInBillingRetryPeriod,
                                 gracePeriodExpiresMs: renewal.gracePeriodExpiresDateMs,
                                 asOfMs: event.notification?.signedDateMs ?? event.receivedAtMs)
        add("renewal", .renewal(state), "renewal state from \(event.source.rawValue)", cause())
    }
    if commands.isEmpty, let notification = event.notification {
        add("record", .record(notification.type), "notification \(notification.type) changes no purchase", cause())
    }
    return commands
}

func purchaseGrant(_ change: PurchaseChange, catalog: Catalog) -> PurchaseGrant {
    let t = change.transaction
    let product = catalog.product(t.productId)
    let kind = product?.kind ?? inferredKind(t)
    var cut: Cut?
    if let at = t.cancellationDateMs {
        let cutKind: Cut.Kind = t.isUpgraded == true ? .upgrade
            : (t.revocationType == "FAMILY_REVOKE" ? .revoke : .refund)
        cut = Cut(atMs: at, kind: cutKind, appleReason: t.cancellationReason)
    }
    var end = t.expiresDateMs
    if kind == .nonRenewing, end == nil, let days = product?.durationDays {
        end = t.purchaseDateMs + Int64(days) * 86_400_000
    }
    return PurchaseGrant(purchaseId: change.purchaseId, transactionId: t.transactionId,
                         originalTransactionId: t.originalTransactionId, productId: t.productId, productKind: kind,
                         group: product?.group ?? t.subscriptionGroupIdentifier ?? t.productId,
                         startMs: t.purchaseDateMs, endMs: kind == .nonConsumable ? nil : end, cut: cut,
                         credit: kind == .consumable ? (product?.credits ?? t.quantity) : nil,
                         finance: FinanceFlags(isTrial: t.isTrialPeriod ?? false, isIntro: t.isInIntroOfferPeriod ?? false,
                                               promotionalOfferId: t.promotionalOfferId,
                                               offerCodeRefName: t.offerCodeRefName))
}

/// Without a catalog entry, Apple's own `type` (V2) decides, else an expiry means a subscription.
func inferredKind(_ t: TransactionFacts) -> ProductKind {
    switch t.productType {
    case "Auto-Renewable Subscription": return .autoRenewable
    case "Non-Renewing Subscription": return .nonRenewing
    case "Non-Consumable": return .nonConsumable
    case "Consumable": return .consumable
    default: return t.expiresDateMs != nil ? .autoRenewable : .unknown
    }
}

func describe(_ grant: PurchaseGrant, change: PurchaseChange, event: AppleEvent) -> String {
    let via = event.notification.map { "\($0.type)\($0.subtype.map { "/\($0)" } ?? "")" } ?? event.source.rawValue
    if let cut = grant.cut {
        return "\(grant.productId) purchase \(grant.transactionId) \(cut.kind.rawValue) at \(cut.atMs) (via \(via))"
    }
    return "\(grant.productId) purchase \(grant.transactionId) \(change.kind == .new ? "granted" : "updated") (via \(via))"
}
