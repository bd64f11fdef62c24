import Foundation
import TestSupport

/// V1 notification bodies for tests (TestSupport.V1Notification, Apple's post-2021 shape): a
/// renewal is the same body with `DID_RENEW` and one more transaction.
enum V1Bodies {
    static let month = V1Notification.month

    static func template() -> [String: Any] { V1Notification.body() }

    /// An INITIAL_BUY of its own subscription, so tests never share state.
    static func initialBuy(originalTransactionId: String) throws -> [String: Any] {
        V1Notification.body(originalTransactionId: originalTransactionId)
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
