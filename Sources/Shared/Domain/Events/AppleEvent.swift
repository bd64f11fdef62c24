/// The one normalized event model that the decode stage makes out of every Apple input
/// (V1 notification, V2 notification, app receipt, verifyReceipt response) and writes to the
/// decoded topic, keyed by `subscriptionKey`. Later stages never look at Apple's wire formats.
///
/// Times are milliseconds since 1970 (`Int64`), as Apple sends them; `nil` means Apple did not say.
/// Enum-like fields are kept as Apple's raw strings so that an unknown value is recorded, never a
/// decoding failure (STYLE.md, after apple/app-store-server-library-swift).
public struct AppleEvent: Codable, Sendable, Equatable {
    public static let schemaVersion = 1

    public var schema: Int
    /// Stable identity of this decoded event: the same input decoded twice gets the same id
    /// (V2: notificationUUID; otherwise a digest of the raw bytes), suffixed per subscription split.
    public var eventId: String
    public var source: EventSource
    /// Apple's environment, normalized: "Production", "Sandbox", "Xcode", "LocalTesting" (raw otherwise).
    public var environment: String
    public var bundleId: String?
    /// The partition key after decode: the subscription family (an original_transaction_id), or, for a
    /// consumable/non-consumable, the original_transaction_id of that purchase.
    public var subscriptionKey: String
    public var notification: NotificationMeta?
    /// Every transaction Apple reported in this input for this subscription, oldest purchase first.
    public var transactions: [TransactionFacts]
    public var renewalInfo: RenewalFacts?
    /// The app's own account id, when the input says who the user is (receipt upload by the app).
    public var appUserId: String?
    public var receivedAtMs: Int64
    /// Where the raw input sits in Kafka (cause chain for the ledger).
    public var rawPosition: RecordPosition?
    /// When Apple stated this input's facts, where the input says so in a signed field (R14): a
    /// receipt's creation date. V2 says it as `notification.signedDateMs`; V1 bodies have no such time.
    public var statedAtMs: Int64?
    /// How the raw input reached StoreLedger when not through ingest (`RecordHeader.provenance`):
    /// "recovered" from notification history, "server-api" from a refresh. nil: ingest.
    public var provenance: String?

    public init(eventId: String, source: EventSource, environment: String, bundleId: String?,
                subscriptionKey: String, notification: NotificationMeta? = nil,
                transactions: [TransactionFacts] = [], renewalInfo: RenewalFacts? = nil,
                appUserId: String? = nil, receivedAtMs: Int64, rawPosition: RecordPosition? = nil,
                statedAtMs: Int64? = nil, provenance: String? = nil) {
        self.provenance = provenance
        self.schema = AppleEvent.schemaVersion
        self.eventId = eventId
        self.source = source
        self.environment = environment
        self.bundleId = bundleId
        self.subscriptionKey = subscriptionKey
        self.notification = notification
        self.transactions = transactions
        self.renewalInfo = renewalInfo
        self.appUserId = appUserId
        self.receivedAtMs = receivedAtMs
        self.rawPosition = rawPosition
        self.statedAtMs = statedAtMs
    }

    /// R14: the time Apple stated this input's facts, which orders facts that can flip (a
    /// cancellation and its reversal, renewal state). V2's signed date, a receipt's creation date;
    /// for a V1 body (no signed time) the latest date it carries, since Apple cannot have stated a
    /// fact before it happened; our receive time only when the input carries no date at all.
    public var appleStatedAtMs: Int64 {
        if let statedAtMs { return statedAtMs }
        if let signed = notification?.signedDateMs { return signed }
        let dates = [notification?.autoRenewStatusChangeDateMs, notification?.cancellationDateMs]
            + transactions.flatMap { [$0.purchaseDateMs, $0.cancellationDateMs] }
        return dates.compactMap { $0 }.max() ?? receivedAtMs
    }
}

public enum EventSource: String, Codable, Sendable, CaseIterable {
    case notificationV1 = "notification-v1"
    case notificationV2 = "notification-v2"
    case appReceipt = "app-receipt"
    case verifyReceipt = "verify-receipt"
    /// Answers of the App Store Server API (transaction history, subscription statuses): refresh.
    case serverAPI = "server-api"
}

