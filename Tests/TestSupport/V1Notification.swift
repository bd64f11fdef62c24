import Foundation

/// App Store Server Notifications V1 bodies in Apple's post-2021 shape (string fields, environment
/// "PROD", `auto_renew_status` "true"/"false" at the top and "1"/"0" in `pending_renewal_info`, the
/// transactions in `unified_receipt.latest_receipt_info`), written from Apple's documented fields.
public enum V1Notification {
    public static let month: Int64 = 2_592_000_000

    /// A notification of `type` for a one-month subscription bought at `purchaseMs`
    /// (default 2020-06-27T00:02:39Z), whose transaction id is its original transaction id.
    public static func body(type: String = "INITIAL_BUY", originalTransactionId: String = "000000000000000",
                            bundleId: String = "com.example.storeledger.v1", productId: String = "com.example.storeledger.pro.1month",
                            purchaseMs: Int64 = 1_593_216_159_000, password: String = "storeledger-test-secret") -> [String: Any] {
        let expiresMs = purchaseMs + month
        let transaction: [String: Any] = [
            "expires_date": appleDate(expiresMs), "expires_date_ms": String(expiresMs),
            "is_in_intro_offer_period": "false", "is_trial_period": "false",
            "original_purchase_date": appleDate(purchaseMs + 3000), "original_purchase_date_ms": String(purchaseMs + 3000),
            "original_transaction_id": originalTransactionId, "product_id": productId,
            "purchase_date": appleDate(purchaseMs), "purchase_date_ms": String(purchaseMs),
            "quantity": "1", "subscription_group_identifier": "20000001", "transaction_id": originalTransactionId,
            "web_order_line_item_id": originalTransactionId + "1",
        ]
        let unified: [String: Any] = [
            "environment": "Production", "latest_receipt": Data("storeledger test receipt".utf8).base64EncodedString(),
            "latest_receipt_info": [transaction],
            "pending_renewal_info": [["auto_renew_product_id": productId, "auto_renew_status": "1",
                                      "original_transaction_id": originalTransactionId, "product_id": productId]],
            "status": 0,
        ]
        return ["auto_renew_product_id": productId, "auto_renew_status": "true", "bid": bundleId, "bvrs": "1.0",
                "environment": "PROD", "notification_type": type, "password": password, "unified_receipt": unified]
    }

    /// Apple's `"2020-06-27 00:02:39 Etc/GMT"`.
    public static func appleDate(_ ms: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) + " Etc/GMT"
    }

    public static func data(_ body: [String: Any]) throws -> Data {
        try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
    }
}
