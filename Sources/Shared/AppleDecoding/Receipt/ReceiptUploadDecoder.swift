import Configuration
import Crypto
import Domain
import Foundation

/// How app receipts are validated: locally (PKCS#7 + ASN.1, no network) or through Apple's
/// legacy verifyReceipt endpoint (which also returns renewal info and the latest transactions).
public enum ReceiptValidation: String, Sendable, CaseIterable {
    case local
    case verifyReceipt = "verify-receipt"
}

/// A failure of one input: permanent ones are dead-lettered, retryable ones make the stage retry.
public enum DecodeFailure: Error, Sendable, Equatable {
    case permanent(PermanentFailure)
    case retryable(String)
}

/// Receipt uploads as ingest writes them: `{"user_id": ..., "receipt_data": "<base64>", ...}`
/// (other client fields, such as a missing `transactionDate`, are ignored, R7). One event per
/// subscription (original_transaction_id) in the receipt, plus one per non-subscription purchase
/// keyed by its own original_transaction_id, each carrying the uploader's user id (R6).
public struct ReceiptUploadDecoder: Sendable {
    public let validation: ReceiptValidation
    public let verifier: AppReceiptVerifier?
    public let verifyReceipt: VerifyReceiptClient?
    /// Bundles whose receipts verifyReceipt's answers may describe; empty accepts any. (Apple answers
    /// status 0 for a receipt of any app; local validation checks the bundle in its verifier.)
    public let bundleIds: Set<String>

    public init(validation: ReceiptValidation, verifier: AppReceiptVerifier?, verifyReceipt: VerifyReceiptClient?,
                bundleIds: Set<String> = []) {
        self.validation = validation
        self.verifier = verifier
        self.verifyReceipt = verifyReceipt
        self.bundleIds = bundleIds
    }

    public struct Upload: Sendable {
        public var userId: String?
        public var receiptData: String
    }

    public static func parseUpload(_ body: [UInt8]) -> Result<Upload, PermanentFailure> {
        guard let object = CompactJWS.jsonObject(body) else {
            return .failure(PermanentFailure("invalid_json", "receipt upload is not a JSON object"))
        }
        guard let receipt = object["receipt_data"] as? String, !receipt.isEmpty else {
            return .failure(PermanentFailure("missing_field", "receipt upload has no receipt_data string"))
        }
        let user = JSONFields(object).string("user_id").flatMap { $0.isEmpty ? nil : $0 }
        return .success(Upload(userId: user, receiptData: receipt))
    }

