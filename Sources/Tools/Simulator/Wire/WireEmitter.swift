import Crypto
import Domain
import Foundation
import Synchronization

/// Turns the store's state into what Apple and apps put on the wire, byte for byte as they do:
/// PKCS#7 app receipts (uploaded by the app with its user id), V1 notification bodies (both
/// shapes, "PROD"/"Sandbox", string booleans) and V2 `signedPayload` JWS with nested signed
/// transaction and renewal info, `x5c` = leaf, intermediate, root.
public final class WireEmitter: Sendable {
    public let pki: SimulatorPKI
    public let config: StoreConfig
    /// How many transactions (newest first) a V1 body's `latest_receipt_info` lists. Apple sends
    /// the whole history; a cap keeps a 100,000-user run's traffic bounded.
    public let v1HistoryLimit: Int
    private let counter = Atomic<Int64>(0)
    /// The JWS header with `x5c`, encoded once (base64 of three certificates is not free).
    private let encodedHeader: String

    public init(pki: SimulatorPKI, config: StoreConfig, v1HistoryLimit: Int = 6) {
        self.pki = pki
        self.encodedHeader = Base64URL.encode(JSONText.encode(["alg": "ES256", "x5c": pki.chain.x5c] as [String: Any]))
        self.config = config
        self.v1HistoryLimit = v1HistoryLimit
    }

    // MARK: receipts

    public struct UploadOptions: Sendable {
        /// Show restored copies' ids (the new device's receipt, S1).
        public var restoredIds = false
        /// Leave out the client's optional fields (R7: `transaction_date` is sometimes nil on the device).
        public var omitOptionalFields = false
        /// Forget `receipt_data` altogether: ingest must refuse it (400).
        public var omitReceiptData = false
        /// The app prints the account's UUID in upper case (StoreKit's tokens are lower case, R17).
        public var upperCaseUserId = false
        public init(restoredIds: Bool = false, omitOptionalFields: Bool = false, omitReceiptData: Bool = false,
                    upperCaseUserId: Bool = false) {
            self.restoredIds = restoredIds
            self.omitOptionalFields = omitOptionalFields
            self.omitReceiptData = omitReceiptData
            self.upperCaseUserId = upperCaseUserId
        }
    }

    /// The Apple ID's app receipt at `atMs`: every purchase it made in this app (finished
    /// consumables excepted), base64 PKCS#7.
    public func receipt(_ state: StoreState, user userId: String, appleId index: Int, atMs: Int64, restoredIds: Bool = false) throws -> String {
        let user = try state.user(userId)
        let appleId = user.appleIds[index]
        var entries: [InAppEntry] = []
        for (_, transactions) in state.receiptContents(user: userId, appleId: index, atMs: atMs) {
            for t in transactions {
                entries.append(InAppEntry(
                    productId: t.productId, transactionId: restoredIds ? (t.restoredIds.last ?? t.transactionId) : t.transactionId,
                    originalTransactionId: t.originalTransactionId, purchaseMs: t.purchaseMs, originalPurchaseMs: t.originalPurchaseMs,
                    expiresMs: t.expiresMs, isSubscription: t.kind == .autoRenewable,
                    webOrderLineItemId: t.webOrderLineItemId.flatMap { Int64($0) },
                    cancellationMs: t.cancellationMs.flatMap { $0 <= atMs ? $0 : nil },
                    isTrialPeriod: t.offer == .freeTrial, isInIntroOfferPeriod: t.offer == .introPrice,
                    promotionalOfferId: { if case .promotional(let id) = t.offer { return id } else { return nil } }()))
            }
        }
        entries.sort { $0.purchaseMs < $1.purchaseMs }
        let opaque = Array(SHA256.hash(Array("\(appleId.id)/\(appleId.devices)/\(atMs)".utf8)).prefix(16))
        let device = Array(SHA256.hash(Array("device:\(appleId.id)/\(appleId.devices)".utf8)).prefix(16))
        let bundleDER = DER.utf8String(config.bundleId)
        let payload = ReceiptPayload(
            receiptType: appleId.environment == .production ? "Production" : "ProductionSandbox",
            appItemId: appleId.environment == .production ? config.appAppleId : 0,
            bundleId: config.bundleId, appVersion: config.bundleVersion, originalAppVersion: "1.0",
            opaqueValue: opaque, sha1Hash: SHA1.hash(device + opaque + bundleDER), creationMs: atMs,
            originalPurchaseMs: entries.first?.purchaseMs ?? atMs, inApp: entries)
        return Base64.encode(try pki.receiptSigner.sign(ReceiptEncoder.payload(payload)))
    }

