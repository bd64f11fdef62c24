import Crypto
import Foundation
import TestSupport

/// Apple inputs for the scenario tests (S1–S15), built in Apple's shapes: V1 bodies from
/// `V1Bodies.template()` (post-2021 `unified_receipt` shape, string fields, the environment a parameter,
/// `auto_renew_status` "true"/"false" at the top and "1"/"0" in `pending_renewal_info`), V2 bodies
/// signed with the generated Apple-shaped chain (TestSupport.GeneratedPKI, strict-valid X.509).
enum ScenarioBodies {
    static let bundleId = "com.example.scenarios"
    static let day: Int64 = 86_400_000
    static let month: Int64 = 30 * day
    /// 2024-03-01T00:00:00Z: inside the generated chain's validity (2020–2040), so V2 signed dates at
    /// scenario time verify.
    static let t0: Int64 = 1_709_251_200_000

    /// One transaction as the scenario states it.
    struct Tx {
        var id: String
        var otid: String
        var product = "vip.standard.1m"
        var purchaseMs: Int64
        var expiresMs: Int64?
        var web: String?
        var cancelMs: Int64?
        var cancelReason: String?
        var upgraded: Bool?
        var token: String?
        var trial = false

        /// A subscription period `[start, start + length)` with a web order id derived from `id`.
        static func period(_ id: String, otid: String, product: String = "vip.standard.1m", start: Int64,
                           length: Int64 = ScenarioBodies.month, token: String? = nil) -> Tx {
            Tx(id: id, otid: otid, product: product, purchaseMs: start, expiresMs: start + length, web: "9\(id)", token: token)
        }

        func cancelled(at ms: Int64, reason: String? = nil, upgraded: Bool? = nil) -> Tx {
            var copy = self
            copy.cancelMs = ms
            copy.cancelReason = reason
            copy.upgraded = upgraded
            return copy
        }
    }

    // MARK: V1

    static func template() throws -> (body: [String: Any], transaction: [String: Any]) {
        let body = V1Bodies.template()
        let unified = body["unified_receipt"] as! [String: Any]
        return (body, (unified["latest_receipt_info"] as! [[String: Any]])[0])
    }

    /// A V1 notification of `type` for subscription `otid`: `transactions` go to
    /// `unified_receipt.latest_receipt_info`, the renewal facts to `pending_renewal_info`. Sandbox by
    /// default, like the V2 bodies and the stub's receipts: environments never merge (R18), so one
    /// scenario's inputs share one (`"PROD"` is the V1 spelling of Production).
    static func v1(_ type: String, otid: String, _ transactions: [Tx], autoRenew: Bool? = true, autoRenewProduct: String? = nil,
                   statusChangeMs: Int64? = nil, billingRetry: Bool? = nil, graceUntilMs: Int64? = nil,
                   environment: String = "Sandbox") throws -> [String: Any] {
        var (body, template) = try template()
        body.removeValue(forKey: "latest_receipt_info")   // the post-2021 shape
        body.removeValue(forKey: "latest_receipt")
        body["notification_type"] = type
        body["bid"] = bundleId
        body["environment"] = environment
        let latest = transactions.max { $0.purchaseMs < $1.purchaseMs }
        let renewsAs = autoRenewProduct ?? latest?.product
        if let autoRenew { body["auto_renew_status"] = autoRenew ? "true" : "false" } else { body.removeValue(forKey: "auto_renew_status") }
        if let renewsAs { body["auto_renew_product_id"] = renewsAs } else { body.removeValue(forKey: "auto_renew_product_id") }
        if let statusChangeMs {
            body["auto_renew_status_change_date_ms"] = String(statusChangeMs)
            body["auto_renew_status_change_date"] = appleDate(statusChangeMs)
        }
        var unified = body["unified_receipt"] as! [String: Any]
        unified["latest_receipt_info"] = transactions.map { receiptInfo($0, template: template) }
        var pending: [String: Any] = ["original_transaction_id": otid]
        if let latest { pending["product_id"] = latest.product }
        if let renewsAs { pending["auto_renew_product_id"] = renewsAs }
        if let autoRenew { pending["auto_renew_status"] = autoRenew ? "1" : "0" }
        if let billingRetry { pending["is_in_billing_retry_period"] = billingRetry ? "1" : "0" }
        if let graceUntilMs { pending["grace_period_expires_date_ms"] = String(graceUntilMs) }
        unified["pending_renewal_info"] = [pending]
        body["unified_receipt"] = unified
        return body
    }

