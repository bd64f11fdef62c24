import Foundation

/// V1 notification bodies for tests in Apple's post-2021 shape (APPLE-REFERENCE: string fields,
/// `environment` "PROD", `auto_renew_status` "true"/"false" at the top and "1"/"0" in
/// `pending_renewal_info`, the transactions in `unified_receipt.latest_receipt_info`): a renewal is
/// the same body with `DID_RENEW` and one more transaction.
enum V1Bodies {
    static let month: Int64 = 2_592_000_000
    static let bundleId = "com.example.storeledger.v1"
    static let productId = "com.example.storeledger.pro.1month"

    /// An INITIAL_BUY of a one-month subscription bought 2020-06-27T00:02:39Z, every field a
    /// string as Apple sends it. The ids are placeholders that `initialBuy` renames.
    static func template() -> [String: Any] {
        let purchaseMs: Int64 = 1_593_216_159_000
        let expiresMs = purchaseMs + month
        let transaction: [String: Any] = [
            "expires_date": ScenarioBodies.appleDate(expiresMs), "expires_date_ms": String(expiresMs),
            "is_in_intro_offer_period": "false", "is_trial_period": "false",
            "original_purchase_date": ScenarioBodies.appleDate(purchaseMs + 3000), "original_purchase_date_ms": String(purchaseMs + 3000),
            "original_transaction_id": "000000000000000", "product_id": productId,
            "purchase_date": ScenarioBodies.appleDate(purchaseMs), "purchase_date_ms": String(purchaseMs),
            "quantity": "1", "subscription_group_identifier": "20000001", "transaction_id": "000000000000000",
            "web_order_line_item_id": "000000000000000",
        ]
        return [
            "auto_renew_product_id": productId, "auto_renew_status": "true", "bid": bundleId, "bvrs": "1.0",
            "environment": "PROD", "notification_type": "INITIAL_BUY", "password": "storeledger-test-secret",
            "unified_receipt": [
                "environment": "Production", "latest_receipt": Data("storeledger test receipt".utf8).base64EncodedString(),
                "latest_receipt_info": [transaction],
                "pending_renewal_info": [["auto_renew_product_id": productId, "auto_renew_status": "1",
                                          "original_transaction_id": "000000000000000", "product_id": productId]],
                "status": 0,
            ] as [String: Any],
        ]
    }

    /// The template with its subscription renamed, so tests never share state.
    static func initialBuy(originalTransactionId: String) throws -> [String: Any] {
        var body = template()
        var unified = body["unified_receipt"] as! [String: Any]
        var latest = unified["latest_receipt_info"] as! [[String: Any]]
        latest[0]["original_transaction_id"] = originalTransactionId
        latest[0]["transaction_id"] = originalTransactionId
        latest[0]["web_order_line_item_id"] = originalTransactionId + "1"
        unified["latest_receipt_info"] = latest
        var pending = unified["pending_renewal_info"] as! [[String: Any]]
        pending[0]["original_transaction_id"] = originalTransactionId
        unified["pending_renewal_info"] = pending
        body["unified_receipt"] = unified
        return body
    }

    /// The next month's renewal: a new transaction whose period starts where the previous ended.
    static func didRenew(after initial: [String: Any], transactionId: String) -> [String: Any] {
        var body = initial
        body["notification_type"] = "DID_RENEW"
        var unified = body["unified_receipt"] as! [String: Any]
        var latest = unified["latest_receipt_info"] as! [[String: Any]]
        var renewal = latest.last!
        let start = Int64(renewal["expires_date_ms"] as! String)!
        renewal["transaction_id"] = transactionId
        renewal["web_order_line_item_id"] = transactionId + "1"
        renewal["purchase_date_ms"] = String(start)
        renewal["expires_date_ms"] = String(start + month)
        latest.append(renewal)
        unified["latest_receipt_info"] = latest
        body["unified_receipt"] = unified
        return body
    }

    static func data(_ body: [String: Any]) throws -> Data {
        try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
    }
}