    /// The app's POST /v1/receipts after a purchase, a renewal it noticed, or a restore.
    public func receiptUpload(_ state: StoreState, user userId: String, appleId index: Int, atMs: Int64,
                              focus: SimTransaction? = nil, options: UploadOptions = UploadOptions()) throws -> Delivery {
        let user = try state.user(userId)
        // The account signed in on this Apple ID's device posts it: the user's own, or the one they restored on (R6).
        let account = user.appleIds[index].appAccount ?? userId
        var body: [String: Any] = ["user_id": options.upperCaseUserId ? account.uppercased() : account]
        if !options.omitReceiptData {
            body["receipt_data"] = try receipt(state, user: userId, appleId: index, atMs: atMs, restoredIds: options.restoredIds)
        }
        if let focus, !options.omitOptionalFields {
            body["product_id"] = focus.productId
            body["transaction_id"] = options.restoredIds ? (focus.restoredIds.last ?? focus.transactionId) : focus.transactionId
            body["transaction_date"] = focus.purchaseMs
            body["app_version"] = config.bundleVersion
        }
        let label = "upload \(user.appleIds[index].id)\(account == userId ? "" : " as account \(account)")\(options.restoredIds ? " (restored device)" : "")\(focus.map { " after \($0.productId) txn \($0.transactionId)" } ?? "")\(options.omitReceiptData ? " WITHOUT receipt_data" : "")"
        return Delivery(channel: .receiptUpload, body: try json(body), simMs: atMs, userId: userId, label: label,
                        environment: user.appleIds[index].environment, expectsRejection: options.omitReceiptData)
    }

    // MARK: V1

    public struct V1Options: Sendable {
        /// The transaction a CANCEL/REFUND is about (its cancellation fields go top level).
        public var focus: SimTransaction?
        /// The pre-2021-03-10 shape: top-level `latest_receipt(_info)` next to `unified_receipt`.
        public var legacyShape = false
        public var expirationIntent: String?
        /// A CANCEL whose `latest_receipt_info` still shows the focus uncancelled: the cancellation is
        /// only at the top level, where Apple documents it (R15).
        public var cancellationOnlyAtTopLevel = false
        /// `unified_receipt` lists every auto-renewable subscription of the Apple ID, as Apple's does;
        /// the top-level facts stay about `otid` (R16).
        public var everySubscription = false
        public init(focus: SimTransaction? = nil, legacyShape: Bool = false, expirationIntent: String? = nil,
                    cancellationOnlyAtTopLevel: Bool = false, everySubscription: Bool = false) {
            self.focus = focus
            self.legacyShape = legacyShape
            self.expirationIntent = expirationIntent
            self.cancellationOnlyAtTopLevel = cancellationOnlyAtTopLevel
            self.everySubscription = everySubscription
        }
    }