    /// One `latest_receipt_info` entry in Apple's string-typed JSON.
    static func receiptInfo(_ t: Tx, template: [String: Any]) -> [String: Any] {
        var info = template
        for key in info.keys where key.hasSuffix("_date") || key.hasSuffix("_pst") { info.removeValue(forKey: key) }
        info["transaction_id"] = t.id
        info["original_transaction_id"] = t.otid
        info["product_id"] = t.product
        info["purchase_date_ms"] = String(t.purchaseMs)
        info["purchase_date"] = appleDate(t.purchaseMs)
        info["original_purchase_date_ms"] = String(t.purchaseMs)
        info["original_purchase_date"] = appleDate(t.purchaseMs)
        if let expires = t.expiresMs {
            info["expires_date_ms"] = String(expires)
            info["expires_date"] = appleDate(expires)
        } else {
            info.removeValue(forKey: "expires_date_ms")
        }
        if let web = t.web { info["web_order_line_item_id"] = web } else { info.removeValue(forKey: "web_order_line_item_id") }
        if let cancel = t.cancelMs {
            info["cancellation_date_ms"] = String(cancel)
            info["cancellation_date"] = appleDate(cancel)
        }
        if let reason = t.cancelReason { info["cancellation_reason"] = reason }
        if let upgraded = t.upgraded { info["is_upgraded"] = upgraded ? "true" : "false" }
        if let token = t.token { info["app_account_token"] = token }
        info["is_trial_period"] = t.trial ? "true" : "false"
        info["subscription_group_identifier"] = "21000001"
        return info
    }

    static func appleDate(_ ms: Int64) -> String { V1Notification.appleDate(ms) }

    static func data(_ body: [String: Any]) throws -> Data {
        try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
    }

    // MARK: receipt uploads (through the verifyReceipt stub)

    /// `POST /v1/receipts` body. The stub verifyReceipt server answers with the response carried in
    /// `receipt_data` (base64 JSON): a sandbox receipt, so production answers 21007 first (S13).
    static func receiptUpload(user: String?, _ transactions: [Tx], autoRenewProduct: String? = nil) throws -> Data {
        let (_, template) = try template()
        var latest = transactions.map { receiptInfo($0, template: template) }
        latest.sort { ($0["purchase_date_ms"] as! String) < ($1["purchase_date_ms"] as! String) }
        let otids = Set(transactions.map(\.otid)).sorted()
        let pending: [[String: Any]] = otids.compactMap { otid in
            guard let last = transactions.filter({ $0.otid == otid }).max(by: { $0.purchaseMs < $1.purchaseMs }),
                  last.expiresMs != nil else { return nil }
            return ["original_transaction_id": otid, "product_id": last.product,
                    "auto_renew_product_id": autoRenewProduct ?? last.product, "auto_renew_status": "1"]
        }
        let response: [String: Any] = [
            "status": 0, "environment": "Sandbox",
            "receipt": ["receipt_type": "ProductionSandbox", "bundle_id": bundleId, "in_app": latest],
            "latest_receipt_info": latest, "pending_renewal_info": pending,
        ]
        let receipt = try JSONSerialization.data(withJSONObject: response, options: [.sortedKeys]).base64EncodedString()
        var upload: [String: Any] = ["receipt_data": receipt]
        if let user { upload["user_id"] = user }
        return try JSONSerialization.data(withJSONObject: upload, options: [.sortedKeys])
    }

    // MARK: V2

    /// The generated chain's leaf; the decode worker trusts its root (strict X.509, Sandbox).
    struct V2Signer {
        let key: P256PrivateKey
        let x5c: [String]

        static func load() throws -> V2Signer {
            let chain = try GeneratedPKI.shared().chain
            return V2Signer(key: chain.leaf.key, x5c: chain.x5c)
        }

        func sign(_ payload: [String: Any]) throws -> String {
            try JWSSigner.signES256(header: ["alg": "ES256", "x5c": x5c], payload: payload, key: key)
        }

