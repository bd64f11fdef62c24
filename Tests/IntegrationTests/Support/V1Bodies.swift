import Foundation

/// V1 notification bodies for tests, derived from the real fixture shape
/// (notifications-v1/educreations/initial_buy.json): a renewal is the same body with
/// `DID_RENEW` and one more transaction in `unified_receipt.latest_receipt_info`.
enum V1Bodies {
    static let fixture = "notifications-v1/educreations/initial_buy.json"
    static let month: Int64 = 2_592_000_000

    /// The fixture with its subscription renamed, so tests never share state.
    static func initialBuy(originalTransactionId: String) throws -> [String: Any] {
        var body = try Fixtures.json(fixture)
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
        body.removeValue(forKey: "latest_receipt_info")   // keep only the post-2021 shape
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
