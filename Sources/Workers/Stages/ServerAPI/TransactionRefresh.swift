import AppStoreServerAPI
import AppleDecoding
import Configuration
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store

/// What one refresh did.
public struct RefreshReport: Codable, Sendable {
    public var transactionId: String
    public var environment: String?
    public var originalTransactionId: String?
    /// The refresh resumed from a stored history revision (only changes since were read).
    public var resumedFromRevision = false
    public var historyTransactions = 0
    public var historyPages = 0
    public var truncated = false
    public var statuses = 0
    public var recordsFed = 0
    public var error: String?
    /// The HTTP status an admin's refresh answers with when it failed: 400 for an id Apple's API
    /// cannot take, 404 for one Apple does not know, 502 when Apple could not be asked.
    public var errorStatus: Int?

    init(transactionId: String) { self.transactionId = transactionId }

    public var summary: String {
        if let error { return "refresh \(transactionId): FAILED \(error)" }
        return "refresh \(transactionId) (\(environment ?? "?"), original \(originalTransactionId ?? "?")): \(historyTransactions) transaction(s) "
            + "over \(historyPages) page(s)\(resumedFromRevision ? " since the stored revision" : "")\(truncated ? " TRUNCATED" : ""), "
            + "\(statuses) subscription status(es); fed \(recordsFed) record(s)"
    }
}

/// One refresh: Get Transaction Info names the subscription and environment, Get Transaction
/// History reads from the revision stored for it, Get All Subscription Statuses adds the current
/// renewal state; everything goes to the raw topic as Apple signed it (source
/// `app-store-server-api`, provenance `server-api`), and the revision reached is stored after the
/// broker acknowledged the records, so a failed write is read again next time.
public struct TransactionRefresh {
    let client: AppStoreServerAPIClient
    let producer: KafkaProducer
    let database: PGConnection?

    public init(client: AppStoreServerAPIClient, producer: KafkaProducer, database: PGConnection?) {
        self.client = client
        self.producer = producer
        self.database = database
    }

    public func refresh(transactionId: String, environment: AppStoreEnvironment?) -> RefreshReport {
        var report = RefreshReport(transactionId: transactionId)
        do {
            try refresh(transactionId, environment, &report)
        } catch {
            report.error = "\(error)"
            report.errorStatus = Self.status(of: error)
        }
        return report
    }

    static func status(of error: any Error) -> Int {
        guard let failure = error as? APIFailure else { return 502 }
        switch failure.kind {
        case .invalidRequest: return 400
        case .permanent where failure.httpStatus == 404: return 404
        default: return 502
        }
    }

    private func refresh(_ transactionId: String, _ asked: AppStoreEnvironment?, _ report: inout RefreshReport) throws {
        let info = try client.transactionInfo(transactionId: transactionId, environment: asked).get()
        let environment = info.environment
        let original = (info.transaction.payload["originalTransactionId"] as? String) ?? transactionId
        report.environment = environment.rawValue
        report.originalTransactionId = original
        let key = SubscriptionKey.make(originalTransactionId: original, environment: environment.rawValue)
        var stored = try database.flatMap { try ServerAPIStore.revision(key, db: $0) }
        var result = client.transactionHistory(transactionId: transactionId, since: stored, environment: environment)
        if stored != nil, case .failure(let failure) = result, failure.errorCode == .invalidRequestRevision {
            // Apple no longer takes the revision stored (4000005): read the history from the start
            // once, or every later refresh of this subscription would fail on it.
            stored = nil
            result = client.transactionHistory(transactionId: transactionId, since: nil, environment: environment)
        }
        report.resumedFromRevision = stored != nil
        let history = try result.get()
        let statuses = try client.subscriptionStatuses(transactionId: transactionId, environment: environment).get()
        let last = statuses.groups.flatMap(\.lastTransactions)
        report.historyTransactions = history.signedTransactions.count
        report.historyPages = history.pages
        report.truncated = history.truncated
        report.statuses = last.count
        let records = ServerAPIRecord.chunks(transactions: history.signedTransactions + last.map(\.signedTransactionInfo),
                                             renewalInfos: last.compactMap(\.signedRenewalInfo))
        for record in records {
            _ = try producer.sendAndWait(topic: Topic.notificationsRaw, key: nil, value: [UInt8](try JSONEncoder().encode(record)),
                                         headers: Self.headers(nowMs: currentTimeMs()), timeout: .seconds(30))
            report.recordsFed += 1
        }
        if let database, let revision = history.revision { try ServerAPIStore.saveRevision(key, revision, db: database) }
    }

    static func headers(nowMs: Int64) -> [KafkaHeader] {
        [KafkaHeader(name: RecordHeader.receivedAt, value: Array(String(nowMs).utf8)),
         KafkaHeader(name: RecordHeader.source, value: Array(RawSource.appStoreServerAPI.rawValue.utf8)),
         KafkaHeader(name: RecordHeader.contentType, value: Array("application/json".utf8)),
         KafkaHeader(name: RecordHeader.provenance, value: Array(EventSource.serverAPI.rawValue.utf8))]
    }
}
