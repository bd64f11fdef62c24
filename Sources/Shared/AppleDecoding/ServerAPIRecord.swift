import Domain
import Foundation

/// What a refresh writes into `storeledger.notifications.raw` (source header
/// `app-store-server-api`): the signed transactions and renewal infos the App Store Server API
/// answered, exactly as Apple signed them. Decode verifies every item again with the notification
/// verifier, so a raw record is trusted no more than a notification is.
/// `{"signedTransactions": ["<JWS>", ...], "signedRenewalInfos": ["<JWS>", ...]}`
public struct ServerAPIRecord: Codable, Sendable, Equatable {
    /// Items per record, so one record stays far below the broker's 1 MB (an item is 1-3 KB).
    public static let maxItems = 200

    public var signedTransactions: [String]
    public var signedRenewalInfos: [String]

    public init(signedTransactions: [String], signedRenewalInfos: [String]) {
        self.signedTransactions = signedTransactions
        self.signedRenewalInfos = signedRenewalInfos
    }

    /// The records for a refresh: renewal infos ride with their subscription's transactions where
    /// they fit, and no record holds more than `maxItems` items.
    public static func chunks(transactions: [String], renewalInfos: [String]) -> [ServerAPIRecord] {
        var records: [ServerAPIRecord] = []
        var items = transactions.map { (true, $0) } + renewalInfos.map { (false, $0) }
        while !items.isEmpty {
            let slice = items.prefix(maxItems)
            items.removeFirst(slice.count)
            records.append(ServerAPIRecord(signedTransactions: slice.filter(\.0).map(\.1), signedRenewalInfos: slice.filter { !$0.0 }.map(\.1)))
        }
        return records
    }
}

/// Decodes a `ServerAPIRecord` into one event per subscription (source `server-api`), like a
/// receipt: facts only, no notification type. Apple signed each item when it answered, so the
/// latest `signedDate` is when these facts were stated (R14): a refresh outranks older notifications.
public struct ServerAPIRecordDecoder: Sendable {
    public let verifier: SignedDataVerifier

    public init(verifier: SignedDataVerifier) { self.verifier = verifier }

    public func decode(body: [UInt8], receivedAtMs: Int64, rawPosition: RecordPosition?) -> Result<[AppleEvent], PermanentFailure> {
        guard let record = try? JSONDecoder().decode(ServerAPIRecord.self, from: Data(body)) else {
            return .failure(PermanentFailure("invalid_json", "server-api record is not {signedTransactions, signedRenewalInfos}"))
        }
        let count = record.signedTransactions.count + record.signedRenewalInfos.count
        guard count <= ServerAPIRecord.maxItems else {
            return .failure(PermanentFailure("too_many_items", "server-api record has \(count) items, at most \(ServerAPIRecord.maxItems)"))
        }
        var transactions: [TransactionFacts] = []
        var renewals: [RenewalFacts] = []
        var stated: Int64?
        var environment: String?
        for signed in record.signedTransactions {
            switch verifier.verifyTransaction(signed) {
            case .failure(let failure): return .failure(PermanentFailure(failure.status.rawValue, "signedTransaction: \(failure.reason)"))
            case .success(let verified):
                let fields = verified.fields
                if let key = fields.invalidNumber(V2Facts.transactionNumbers) { return .failure(ReceiptFields.invalidNumber("signedTransaction", key)) }
                guard let facts = V2Facts.transaction(fields) else {
                    return .failure(PermanentFailure("missing_field", "signedTransaction lacks transactionId, productId or purchaseDate"))
                }
                transactions.append(facts)
                stated = max(stated ?? .min, fields.int64("signedDate") ?? .min)
                environment = environment ?? verified.environment.rawValue
            }
        }
        for signed in record.signedRenewalInfos {
            switch verifier.verifyRenewalInfo(signed) {
            case .failure(let failure): return .failure(PermanentFailure(failure.status.rawValue, "signedRenewalInfo: \(failure.reason)"))
            case .success(let verified):
                let fields = verified.fields
                if let key = fields.invalidNumber(V2Facts.renewalNumbers) { return .failure(ReceiptFields.invalidNumber("signedRenewalInfo", key)) }
                guard let facts = V2Facts.renewal(fields) else {
                    return .failure(PermanentFailure("missing_field", "signedRenewalInfo lacks originalTransactionId"))
                }
                renewals.append(facts)
                stated = max(stated ?? .min, fields.int64("signedDate") ?? .min)
                environment = environment ?? verified.environment.rawValue
            }
        }
        guard let environment else { return .success([]) }
        let digest = EventDigest.hex(of: body)
        var keys = Set(transactions.map(\.originalTransactionId))
        keys.formUnion(renewals.map(\.originalTransactionId))
        return .success(keys.sorted().map { key in
            AppleEvent(eventId: "server-api:\(digest):\(key)", source: .serverAPI, environment: environment,
                       bundleId: verifier.bundleId, subscriptionKey: SubscriptionKey.make(originalTransactionId: key, environment: environment),
                       transactions: transactions.filter { $0.originalTransactionId == key }.sorted { $0.purchaseDateMs < $1.purchaseDateMs },
                       renewalInfo: renewals.first { $0.originalTransactionId == key },
                       receivedAtMs: receivedAtMs, rawPosition: rawPosition, statedAtMs: stated == .min ? nil : stated,
                       provenance: "server-api")
        })
    }
}