        /// `{"signedPayload": ...}` for a notification about `transaction` (and its renewal info).
        func notification(_ type: String, subtype: String? = nil, uuid: String = UUID().uuidString.lowercased(),
                          signedMs: Int64, transaction: Tx?, renewal: [String: Any]? = nil, revocationType: String? = nil,
                          offerType: Int? = nil, offerIdentifier: String? = nil) throws -> Data {
            var data: [String: Any] = ["environment": "Sandbox", "bundleId": ScenarioBodies.bundleId, "bundleVersion": "1.0", "status": 1]
            if let t = transaction {
                var payload: [String: Any] = [
                    "transactionId": t.id, "originalTransactionId": t.otid, "productId": t.product,
                    "bundleId": ScenarioBodies.bundleId, "purchaseDate": t.purchaseMs, "originalPurchaseDate": t.purchaseMs,
                    "quantity": 1, "type": t.expiresMs == nil ? "Non-Consumable" : "Auto-Renewable Subscription",
                    "inAppOwnershipType": "PURCHASED", "signedDate": signedMs, "environment": "Sandbox",
                    "transactionReason": "PURCHASE", "storefront": "USA", "storefrontId": "143441",
                    "subscriptionGroupIdentifier": "21000001",
                ]
                if let expires = t.expiresMs { payload["expiresDate"] = expires }
                if let web = t.web { payload["webOrderLineItemId"] = web }
                if let cancel = t.cancelMs { payload["revocationDate"] = cancel }
                if let reason = t.cancelReason { payload["revocationReason"] = Int(reason) ?? 0 }
                if let upgraded = t.upgraded { payload["isUpgraded"] = upgraded }
                if let token = t.token { payload["appAccountToken"] = token }
                if let revocationType { payload["revocationType"] = revocationType }
                if let offerType { payload["offerType"] = offerType }
                if let offerIdentifier { payload["offerIdentifier"] = offerIdentifier }
                data["signedTransactionInfo"] = try sign(payload)
            }
            if var renewal {
                renewal["signedDate"] = signedMs
                renewal["environment"] = "Sandbox"
                data["signedRenewalInfo"] = try sign(renewal)
            }
            var payload: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data,
                                          "version": "2.0", "signedDate": signedMs]
            if let subtype { payload["subtype"] = subtype }
            return Data(#"{"signedPayload":"\#(try sign(payload))"}"#.utf8)
        }

        static func renewal(otid: String, product: String, renewsAs: String? = nil, autoRenew: Bool = true,
                            billingRetry: Bool = false, graceUntilMs: Int64? = nil) -> [String: Any] {
            var info: [String: Any] = ["originalTransactionId": otid, "productId": product,
                                       "autoRenewProductId": renewsAs ?? product, "autoRenewStatus": autoRenew ? 1 : 0,
                                       "isInBillingRetryPeriod": billingRetry]
            if let graceUntilMs { info["gracePeriodExpiresDate"] = graceUntilMs }
            return info
        }
    }

    /// The catalog the scenario clusters' classify worker loads (docs/catalog.md).
    static let catalogJSON = """
    {
      "bundleId": "com.example.scenarios",
      "groups": [{ "id": "vip", "name": "VIP" }],
      "products": [
        { "id": "vip.premium.1m", "kind": "auto-renewable", "group": "vip", "level": 1, "durationDays": 30 },
        { "id": "vip.standard.1m", "kind": "auto-renewable", "group": "vip", "level": 2, "durationDays": 30 },
        { "id": "vip.plus.1m", "kind": "auto-renewable", "group": "vip", "level": 2, "durationDays": 30 },
        { "id": "vip.standard.3m", "kind": "auto-renewable", "group": "vip", "level": 2, "durationDays": 90 },
        { "id": "vip.basic.1m", "kind": "auto-renewable", "group": "vip", "level": 3, "durationDays": 30 },
        { "id": "coins.100", "kind": "consumable", "group": "coins", "credits": 100 },
        { "id": "lifetime", "kind": "non-consumable", "group": "lifetime" }
      ],
      "accounts": { "appAccountToken": "user-id", "transfer": "move" }
    }
    """

    /// Writes the catalog to a temporary file and returns the environment the cluster's workers
    /// need: the catalog, and decode trusting the generated root (Sandbox, strict) and verifying
    /// receipts through `verifyReceiptURL` (production first, then sandbox).
    static func clusterEnvironment(verifyReceiptURL: String) throws -> [String: String] {
        let catalog = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-catalog-\(UUID().uuidString).json")
        try Data(catalogJSON.utf8).write(to: catalog)
        return [
            "STORELEDGER_CATALOG": catalog.path,
            "STORELEDGER_APPLE_ROOTS": try GeneratedPKI.shared().rootPath, "STORELEDGER_BUNDLE_ID": bundleId,
            "STORELEDGER_ENVIRONMENT": "Sandbox", "STORELEDGER_X509_STRICT": "true",
            "STORELEDGER_VERIFY_RECEIPT_URLS": "\(verifyReceiptURL)/production/verifyReceipt,\(verifyReceiptURL)/sandbox/verifyReceipt",
        ]
    }
}