/// What a server notification said about itself, beyond its transactions.
public struct NotificationMeta: Codable, Sendable, Equatable {
    /// V1 `notification_type` or V2 `notificationType`, raw.
    public var type: String
    /// V2 `subtype`, raw (nil in V1).
    public var subtype: String?
    /// V2 `notificationUUID` (nil in V1: Apple gives V1 bodies no id).
    public var uuid: String?
    public var signedDateMs: Int64?
    /// V1 top-level `auto_renew_status` ("true"/"false" on the wire) or V2 renewal info's status.
    public var autoRenewStatus: Bool?
    public var autoRenewProductId: String?
    public var autoRenewStatusChangeDateMs: Int64?
    /// V2 `data.status` (1 active ... 5 revoked), raw.
    public var status: Int?
    /// V1 top level: the subscription the top-level facts describe, and for CANCEL the cancelled
    /// purchase event and its time (R15). Apple documents `cancellation_date_ms`,
    /// `web_order_line_item_id` and `original_transaction_id` at the top level of a CANCEL body.
    /// https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv1
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var cancellationDateMs: Int64?
    public var cancellationReason: String?
    public var expirationIntent: String?
    /// R16: true on the events a V1 body makes for the *other* subscriptions of its
    /// `unified_receipt`: the type and top-level facts are not about them.
    public var aboutAnotherSubscription: Bool?
    /// V2 CONSUMPTION_REQUEST `data.consumptionRequestReason` (UNINTENDED_PURCHASE, ...), raw.
    public var consumptionRequestReason: String?

    public init(type: String, subtype: String? = nil, uuid: String? = nil, signedDateMs: Int64? = nil,
                autoRenewStatus: Bool? = nil, autoRenewProductId: String? = nil,
                autoRenewStatusChangeDateMs: Int64? = nil, status: Int? = nil, originalTransactionId: String? = nil,
                webOrderLineItemId: String? = nil, cancellationDateMs: Int64? = nil, cancellationReason: String? = nil,
                expirationIntent: String? = nil, aboutAnotherSubscription: Bool? = nil, consumptionRequestReason: String? = nil) {
        self.consumptionRequestReason = consumptionRequestReason
        self.type = type
        self.subtype = subtype
        self.uuid = uuid
        self.signedDateMs = signedDateMs
        self.autoRenewStatus = autoRenewStatus
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatusChangeDateMs = autoRenewStatusChangeDateMs
        self.status = status
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.cancellationDateMs = cancellationDateMs
        self.cancellationReason = cancellationReason
        self.expirationIntent = expirationIntent
        self.aboutAnotherSubscription = aboutAnotherSubscription
    }

    /// What the events for the other subscriptions of a V1 body keep (R16): the type, for the cause.
    public var forAnotherSubscription: NotificationMeta {
        NotificationMeta(type: type, subtype: subtype, uuid: uuid, signedDateMs: signedDateMs, aboutAnotherSubscription: true)
    }
}

/// One transaction as Apple reported it, with every field the later stages and finance need (R10).
public struct TransactionFacts: Codable, Sendable, Equatable {
    /// New for every renewal and every restore on a new device: never the identity of a purchase (R1).
    /// https://developer.apple.com/documentation/appstorereceipts/transaction_id
    public var transactionId: String
    public var originalTransactionId: String
    /// Stable per purchase event across devices (auto-renewables only).
    public var webOrderLineItemId: String?
    public var productId: String
    public var bundleId: String?
    /// When Apple charged; the identity uses it at second precision (R1, S14).
    public var purchaseDateMs: Int64
    public var originalPurchaseDateMs: Int64?
    public var expiresDateMs: Int64?
    /// V1 `cancellation_date_ms` / V2 `revocationDate`: refund, revoke, or the moment of an upgrade (R3).
    public var cancellationDateMs: Int64?
    /// "1" = an issue in the app, "0" = other (V1 `cancellation_reason`, V2 `revocationReason`), raw.
    public var cancellationReason: String?
    public var isUpgraded: Bool?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var promotionalOfferId: String?
    public var offerCodeRefName: String?
    /// V2 offerType raw (1 intro, 2 promotional, 3 offer code, 4 win-back) and offerIdentifier.
    public var offerType: Int?
    public var offerIdentifier: String?
    public var offerDiscountType: String?
    public var quantity: Int
    /// V2 `type` ("Auto-Renewable Subscription", "Consumable", ...), raw; nil when Apple did not say.
    public var productType: String?
    public var inAppOwnershipType: String?
    public var subscriptionGroupIdentifier: String?
    public var appAccountToken: String?
    public var storefront: String?
    public var transactionReason: String?
    /// Price in milli-units and ISO currency (V2 only).
    public var price: Int64?
    public var currency: String?
    public var revocationType: String?
    /// V2 `revocationPercentage` for REFUND_PRORATED, in thousandths of a percent (50000 = 50%).
    public var revocationPercentage: Int?
    /// V2 `offerPeriod` (ISO 8601 duration of the offer, e.g. "P1M"), for finance (R10).
    public var offerPeriod: String?
    public var storefrontId: String?
    /// V2 `appTransactionId` (the app download's id) and `billingPlanType` (how a subscription is
    /// billed, e.g. monthly payments for a yearly commitment), raw: kept for support and finance (R19).
    public var appTransactionId: String?
    public var billingPlanType: String?
    /// V2 `commitmentInfo`: which billing period of a commitment this charge is (R10, R19).
    public var commitmentInfo: CommitmentInfo?