    public func v1(_ state: StoreState, otid: String, type: String, atMs: Int64, options: V1Options = V1Options()) throws -> Delivery {
        let subscription = try state.subscription(otid)
        let production = subscription.environment == .production
        let transactions = subscription.transactions.filter { $0.purchaseMs <= atMs }
        var listed = Array(transactions.suffix(v1HistoryLimit).reversed())
        if let focus = options.focus, !listed.contains(where: { $0.transactionId == focus.transactionId }) { listed.append(focus) }
        var pending = subscription.kind == .autoRenewable ? [v1Renewal(subscription, atMs: atMs)] : []
        if options.everySubscription {
            let others = state.subscriptions(ofUser: subscription.userId, appleId: subscription.appleIdIndex)
                .filter { $0.originalTransactionId != otid && $0.kind == .autoRenewable }
                .sorted { $0.originalTransactionId < $1.originalTransactionId }
            for other in others {
                let theirs = other.transactions.filter { $0.purchaseMs <= atMs }
                guard !theirs.isEmpty else { continue }
                listed += theirs.suffix(v1HistoryLimit).reversed()
                pending.append(v1Renewal(other, atMs: atMs))
            }
        }
        let latestReceipt = try receipt(state, user: subscription.userId, appleId: subscription.appleIdIndex, atMs: atMs)
        var body: [String: Any] = [
            "notification_type": type,
            "password": config.sharedSecret,
            "environment": production ? "PROD" : "Sandbox",
            "bid": config.bundleId,
            "bvrs": config.bundleVersion,
            "original_transaction_id": otid,
            "unified_receipt": [
                "status": 0,
                "environment": production ? "Production" : "Sandbox",
                "latest_receipt": latestReceipt,
                "latest_receipt_info": listed.map { t in
                    var entry = v1Transaction(t)
                    if options.cancellationOnlyAtTopLevel, t.transactionId == options.focus?.transactionId {
                        for key in ["cancellation_date", "cancellation_date_ms", "cancellation_date_pst", "cancellation_reason"] {
                            entry.removeValue(forKey: key)
                        }
                    }
                    return entry
                },
                "pending_renewal_info": pending,
            ] as [String: Any],
        ]
        if subscription.kind == .autoRenewable {
            body["auto_renew_status"] = subscription.autoRenew ? "true" : "false"
            body["auto_renew_product_id"] = subscription.autoRenewProductId
            body["auto_renew_adam_id"] = String(abs(subscription.autoRenewProductId.hashValue % 1_000_000_000))
            if let changed = subscription.autoRenewChangedMs { dates(&body, "auto_renew_status_change_date", changed) }
        }
        if let intent = options.expirationIntent { body["expiration_intent"] = intent }
        if let focus = options.focus, let cancelled = focus.cancellationMs {
            dates(&body, "cancellation_date", cancelled)
            if let reason = focus.cancellationReason { body["cancellation_reason"] = reason }
            if let web = focus.webOrderLineItemId { body["web_order_line_item_id"] = web }
        }
        if options.legacyShape, !options.cancellationOnlyAtTopLevel, let latest = options.focus ?? transactions.last {
            body["latest_receipt"] = latestReceipt
            var legacy = v1Transaction(latest)
            // Pre-2021 bodies carried milliseconds in `expires_date` and the text in `_formatted`.
            if let expires = latest.expiresMs {
                legacy["expires_date"] = String(expires)
                legacy["expires_date_formatted"] = AppleDates.gmt(expires)
                legacy["expires_date_formatted_pst"] = AppleDates.pst(expires)
                legacy.removeValue(forKey: "expires_date_ms")
                legacy.removeValue(forKey: "expires_date_pst")
            }
            legacy["bid"] = config.bundleId
            legacy["bvrs"] = config.bundleVersion
            let expired = latest.expiresMs.map { $0 <= atMs } ?? false
            body[expired ? "latest_expired_receipt_info" : "latest_receipt_info"] = legacy
        }
        let focusText = options.focus.map { " txn \($0.transactionId)" } ?? transactions.last.map { " txn \($0.transactionId)" } ?? ""
        return Delivery(channel: .notificationV1, body: try json(body), simMs: atMs, userId: subscription.userId,
                        label: "V1 \(type) \(subscription.productId)\(focusText)\(options.legacyShape ? " (pre-2021 shape)" : "")",
                        environment: subscription.environment)
    }

    func v1Transaction(_ t: SimTransaction) -> [String: Any] {
        var f: [String: Any] = [
            "quantity": "1",
            "product_id": t.productId,
            "transaction_id": t.transactionId,
            "original_transaction_id": t.originalTransactionId,
            "is_trial_period": t.offer == .freeTrial ? "true" : "false",
            "is_in_intro_offer_period": t.offer == .introPrice ? "true" : "false",
            "in_app_ownership_type": "PURCHASED",
        ]
        dates(&f, "purchase_date", t.purchaseMs)
        dates(&f, "original_purchase_date", t.originalPurchaseMs)
        if let expires = t.expiresMs { dates(&f, "expires_date", expires) }
        if let web = t.webOrderLineItemId { f["web_order_line_item_id"] = web }
        if t.kind == .autoRenewable { f["subscription_group_identifier"] = t.group }
        if let cancelled = t.cancellationMs {
            dates(&f, "cancellation_date", cancelled)
            if let reason = t.cancellationReason { f["cancellation_reason"] = reason }
        }
        if t.isUpgraded { f["is_upgraded"] = "true" }
        switch t.offer {
        case .promotional(let id): f["promotional_offer_id"] = id
        case .offerCode(let name): f["offer_code_ref_name"] = name
        default: break
        }
        f["app_account_token"] = t.appAccountToken
        return f
    }

