import Domain
import Foundation

/// App Store Server Notifications V2: `{"signedPayload": "<JWS>"}`, verified as Apple's
/// `SignedDataVerifier` does, with the nested `signedTransactionInfo` / `signedRenewalInfo`
/// verified the same way. https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv2
public struct NotificationV2Decoder: Sendable {
    public let verifier: SignedDataVerifier

    public init(verifier: SignedDataVerifier) { self.verifier = verifier }

    /// One event: a V2 notification concerns at most one subscription (or none: TEST,
    /// RENEWAL_EXTENSION summaries, external purchase tokens, consent; those are keyed by app).
    /// `eventId` is `v2:<notificationUUID>`, the id Apple keeps across its retries.
    public func decode(body: [UInt8], receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<[AppleEvent], PermanentFailure> {
        guard let root = CompactJWS.jsonObject(body) else {
            return .failure(PermanentFailure("invalid_json", "V2 notification body is not a JSON object"))
        }
        guard let signedPayload = root["signedPayload"] as? String else {
            return .failure(PermanentFailure("missing_field", "V2 notification body has no signedPayload string"))
        }
        return decode(signedPayload: signedPayload, receivedAtMs: receivedAtMs, rawPosition: rawPosition).map { [$0] }
    }

    public func decode(signedPayload: String, receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<AppleEvent, PermanentFailure> {
        let notification: VerifiedSignedData
        switch verifier.verifyNotification(signedPayload) {
        case .success(let verified): notification = verified
        case .failure(let failure): return .failure(PermanentFailure(failure.status.rawValue, "signedPayload: \(failure.reason)"))
        }
        let payload = notification.fields
        guard let type = payload.string("notificationType"), !type.isEmpty else {
            return .failure(PermanentFailure("missing_field", "V2 notification has no notificationType"))
        }
        let data = payload.object("data")
        if let key = payload.invalidNumber(["signedDate"]) ?? data?.invalidNumber(["status"]) {
            return .failure(ReceiptFields.invalidNumber("signedPayload", key))
        }
        var transaction: TransactionFacts?
        var renewal: RenewalFacts?
        if let signed = data?.string("signedTransactionInfo") {
            switch V2Facts.verifiedTransaction(signed, verifier, what: "signedTransactionInfo") {
            case .failure(let failure): return .failure(failure)
            case .success(let read): transaction = read.facts
            }
        }
        if let signed = data?.string("signedRenewalInfo") {
            switch verifier.verifyRenewalInfo(signed) {
            case .failure(let failure):
                return .failure(PermanentFailure(failure.status.rawValue, "signedRenewalInfo: \(failure.reason)"))
            case .success(let verified):
                if let key = verified.fields.invalidNumber(V2Facts.renewalNumbers) {
                    return .failure(ReceiptFields.invalidNumber("signedRenewalInfo", key))
                }
                guard let facts = V2Facts.renewal(verified.fields) else {
                    return .failure(PermanentFailure("missing_field", "signedRenewalInfo lacks originalTransactionId"))
                }
                renewal = facts
            }
        }
        let app = data ?? payload.object("summary") ?? payload.object("externalPurchaseToken") ?? payload.object("appData")
        let bundleId = app?.string("bundleId") ?? transaction?.bundleId
        let uuid = payload.string("notificationUUID")
        let meta = NotificationMeta(
            type: type, subtype: payload.string("subtype"), uuid: uuid,
            signedDateMs: payload.int64("signedDate"),
            autoRenewStatus: renewal?.autoRenewStatus, autoRenewProductId: renewal?.autoRenewProductId,
            status: data?.int("status"), consumptionRequestReason: data?.string("consumptionRequestReason"))
        let original = transaction?.originalTransactionId ?? renewal?.originalTransactionId ?? "app:\(bundleId ?? verifier.bundleId)"
        let environment = notification.environment.rawValue
        let eventId = "v2:" + (uuid ?? EventDigest.hex(of: Array(signedPayload.utf8)))
        return .success(AppleEvent(
            eventId: eventId, source: .notificationV2, environment: environment, bundleId: bundleId,
            subscriptionKey: SubscriptionKey.make(originalTransactionId: original, environment: environment), notification: meta,
            transactions: transaction.map { [$0] } ?? [], renewalInfo: renewal,
            receivedAtMs: receivedAtMs, rawPosition: rawPosition))
    }
}

/// V2 JSON payloads → the normalized facts. https://developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload
enum V2Facts {
    /// Offer types (Apple `OfferType`): 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    static let introductoryOffer = 1, promotionalOffer = 2, offerCode = 3
    /// The numeric fields read from the signed payloads (STYLE.md practice 12).
    static let transactionNumbers = ["purchaseDate", "originalPurchaseDate", "expiresDate", "revocationDate", "quantity",
                                     "offerType", "price", "revocationPercentage", "signedDate"]
    static let renewalNumbers = ["gracePeriodExpiresDate", "renewalDate", "renewalPrice", "offerType", "signedDate"]

    static func transaction(_ f: JSONFields) -> TransactionFacts? {
        guard let transactionId = f.string("transactionId"), let productId = f.string("productId"),
              let purchase = f.int64("purchaseDate") else { return nil }
        let offerType = f.int("offerType")
        let discount = f.string("offerDiscountType")
        let offerId = f.string("offerIdentifier")
        // V2 has no is_trial_period / is_in_intro_offer_period: an introductory offer is a free
        // trial when its discount type says so, otherwise an intro price (as the receipt fields were).
        let isIntro = offerType == introductoryOffer
        // Payloads before offerDiscountType (2023) still tell a free trial by its price of 0 (R10).
        let freeTrial = discount.map { $0 == "FREE_TRIAL" } ?? f.int64("price").map { $0 == 0 }
        return TransactionFacts(
            transactionId: transactionId,
            originalTransactionId: f.string("originalTransactionId") ?? transactionId,
            webOrderLineItemId: f.string("webOrderLineItemId"),
            productId: productId, bundleId: f.string("bundleId"),
            purchaseDateMs: purchase,
            originalPurchaseDateMs: f.int64("originalPurchaseDate"),
            expiresDateMs: f.int64("expiresDate"),
            cancellationDateMs: f.int64("revocationDate"),
            cancellationReason: f.int("revocationReason").map(String.init) ?? f.string("revocationReason"),
            isUpgraded: f.bool("isUpgraded"),
            isTrialPeriod: isIntro ? freeTrial : false,
            isInIntroOfferPeriod: isIntro ? freeTrial.map { !$0 } ?? true : false,
            promotionalOfferId: offerType == promotionalOffer ? offerId : nil,
            offerCodeRefName: offerType == offerCode ? offerId : nil,
            offerType: offerType, offerIdentifier: offerId, offerDiscountType: discount,
            quantity: f.int("quantity") ?? 1,
            productType: f.string("type"),
            inAppOwnershipType: f.string("inAppOwnershipType"),
            subscriptionGroupIdentifier: f.string("subscriptionGroupIdentifier"),
            appAccountToken: f.string("appAccountToken"),
            storefront: f.string("storefront"),
            transactionReason: f.string("transactionReason"),
            price: f.int64("price"), currency: f.string("currency"),
            revocationType: f.string("revocationType"),
            revocationPercentage: f.int("revocationPercentage"),
            offerPeriod: f.string("offerPeriod"),
            storefrontId: f.string("storefrontId"),
            appTransactionId: f.string("appTransactionId"),
            billingPlanType: f.string("billingPlanType"),
            commitmentInfo: f.object("commitmentInfo").map(commitment))
    }

    /// The numbers of `commitmentInfo`; one of the wrong JSON type is left out (the object is optional
    /// detail for finance, not worth refusing a transaction for).
    static func commitment(_ f: JSONFields) -> CommitmentInfo {
        func number(_ key: String) -> Int64? { f.invalidNumber([key]) == nil ? f.int64(key) : nil }
        return CommitmentInfo(billingPeriodNumber: number("billingPeriodNumber").flatMap { Int(exactly: $0) },
                              totalBillingPeriods: number("totalBillingPeriods").flatMap { Int(exactly: $0) },
                              commitmentExpiresDateMs: number("commitmentExpiresDate"),
                              commitmentPrice: number("commitmentPrice"))
    }

    static func renewal(_ f: JSONFields) -> RenewalFacts? {
        guard let original = f.string("originalTransactionId") else { return nil }
        return RenewalFacts(
            originalTransactionId: original, productId: f.string("productId"),
            autoRenewProductId: f.string("autoRenewProductId"),
            autoRenewStatus: f.bool("autoRenewStatus"),
            expirationIntent: f.string("expirationIntent"),
            isInBillingRetryPeriod: f.bool("isInBillingRetryPeriod"),
            gracePeriodExpiresDateMs: f.int64("gracePeriodExpiresDate"),
            priceIncreaseStatus: f.string("priceIncreaseStatus"),
            appAccountToken: f.string("appAccountToken"),
            renewalDateMs: f.int64("renewalDate"), renewalPrice: f.int64("renewalPrice"),
            currency: f.string("currency"), offerType: f.int("offerType"),
            offerIdentifier: f.string("offerIdentifier"))
    }
}

extension V2Facts {
    /// A signed transaction verified with `verifier` and read, or the reason it is refused (`what`
    /// names it there): every path that takes one (notifications, Server API answers, StoreKit 2
    /// uploads) checks it alike.
    static func verifiedTransaction(_ signed: String, _ verifier: SignedDataVerifier,
                                    what: String) -> Result<(facts: TransactionFacts, verified: VerifiedSignedData), PermanentFailure> {
        switch verifier.verifyTransaction(signed) {
        case .failure(let failure):
            return .failure(PermanentFailure(failure.status.rawValue, "\(what): \(failure.reason)"))
        case .success(let verified):
            if let key = verified.fields.invalidNumber(transactionNumbers) { return .failure(ReceiptFields.invalidNumber(what, key)) }
            guard let facts = transaction(verified.fields) else {
                return .failure(PermanentFailure("missing_field", "\(what) lacks transactionId, productId or purchaseDate"))
            }
            return .success((facts, verified))
        }
    }
}
