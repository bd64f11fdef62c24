import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Store
import Runtime
import Stages

/// `storeledger refresh --transaction-id ID`: asks Apple what is true for this customer now and
/// feeds it into the pipeline, so whatever notifications were lost is corrected by the ledger.
struct RefreshCommand: CLICommand {
    let name = "refresh"
    let summary = "Ask Apple what is true for one customer now (App Store Server API: transaction history since the stored revision, all subscription statuses) and feed it into the pipeline as events of source server-api."
    let usage = """
    --transaction-id ID [--environment Production|Sandbox] [--json] [--bootstrap B] [--database-url URL] [--key-id ID] [--max-pages N]
       Environment as for recover: STORELEDGER_APPLE_ROOTS, STORELEDGER_BUNDLE_ID, STORELEDGER_API_*_URL, KAFKA_BOOTSTRAP_SERVERS,
       DATABASE_URL (optional: keeps the history revision per subscription, so the next refresh reads only what changed).
    """
    let optionNames: Set<String> = ["transaction-id", "environment", "bootstrap", "database-url", "key-id", "max-pages"]
    let flagNames: Set<String> = ["json"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let transactionId = arguments.value("transaction-id") else { throw UsageError("--transaction-id is required") }
        let environment = try arguments.value("environment").map(RecoveryTime.environments)?.first
        let session = try ServerAPISession(arguments, clientId: "storeledger-refresh", maxPages: try arguments.int("max-pages", default: 50))
        defer { session.close() }
        let producer = try KafkaProducer(config: try Environment.kafka(arguments, clientId: "storeledger-refresh"))
        defer { producer.close() }
        let database = try Environment.databaseURL(arguments).map { try PGConnection(url: $0) }
        defer { database?.close() }
        let report = TransactionRefresh(client: session.client, producer: producer, database: database)
            .refresh(transactionId: transactionId, environment: environment)
        printReport(report, key: "refresh", json: arguments.has("json")) { report.summary }
        return report.error == nil && !report.truncated ? 0 : 1
    }
}

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

    init(transactionId: String) { self.transactionId = transactionId }

    var summary: String {
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
struct TransactionRefresh {
    let client: AppStoreServerAPIClient
    let producer: KafkaProducer
    let database: PGConnection?

    func refresh(transactionId: String, environment: AppStoreEnvironment?) -> RefreshReport {
        var report = RefreshReport(transactionId: transactionId)
        do {
            try refresh(transactionId, environment, &report)
        } catch {
            report.error = "\(error)"
        }
        return report
    }

    private func refresh(_ transactionId: String, _ asked: AppStoreEnvironment?, _ report: inout RefreshReport) throws {
        let info = try client.transactionInfo(transactionId: transactionId, environment: asked).get()
        let environment = info.environment
        let original = (info.transaction.payload["originalTransactionId"] as? String) ?? transactionId
        report.environment = environment.rawValue
        report.originalTransactionId = original
        let key = SubscriptionKey.make(originalTransactionId: original, environment: environment.rawValue)
        let stored = try database.flatMap { try ServerAPIStore.revision(key, db: $0) }
        report.resumedFromRevision = stored != nil
        let history = try client.transactionHistory(transactionId: transactionId, since: stored, environment: environment).get()
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
