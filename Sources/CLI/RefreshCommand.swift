import Configuration
import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Stages

/// `storeledger refresh --transaction-id ID`: asks Apple what is true for this customer now and
/// feeds it into the pipeline, so whatever notifications were lost is corrected by the ledger.
struct RefreshCommand: CLICommand {
    let name = "refresh"
    let summary = "Ask Apple what is true for one customer now (App Store Server API: transaction history since the stored revision, all subscription statuses) and feed it into the pipeline as events of source server-api."
    let usage = """
    --transaction-id ID [--environment Production|Sandbox] [--json] [--bootstrap B] [--database-url URL] [--key-id ID] [--max-pages N]
       Environment as for recover: \(Setting.appleRoots), \(Setting.bundleId), \(Setting.apiProductionURL), \(Setting.apiSandboxURL), KAFKA_BOOTSTRAP_SERVERS,
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
