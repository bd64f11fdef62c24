import Domain
import Foundation

/// App Store Server Notifications V1 (deprecated by Apple, still sent to apps that never moved).
/// Both body shapes: before 2021-03-10 the latest receipt info sits at the top level, after it only
/// inside `unified_receipt`. https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv1
public struct NotificationV1Decoder: Sendable {
    /// Shared secrets accepted in `password`; empty = no check (not for production).
    public var sharedSecrets: [String]

    public init(sharedSecrets: [String] = []) { self.sharedSecrets = sharedSecrets }

    /// One event per subscription mentioned in the body. `eventId` is derived from the raw bytes,
    /// since V1 bodies carry no notification id.
    public func decode(body: [UInt8], receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<[AppleEvent], PermanentFailure> {
        guard let parsed = try? JSONSerialization.jsonObject(with: Data(body)), let root = JSONFields(parsed) else {
            return .failure(PermanentFailure("invalid_json", "V1 notification body is not a JSON object"))
        }
        guard let type = root.string("notification_type"), !type.isEmpty else {
            return .failure(PermanentFailure("missing_field", "V1 notification has no notification_type"))
        }
        if !sharedSecrets.isEmpty {
            guard let password = root.string("password"),
                  sharedSecrets.contains(where: { constantTimeEquals($0, password) }) else {
                return .failure(PermanentFailure("invalid_shared_secret", "V1 notification password does not match any configured shared secret"))
            }
        }
        let unified = root.object("unified_receipt")
        let environment = normalizeEnvironment(root.string("environment") ?? unified?.string("environment"))
        let bundleId = root.nonEmptyString("bid")

        var transactionObjects = unified?.array("latest_receipt_info") ?? []
        // Pre-2021 shape: a single object (or array) at the top level, plus the expired variant.
        for key in ["latest_receipt_info", "latest_expired_receipt_info"] {
            if let single = root.object(key) { transactionObjects.append(single) }
            transactionObjects += root.array(key)
        }
        let renewalObjects = unified?.array("pending_renewal_info") ?? []
        if let failure = ReceiptFields.invalidField(transactions: transactionObjects, renewals: renewalObjects, in: "V1 \(type)") {
            return .failure(failure)
        }
        if let key = root.invalidNumber(["auto_renew_status_change_date_ms"]) {
            return .failure(ReceiptFields.invalidNumber("V1 \(type)", key))
        }
        let transactions = transactionObjects.compactMap { ReceiptFields.transaction($0, bundleId: bundleId) }
        let renewals = renewalObjects.compactMap(ReceiptFields.renewal)

        // Apple sends "" for top-level facts it leaves out (a consumable's REFUND, CONSUMPTION_REQUEST).
        let topLevel = root.nonEmptyString("original_transaction_id")
        // CANCEL's top-level facts (R15): https://developer.apple.com/documentation/appstoreservernotifications/cancellation_date_ms
        let meta = NotificationMeta(
            type: type, autoRenewStatus: root.bool("auto_renew_status"),
            autoRenewProductId: root.nonEmptyString("auto_renew_product_id"),
            autoRenewStatusChangeDateMs: root.int64("auto_renew_status_change_date_ms"),
            originalTransactionId: topLevel, webOrderLineItemId: root.nonEmptyString("web_order_line_item_id"),
            cancellationDateMs: root.int64("cancellation_date_ms"), cancellationReason: root.nonEmptyString("cancellation_reason"),
            expirationIntent: root.nonEmptyString("expiration_intent"))

        var keys = Set(transactions.map(\.originalTransactionId))
        keys.formUnion(renewals.map(\.originalTransactionId))
        if let topLevel { keys.insert(topLevel) }
        // A body about no subscription (a consumable's CONSUMPTION_REQUEST or REFUND: finished
        // consumables leave latest_receipt_info) is about the app, keyed like V2's app-level ones.
        if keys.isEmpty { keys.insert("app:\(bundleId ?? "unknown")") }
        let sortedKeys = keys.sorted()
        // Each subscription's purchases and renewal info, split once for the subject choice and the events.
        let purchasesByKey = Dictionary(grouping: transactions, by: \.originalTransactionId)
        let renewalByKey = Dictionary(renewals.map { ($0.originalTransactionId, $0) }) { first, _ in first }
        let candidates = sortedKeys.map { key in
            let purchases = purchasesByKey[key] ?? []
            return V1BodySubject.Candidate(originalTransactionId: key,
                                           renewsAs: renewalByKey[key]?.autoRenewProductId,
                                           latestProduct: purchases.max { $0.purchaseDateMs < $1.purchaseDateMs }?.productId,
                                           webOrderLineItemIds: Set(purchases.compactMap(\.webOrderLineItemId)))
        }
        let subject = V1BodySubject.of(topLevelOriginalTransactionId: topLevel, autoRenewProductId: meta.autoRenewProductId,
                                       webOrderLineItemId: meta.webOrderLineItemId, candidates: candidates)
        let digest = EventDigest.hex(of: body)
        // R14: a subscription the body lists with its pending_renewal_info alone carries no date of its
        // own. Apple stated it no earlier than the latest date the body carries; our receive time would
        // outrank every later statement Apple signs about it.
        let bodyDate = ([meta.autoRenewStatusChangeDateMs, meta.cancellationDateMs]
            + transactions.flatMap { [$0.purchaseDateMs, $0.cancellationDateMs] }).compactMap { $0 }.max()
        let events = sortedKeys.map { key in
            let own = purchasesByKey[key] ?? []
            return AppleEvent(eventId: "v1:\(digest):\(key)", source: .notificationV1, environment: environment,
                              bundleId: bundleId,
                              subscriptionKey: SubscriptionKey.make(originalTransactionId: key, environment: environment),
                              notification: key == subject ? meta : meta.forAnotherSubscription,
                              transactions: own, renewalInfo: renewalByKey[key],
                              receivedAtMs: receivedAtMs, rawPosition: rawPosition,
                              statedAtMs: key != subject && own.isEmpty ? bodyDate : nil)
        }
        return .success(events)
    }
}

/// "PROD" (V1 body), "Production", "Sandbox", "Xcode", "LocalTesting"; unknown kept raw.
func normalizeEnvironment(_ raw: String?) -> String {
    switch raw?.lowercased() {
    case "prod", "production": return "Production"
    case "sandbox": return "Sandbox"
    case "xcode": return "Xcode"
    case "localtesting": return "LocalTesting"
    case nil: return "Production"
    default: return raw!
    }
}

/// Compares secrets without an early exit, so response time does not reveal a matching prefix.
func constantTimeEquals(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8), y = Array(b.utf8)
    var difference = UInt8(x.count == y.count ? 0 : 1)
    for i in 0..<max(x.count, y.count) {
        difference |= (i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0)
    }
    return difference == 0
}