    func v1Renewal(_ s: SimSubscription, atMs: Int64) -> [String: Any] {
        var f: [String: Any] = [
            "auto_renew_product_id": s.autoRenewProductId,
            "auto_renew_status": s.autoRenew ? "1" : "0",
            "original_transaction_id": s.originalTransactionId,
            "product_id": s.productId,
        ]
        switch s.billing {
        case .paid: break
        case .retrying(_, let grace):
            f["is_in_billing_retry_period"] = "1"
            f["expiration_intent"] = "2"
            if let grace { dates(&f, "grace_period_expires_date", grace) }
        case .expired(let intent):
            f["is_in_billing_retry_period"] = "0"
            f["expiration_intent"] = intent
        }
        return f
    }

    private func dates(_ object: inout [String: Any], _ name: String, _ ms: Int64) {
        object[name] = AppleDates.gmt(ms)
        object[name + "_ms"] = String(ms)
        object[name + "_pst"] = AppleDates.pst(ms)
    }

    // MARK: V2

    /// A V2 notification about `otid`; `transaction` picks the signedTransactionInfo (default: the
    /// latest), `status` is Apple's subscription status (1 active ... 5 revoked).
    public func v2(_ state: StoreState, otid: String, type: String, subtype: String? = nil, transaction: SimTransaction? = nil,
                   atMs: Int64, uuid: String? = nil, consumptionRequestReason: String? = nil) throws -> Delivery {
        let subscription = try state.subscription(otid)
        let t = transaction ?? subscription.transactions.last { $0.purchaseMs <= atMs } ?? subscription.transactions.last!
        let environment = subscription.environment.rawValue
        var data: [String: Any] = [
            "bundleId": config.bundleId,
            "bundleVersion": config.bundleVersion,
            "environment": environment,
            "signedTransactionInfo": try sign(v2Transaction(t, atMs: atMs)),
        ]
        if subscription.environment == .production { data["appAppleId"] = config.appAppleId }
        if let consumptionRequestReason { data["consumptionRequestReason"] = consumptionRequestReason }
        if subscription.kind == .autoRenewable {
            data["signedRenewalInfo"] = try sign(v2Renewal(subscription, atMs: atMs))
            data["status"] = v2Status(subscription, atMs: atMs)
        }
        var payload: [String: Any] = [
            "notificationType": type,
            "notificationUUID": uuid ?? nextUUID(),
            "data": data,
            "version": "2.0",
            "signedDate": atMs,
        ]
        if let subtype { payload["subtype"] = subtype }
        let signed = try sign(payload)
        return Delivery(channel: .notificationV2, body: try json(["signedPayload": signed]), simMs: atMs, userId: subscription.userId,
                        label: "V2 \(type)\(subtype.map { "/\($0)" } ?? "") \(t.productId) txn \(t.transactionId)",
                        environment: subscription.environment)
    }