    public init(transactionId: String, originalTransactionId: String, webOrderLineItemId: String? = nil,
                productId: String, bundleId: String? = nil, purchaseDateMs: Int64,
                originalPurchaseDateMs: Int64? = nil, expiresDateMs: Int64? = nil,
                cancellationDateMs: Int64? = nil, cancellationReason: String? = nil, isUpgraded: Bool? = nil,
                isTrialPeriod: Bool? = nil, isInIntroOfferPeriod: Bool? = nil, promotionalOfferId: String? = nil,
                offerCodeRefName: String? = nil, offerType: Int? = nil, offerIdentifier: String? = nil,
                offerDiscountType: String? = nil, quantity: Int = 1, productType: String? = nil,
                inAppOwnershipType: String? = nil, subscriptionGroupIdentifier: String? = nil,
                appAccountToken: String? = nil, storefront: String? = nil, transactionReason: String? = nil,
                price: Int64? = nil, currency: String? = nil, revocationType: String? = nil,
                revocationPercentage: Int? = nil, offerPeriod: String? = nil, storefrontId: String? = nil,
                appTransactionId: String? = nil, billingPlanType: String? = nil, commitmentInfo: CommitmentInfo? = nil) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.productId = productId
        self.bundleId = bundleId
        self.purchaseDateMs = purchaseDateMs
        self.originalPurchaseDateMs = originalPurchaseDateMs
        self.expiresDateMs = expiresDateMs
        self.cancellationDateMs = cancellationDateMs
        self.cancellationReason = cancellationReason
        self.isUpgraded = isUpgraded
        self.isTrialPeriod = isTrialPeriod
        self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.promotionalOfferId = promotionalOfferId
        self.offerCodeRefName = offerCodeRefName
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.offerDiscountType = offerDiscountType
        self.quantity = quantity
        self.productType = productType
        self.inAppOwnershipType = inAppOwnershipType
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.appAccountToken = appAccountToken
        self.storefront = storefront
        self.transactionReason = transactionReason
        self.price = price
        self.currency = currency
        self.revocationType = revocationType
        self.revocationPercentage = revocationPercentage
        self.offerPeriod = offerPeriod
        self.storefrontId = storefrontId
        self.appTransactionId = appTransactionId
        self.billingPlanType = billingPlanType
        self.commitmentInfo = commitmentInfo
    }
}

/// Renewal state of a subscription (V1 pending_renewal_info / V2 signedRenewalInfo).
public struct RenewalFacts: Codable, Sendable, Equatable {
    public var originalTransactionId: String
    public var productId: String?
    /// The product that renews next: differs from `productId` for a pending crossgrade/downgrade (R5).
    public var autoRenewProductId: String?
    public var autoRenewStatus: Bool?
    public var expirationIntent: String?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDateMs: Int64?
    public var priceIncreaseStatus: String?
    public var appAccountToken: String?
    /// V2: when the subscription renews next, and at what price (milli-units) and currency.
    public var renewalDateMs: Int64?
    public var renewalPrice: Int64?
    public var currency: String?
    /// V2: the offer that applies at the next renewal (raw `offerType`, `offerIdentifier`).
    public var offerType: Int?
    public var offerIdentifier: String?

    public init(originalTransactionId: String, productId: String? = nil, autoRenewProductId: String? = nil,
                autoRenewStatus: Bool? = nil, expirationIntent: String? = nil, isInBillingRetryPeriod: Bool? = nil,
                gracePeriodExpiresDateMs: Int64? = nil, priceIncreaseStatus: String? = nil,
                appAccountToken: String? = nil, renewalDateMs: Int64? = nil, renewalPrice: Int64? = nil,
                currency: String? = nil, offerType: Int? = nil, offerIdentifier: String? = nil) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatus = autoRenewStatus
        self.expirationIntent = expirationIntent
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.gracePeriodExpiresDateMs = gracePeriodExpiresDateMs
        self.priceIncreaseStatus = priceIncreaseStatus
        self.appAccountToken = appAccountToken
        self.renewalDateMs = renewalDateMs
        self.renewalPrice = renewalPrice
        self.currency = currency
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
    }
}
