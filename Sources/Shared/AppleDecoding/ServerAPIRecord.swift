import Domain
import Foundation

/// What a refresh writes into `storeledger.notifications.raw` (source header
/// `app-store-server-api`): the signed transactions and renewal infos the App Store Server API
/// answered, exactly as Apple signed them. Decode verifies every item again with the notification
/// verifier, so a raw record is trusted no more than a notification is.
/// `{"signedTransactions": ["<JWS>", ...], "signedRenewalInfos": ["<JWS>", ...]}`
public struct ServerAPIRecord: Codable, Sendable, Equatable {
    /// Items per record (decode refuses more).
    public static let maxItems = 200
    /// Bytes of one record's JSON: under the broker's limit for a value (`KafkaLimits.maxValueBytes`,
    /// 934,464). Apple's signed items are ~5 KB each (the `x5c` chain in every header), so 200 of
    /// them alone would not fit: records are cut by size as well as by count.
    public static let maxRecordBytes = 900_000

    public var signedTransactions: [String]
    public var signedRenewalInfos: [String]

    public init(signedTransactions: [String], signedRenewalInfos: [String]) {
        self.signedTransactions = signedTransactions
        self.signedRenewalInfos = signedRenewalInfos
    }

    /// The records for a refresh: renewal infos ride with their subscription's transactions where
    /// they fit, and no record holds more than `maxItems` items or `maxRecordBytes` of JSON.
    public static func chunks(transactions: [String], renewalInfos: [String]) -> [ServerAPIRecord] {
        // The JSON around the items, and per item its quotes and comma (JWS text needs no escapes).
        let envelope = #"{"signedTransactions":[],"signedRenewalInfos":[]}"#.utf8.count
        var records: [ServerAPIRecord] = []
        var current = ServerAPIRecord(signedTransactions: [], signedRenewalInfos: [])
        var count = 0, bytes = envelope
        for (isTransaction, item) in transactions.map({ (true, $0) }) + renewalInfos.map({ (false, $0) }) {
            let size = item.utf8.count + 3
            if count > 0, count == maxItems || bytes + size > maxRecordBytes {
                records.append(current)
                current = ServerAPIRecord(signedTransactions: [], signedRenewalInfos: [])
                count = 0
                bytes = envelope
            }
            if isTransaction { current.signedTransactions.append(item) } else { current.signedRenewalInfos.append(item) }
            count += 1
            bytes += size
        }
        if count > 0 { records.append(current) }
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
            switch V2Facts.verifiedTransaction(signed, verifier, what: "signedTransaction") {
            case .failure(let failure): return .failure(failure)
            case .success(let read):
                transactions.append(read.facts)
                stated = max(stated ?? .min, read.verified.fields.int64("signedDate") ?? .min)
                environment = environment ?? read.verified.environment.rawValue
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