    func v2Transaction(_ t: SimTransaction, atMs: Int64) -> [String: Any] {
        var f: [String: Any] = [
            "transactionId": t.transactionId,
            "originalTransactionId": t.originalTransactionId,
            "bundleId": config.bundleId,
            "productId": t.productId,
            "purchaseDate": t.purchaseMs,
            "originalPurchaseDate": t.originalPurchaseMs,
            "quantity": 1,
            "type": Self.v2Type(t.kind),
            "appAccountToken": t.appAccountToken,
            "inAppOwnershipType": "PURCHASED",
            "signedDate": atMs,
            "environment": t.environment.rawValue,
            "transactionReason": t.isRenewal ? "RENEWAL" : "PURCHASE",
            "storefront": t.storefront,
            "storefrontId": t.storefront == "USA" ? "143441" : "143444",
            "price": t.price.milli,
            "currency": t.price.currency,
        ]
        if let web = t.webOrderLineItemId { f["webOrderLineItemId"] = web }
        if t.kind == .autoRenewable { f["subscriptionGroupIdentifier"] = t.group }
        if let expires = t.expiresMs { f["expiresDate"] = expires }
        if let revoked = t.cancellationMs, revoked <= atMs, !t.isUpgraded {
            f["revocationDate"] = revoked
            f["revocationReason"] = Int(t.cancellationReason ?? "0") ?? 0
        }
        if t.isUpgraded, (t.cancellationMs ?? .max) <= atMs { f["isUpgraded"] = true }
        switch t.offer {
        case .none: break
        case .freeTrial: f["offerType"] = 1; f["offerDiscountType"] = "FREE_TRIAL"
        case .introPrice: f["offerType"] = 1; f["offerDiscountType"] = "PAY_AS_YOU_GO"
        case .promotional(let id): f["offerType"] = 2; f["offerIdentifier"] = id; f["offerDiscountType"] = "PAY_AS_YOU_GO"
        case .offerCode(let name): f["offerType"] = 3; f["offerIdentifier"] = name
        }
        return f
    }

    func v2Renewal(_ s: SimSubscription, atMs: Int64) -> [String: Any] {
        var f: [String: Any] = [
            "originalTransactionId": s.originalTransactionId,
            "autoRenewProductId": s.autoRenewProductId,
            "productId": s.productId,
            "autoRenewStatus": s.autoRenew ? 1 : 0,
            "signedDate": atMs,
            "environment": s.environment.rawValue,
            "recentSubscriptionStartDate": s.transactions.first?.purchaseMs ?? atMs,
            "appAccountToken": s.transactions.last?.appAccountToken ?? "",
        ]
        if let end = s.latest?.expiresMs { f["renewalDate"] = end }
        switch s.billing {
        case .paid: f["isInBillingRetryPeriod"] = false
        case .retrying(_, let grace):
            f["isInBillingRetryPeriod"] = true
            f["expirationIntent"] = 2
            if let grace { f["gracePeriodExpiresDate"] = grace }
        case .expired(let intent):
            f["isInBillingRetryPeriod"] = false
            f["expirationIntent"] = Int(intent) ?? 1
        }
        return f
    }

    func v2Status(_ s: SimSubscription, atMs: Int64) -> Int {
        if let latest = s.latest, latest.cancellationMs != nil, !latest.isUpgraded { return 5 }
        switch s.billing {
        case .paid: return (s.latest?.expiresMs ?? .max) > atMs ? 1 : 2
        case .retrying(_, let grace): return grace.map { $0 > atMs } == true ? 4 : 3
        case .expired: return 2
        }
    }

    static func v2Type(_ kind: ProductKind) -> String {
        switch kind {
        case .autoRenewable: return "Auto-Renewable Subscription"
        case .nonRenewing: return "Non-Renewing Subscription"
        case .nonConsumable: return "Non-Consumable"
        case .consumable, .unknown: return "Consumable"
        }
    }

    /// A version-4-shaped UUID, unique per run and deterministic in emission order.
    func nextUUID() -> String {
        let n = counter.add(1, ordering: .relaxed).newValue
        let hex = String(UInt64(config.runId) << 40 | UInt64(n), radix: 16)
        let padded = String(repeating: "0", count: max(0, 24 - hex.count)) + hex
        let c = Array(padded.suffix(24))
        return "5e1a0000-\(String(c[0..<4]))-4\(String(c[5..<8]))-8\(String(c[9..<12]))-\(String(c[12..<24]))"
    }

    private func json(_ object: [String: Any]) throws -> [UInt8] { JSONText.encode(object) }

    /// ES256 compact JWS with the `x5c` header, as JWSSigner makes it, with the simulator's JSON writer.
    private func sign(_ payload: [String: Any]) throws -> String {
        try JWSSigner.signES256(encodedHeader: encodedHeader, encodedPayload: Base64URL.encode(JSONText.encode(payload)), key: pki.chain.leaf.key)
    }
}
