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
            webOrderLineItemId: f.string("web_order_line_item_id"),
            productId: productId, bundleId: f.string("bid") ?? bundleId,
            purchaseDateMs: purchase,
            originalPurchaseDateMs: f.int64("original_purchase_date_ms"),
            expiresDateMs: expires,
            cancellationDateMs: f.int64("cancellation_date_ms"),
            cancellationReason: f.string("cancellation_reason"),
            isUpgraded: f.bool("is_upgraded"),
            isTrialPeriod: f.bool("is_trial_period"),
            isInIntroOfferPeriod: f.bool("is_in_intro_offer_period"),
            promotionalOfferId: f.string("promotional_offer_id"),
            offerCodeRefName: f.string("offer_code_ref_name"),
            quantity: f.int("quantity") ?? 1,
            inAppOwnershipType: f.string("in_app_ownership_type"),
            subscriptionGroupIdentifier: f.string("subscription_group_identifier"),
            appAccountToken: f.string("app_account_token"))
    }

    static func renewal(_ f: JSONFields) -> RenewalFacts? {
        guard let original = f.string("original_transaction_id") else { return nil }
        return RenewalFacts(
            originalTransactionId: original, productId: f.string("product_id"),
            autoRenewProductId: f.string("auto_renew_product_id"), autoRenewStatus: f.bool("auto_renew_status"),
            expirationIntent: f.string("expiration_intent"), isInBillingRetryPeriod: f.bool("is_in_billing_retry_period"),
            gracePeriodExpiresDateMs: f.int64("grace_period_expires_date_ms"),
            priceIncreaseStatus: f.string("price_increase_status"))
    }
}