    public func decode(body: [UInt8], receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<[AppleEvent], DecodeFailure> {
        switch Self.parseUpload(body) {
        case .success(let upload): return decode(upload, receivedAtMs: receivedAtMs, rawPosition: rawPosition)
        case .failure(let failure): return .failure(.permanent(failure))
        }
    }

    /// An upload already parsed (`parseUpload`).
    public func decode(_ upload: Upload, receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<[AppleEvent], DecodeFailure> {
        let context = EventContext(upload, receivedAtMs: receivedAtMs, rawPosition: rawPosition)
        switch validation {
        case .verifyReceipt:
            return viaVerifyReceipt(upload.receiptData, context)
        case .local:
            guard let der = Base64.decode(upload.receiptData), !der.isEmpty else {
                return .failure(.permanent(PermanentFailure(ReceiptFailure.invalidReceipt, "receipt_data is not base64")))
            }
            if LegacyTransactionReceipt.looksLikeOne(der) {
                if verifyReceipt != nil { return viaVerifyReceipt(upload.receiptData, context) }
                return .failure(.permanent(PermanentFailure(ReceiptFailure.legacyTransactionReceipt,
                    "iOS 6-style transaction receipt: it cannot be verified against the configured roots (its chain is not embedded); configure verifyReceipt to accept it")))
            }
            guard let verifier else {
                return .failure(.permanent(PermanentFailure(ReceiptFailure.notConfigured, "local receipt validation has no roots configured (\(Setting.receiptRoots))")))
            }
            switch verifier.verify(der) {
            case .failure(let failure): return .failure(.permanent(PermanentFailure(failure.kind, failure.reason)))
            case .success(let verified): return Self.events(verified.receipt, context).mapError { .permanent($0) }
            }
        }
    }

    struct EventContext {
        let digest: String
        let userId: String?
        let receivedAtMs: Int64
        let rawPosition: RecordPosition?
    }

    private func viaVerifyReceipt(_ receiptData: String, _ context: EventContext) -> Result<[AppleEvent], DecodeFailure> {
        guard let client = verifyReceipt else {
            return .failure(.permanent(PermanentFailure("verify_receipt_not_configured", "verifyReceipt validation is selected but no endpoint is configured")))
        }
        switch client.verify(receiptData: receiptData) {
        case .retryable(let reason): return .failure(.retryable(reason))
        case .rejected(let status, let reason): return .failure(.permanent(PermanentFailure("verify_receipt_\(status)", reason)))
        case .valid(let response, let environment):
            let bundle = VerifyReceiptResponse.bundleId(JSONFields(response))
            if !bundleIds.isEmpty, !bundleIds.contains(bundle ?? "") {
                return .failure(.permanent(PermanentFailure(ReceiptFailure.wrongBundle,
                    "verifyReceipt describes a receipt of bundle \(bundle ?? "(none)"), not \(bundleIds.sorted().joined(separator: ", "))")))
            }
            return VerifyReceiptResponse.events(JSONFields(response), endpoint: environment, context).mapError { .permanent($0) }
        }
    }

    /// Local receipt → events, grouped by original_transaction_id, oldest purchase first.
    static func events(_ receipt: AppReceipt, _ context: EventContext) -> Result<[AppleEvent], PermanentFailure> {
        var facts: [TransactionFacts] = []
        for purchase in receipt.inApp {
            guard let purchaseDate = purchase.purchaseDateMs, !purchase.transactionId.isEmpty, !purchase.productId.isEmpty else {
                return .failure(PermanentFailure("missing_field", "in-app purchase \(purchase.transactionId) lacks a product id, transaction id or purchase date"))
            }
            facts.append(TransactionFacts(
                transactionId: purchase.transactionId, originalTransactionId: purchase.originalTransactionId,
                webOrderLineItemId: purchase.webOrderLineItemId.flatMap { $0 == "0" ? nil : $0 },
                productId: purchase.productId, bundleId: receipt.bundleId, purchaseDateMs: purchaseDate,
                originalPurchaseDateMs: purchase.originalPurchaseDateMs, expiresDateMs: purchase.expiresDateMs,
                cancellationDateMs: purchase.cancellationDateMs, isTrialPeriod: purchase.isTrialPeriod,
                isInIntroOfferPeriod: purchase.isInIntroOfferPeriod, promotionalOfferId: purchase.promotionalOfferId,
                quantity: purchase.quantity))
        }
        let environment = receiptEnvironment(receipt.receiptType)
        return .success(group(facts, renewals: [], source: .appReceipt, environment: environment,
                              bundleId: receipt.bundleId, prefix: "receipt", statedAtMs: receipt.creationDateMs, context))
    }

    /// "Production" / "ProductionSandbox" / "Sandbox" / "Xcode" in attribute 0, and the volume
    /// purchase (VPP) variants of the first two: the same environments (R18), whose notifications
    /// and signed data say Production or Sandbox.
    static func receiptEnvironment(_ type: String?) -> String {
        switch type?.lowercased() {
        case "production", "productionvpp": return AppStoreEnvironment.production.rawValue
        case "productionsandbox", "sandbox", "productionvppsandbox": return AppStoreEnvironment.sandbox.rawValue
        case "xcode": return AppStoreEnvironment.xcode.rawValue
        case nil: return AppStoreEnvironment.production.rawValue
        default: return type!
        }
    }

    /// `statedAtMs`: the receipt's creation date, which orders its facts against newer ones (R14).
    static func group(_ facts: [TransactionFacts], renewals: [RenewalFacts], source: EventSource, environment: String,
                      bundleId: String?, prefix: String, statedAtMs: Int64?, _ context: EventContext) -> [AppleEvent] {
        var keys = Set(facts.map(\.originalTransactionId))
        keys.formUnion(renewals.map(\.originalTransactionId))
        return keys.sorted().map { key in
            AppleEvent(eventId: "\(prefix):\(context.digest):\(key)", source: source, environment: environment,
                       bundleId: bundleId, subscriptionKey: SubscriptionKey.make(originalTransactionId: key, environment: environment),
                       transactions: facts.filter { $0.originalTransactionId == key }.sorted { $0.purchaseDateMs < $1.purchaseDateMs },
                       renewalInfo: renewals.first { $0.originalTransactionId == key },
                       appUserId: context.userId, receivedAtMs: context.receivedAtMs, rawPosition: context.rawPosition,
                       statedAtMs: statedAtMs)
        }
    }
}

/// A verifyReceipt response body (both shapes: iOS 7+ `receipt.in_app` + `latest_receipt_info[]`,
/// and iOS 6 style where `receipt` and `latest_receipt_info` are single transactions).
/// https://developer.apple.com/documentation/appstorereceipts/responsebody
enum VerifyReceiptResponse {
    static func events(_ response: JSONFields, endpoint: AppStoreEnvironment,
                       _ context: ReceiptUploadDecoder.EventContext) -> Result<[AppleEvent], PermanentFailure> {
        let receipt = response.object("receipt")
        let bundleId = Self.bundleId(response)
        var objects: [JSONFields] = []
        if let receipt {
            objects += receipt.array("in_app")
            if receipt.string("transaction_id") != nil { objects.append(receipt) }  // iOS 6 style
        }
        objects += response.array("latest_receipt_info")
        if let single = response.object("latest_receipt_info") { objects.append(single) }
        if let failure = ReceiptFields.invalidField(transactions: objects, renewals: response.array("pending_renewal_info"),
                                                     in: "verifyReceipt response") {
            return .failure(failure)
        }
        // The same transaction appears in in_app and latest_receipt_info: keep the last copy.
        var byId: [String: TransactionFacts] = [:]
        var order: [String] = []
        for object in objects {
            guard let facts = ReceiptFields.transaction(object, bundleId: bundleId) else { continue }
            if byId[facts.transactionId] == nil { order.append(facts.transactionId) }
            byId[facts.transactionId] = facts
        }
        let facts = order.compactMap { byId[$0] }
        let renewals = response.array("pending_renewal_info").compactMap { info in
            ReceiptFields.renewal(info) ?? renewalWithoutId(info, facts)
        }
        let environment = response.string("environment").map { normalizeEnvironment($0) } ?? endpoint.rawValue
        return .success(ReceiptUploadDecoder.group(facts, renewals: renewals, source: .verifyReceipt, environment: environment,
                                                   bundleId: bundleId, prefix: "verify-receipt",
                                                   statedAtMs: Self.statedAtMs(receipt), context))
    }

    /// When Apple stated an answer's facts (R14): its `latest_receipt_info` and `pending_renewal_info`
    /// are Apple's state when asked (`request_date_ms`), not when the device's receipt was made; the
    /// same receipt uploaded again after auto-renew was turned off says so as newer news.
    static func statedAtMs(_ receipt: JSONFields?) -> Int64? {
        receipt?.int64("request_date_ms") ?? receipt?.int64("receipt_creation_date_ms")
    }

    /// The bundle of the receipt a response describes (`bid` in iOS 6-style receipts).
    static func bundleId(_ response: JSONFields) -> String? {
        let receipt = response.object("receipt")
        return receipt?.string("bundle_id") ?? receipt?.string("bid")
    }

    /// Some responses omit `original_transaction_id` in `pending_renewal_info`: attribute it to the
    /// subscription whose latest purchase is of that product.
    private static func renewalWithoutId(_ info: JSONFields, _ facts: [TransactionFacts]) -> RenewalFacts? {
        guard let product = info.string("product_id") else { return nil }
        guard let latest = facts.filter({ $0.productId == product }).max(by: { $0.purchaseDateMs < $1.purchaseDateMs }) else { return nil }
        return ReceiptFields.renewal(info.setting("original_transaction_id", to: latest.originalTransactionId))
    }
}

extension ReceiptUploadDecoder.EventContext {
    /// Each upload is a claim of its own (R17), so its time is part of its identity: the same receipt
    /// uploaded again by an account after another account's upload claims it back. Apple's and
    /// Kafka's redeliveries of one upload keep the time ingest gave it, and stay one input.
    init(_ upload: ReceiptUploadDecoder.Upload, receivedAtMs: Int64, rawPosition: RecordPosition?) {
        self.init(digest: EventDigest.hex(of: Array((upload.userId ?? "").utf8) + [0] + Array(String(receivedAtMs).utf8) + [0]
                                              + Array(upload.receiptData.utf8)),
                  userId: upload.userId, receivedAtMs: receivedAtMs, rawPosition: rawPosition)
    }
}
