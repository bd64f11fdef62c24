import Domain

/// The JSON transaction and renewal fields shared by V1 notifications and verifyReceipt responses.
/// https://developer.apple.com/documentation/appstorereceipts/responsebody/latest_receipt_info
enum ReceiptFields {
    static func transaction(_ f: JSONFields, bundleId: String?) -> TransactionFacts? {
        guard let transactionId = f.string("transaction_id"), let productId = f.string("product_id"),
              let purchase = f.int64("purchase_date_ms") ?? f.int64("purchase_date") else { return nil }
        // iOS 6-era bodies put ms into `expires_date` itself.
        let expires = f.int64("expires_date_ms") ?? f.int64("expires_date")
        return TransactionFacts(
            transactionId: transactionId,
            originalTransactionId: f.string("original_transaction_id") ?? transactionId,
            webOrderLineItemId: f.nonEmptyString("web_order_line_item_id"),
            productId: productId, bundleId: f.nonEmptyString("bid") ?? bundleId,
            purchaseDateMs: purchase,
            originalPurchaseDateMs: f.int64("original_purchase_date_ms"),
            expiresDateMs: expires,
            cancellationDateMs: f.int64("cancellation_date_ms"),
            cancellationReason: f.nonEmptyString("cancellation_reason"),
            isUpgraded: f.bool("is_upgraded"),
            isTrialPeriod: f.bool("is_trial_period"),
            isInIntroOfferPeriod: f.bool("is_in_intro_offer_period"),
            promotionalOfferId: f.nonEmptyString("promotional_offer_id"),
            offerCodeRefName: f.nonEmptyString("offer_code_ref_name"),
            quantity: f.int("quantity") ?? 1,
            inAppOwnershipType: f.nonEmptyString("in_app_ownership_type"),
            subscriptionGroupIdentifier: f.nonEmptyString("subscription_group_identifier"),
            appAccountToken: f.nonEmptyString("app_account_token"))
    }

    /// The numeric fields the decoders read from these objects (STYLE.md practice 12).
    static let transactionNumbers = ["purchase_date_ms", "original_purchase_date_ms", "expires_date_ms",
                                     "cancellation_date_ms", "quantity"]
    static let renewalNumbers = ["grace_period_expires_date_ms"]
    static let transactionIds = ["transaction_id", "original_transaction_id", "product_id", "web_order_line_item_id",
                                 "promotional_offer_id", "offer_code_ref_name", "app_account_token", "subscription_group_identifier"]

    /// The first numeric field that does not hold a whole number within Int64, or id that is no text,
    /// as a decode failure.
    static func invalidField(transactions: [JSONFields], renewals: [JSONFields], in place: String) -> PermanentFailure? {
        for (index, object) in transactions.enumerated() {
            if let key = object.invalidNumber(transactionNumbers) { return invalidNumber("\(place) transaction \(index)", key) }
            if let key = object.invalidString(transactionIds) {
                return PermanentFailure("invalid_type", "\(place) transaction \(index): \(key) must be a string")
            }
        }
        for (index, object) in renewals.enumerated() {
            if let key = object.invalidNumber(renewalNumbers) { return invalidNumber("\(place) pending_renewal_info \(index)", key) }
        }
        return nil
    }

    static func invalidNumber(_ place: String, _ key: String) -> PermanentFailure {
        PermanentFailure("invalid_number", "\(place): \(key) is not a whole number within Int64")
    }

    static func renewal(_ f: JSONFields) -> RenewalFacts? {
        guard let original = f.string("original_transaction_id") else { return nil }
        return RenewalFacts(
            originalTransactionId: original, productId: f.nonEmptyString("product_id"),
            autoRenewProductId: f.nonEmptyString("auto_renew_product_id"), autoRenewStatus: f.bool("auto_renew_status"),
            expirationIntent: f.nonEmptyString("expiration_intent"), isInBillingRetryPeriod: f.bool("is_in_billing_retry_period"),
            gracePeriodExpiresDateMs: f.int64("grace_period_expires_date_ms"),
            priceIncreaseStatus: f.nonEmptyString("price_increase_status"))
    }
}
