import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Stages
import Store

/// `storeledger support extend|mass-extend|mass-status|history`: renewal-date extensions Apple applies,
/// each recorded in `support_actions` with the acting admin and the reason (`history` reads them back). A single extension is
/// followed by a refresh of the subscription, so the ledger shows the new expiry (cause server-api).
struct SupportCommand: CLICommand {
    let name = "support"
    let summary = "Support actions through the App Store Server API: extend one subscription's renewal date or all active subscribers of a product (recorded with admin and reason), and read a mass extension's status."
    let usage = """
    extend --original-transaction-id ID --days 1-90 --reason-code 0-3 --admin NAME --reason TEXT [--request-id ID]
    mass-extend --product ID --environment Production|Sandbox --days 1-90 --reason-code 0-3 --admin NAME --reason TEXT [--storefronts USA,CAN] [--request-id ID] [--wait S]
    mass-status --product ID --request-id ID
    history [--target SUBSCRIPTION_KEY|product:ID@ENVIRONMENT] [--limit N]   (the recorded actions, newest first)
       [--environment Production|Sandbox] [--json] [--bootstrap B] [--database-url URL] [--key-id ID]
       Reason codes (Apple's extendReasonCode): 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
       DATABASE_URL is required for extend and mass-extend: every action is recorded.
    """
    let optionNames: Set<String> = ["original-transaction-id", "product", "days", "reason-code", "admin", "reason", "request-id", "storefronts",
                                    "wait", "environment", "bootstrap", "database-url", "key-id", "target", "limit"]
    let flagNames: Set<String> = ["json"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positionals.count == 1, let action = arguments.positionals.first,
              ["extend", "mass-extend", "mass-status", "history"].contains(action) else {
            throw UsageError("expected: support extend | mass-extend | mass-status | history")
        }
        if action == "history" { return try history(arguments) }
        let environment = try arguments.value("environment").map(RecoveryTime.environments)?.first
        let session = try ServerAPISession(arguments, clientId: "storeledger-support")
        defer { session.close() }
        if action == "mass-status" {
            guard let product = arguments.value("product"), let requestId = arguments.value("request-id") else {
                throw UsageError("mass-status needs --product and --request-id")
            }
            let status = try session.client.massExtensionStatus(productId: product, requestIdentifier: requestId, environment: environment).get()
            printReport(status, key: "massExtensionStatus", json: arguments.has("json")) {
                "mass extension \(requestId) of \(product): complete \(status.complete ?? false), succeeded \(status.succeededCount ?? 0), failed \(status.failedCount ?? 0)"
            }
            return 0
        }
        let order = try SupportOrder(arguments)
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("support \(action) needs DATABASE_URL: every action is recorded") }
        let database = try PGConnection(url: url)
        defer { database.close() }
        var report: SupportReport
        if action == "extend" {
            guard let otid = arguments.value("original-transaction-id") else { throw UsageError("extend needs --original-transaction-id") }
            report = SupportActions(client: session.client, database: database).extend(otid, order, environment: environment)
            if report.error == nil {
                let producer = try KafkaProducer(config: try Environment.kafka(arguments, clientId: "storeledger-support"))
                defer { producer.close() }
                report.refresh = TransactionRefresh(client: session.client, producer: producer, database: database)
                    .refresh(transactionId: otid, environment: environment)
            }
        } else {
            guard let product = arguments.value("product") else { throw UsageError("mass-extend needs --product") }
            // It extends every active subscriber and cannot be undone: the environment is named, never assumed.
            guard let environment else { throw UsageError("mass-extend needs --environment Production|Sandbox") }
            let storefronts = arguments.value("storefronts").map { $0.split(separator: ",").map(String.init) }
            report = SupportActions(client: session.client, database: database)
                .massExtend(product, storefronts: storefronts, order, environment: environment,
                            waitSeconds: try arguments.int("wait", default: 30))
        }
        printReport(report, key: "support", json: arguments.has("json")) { report.summary }
        return report.error == nil ? 0 : 1
    }

    /// Who extended what, when and why: `support_actions`, newest first.
    private func history(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("support history needs DATABASE_URL") }
        let database = try PGConnection(url: url)
        defer { database.close() }
        let actions = try ServerAPIStore.supportActions(target: arguments.value("target"), limit: try arguments.int("limit", default: 50),
                                                        db: database)
        printReport(actions, key: "supportActions", json: arguments.has("json")) {
            actions.map { "\($0.createdAt)  \($0.kind) \($0.target) by \($0.admin): \($0.reason)  outcome \($0.outcome)" }.joined(separator: "\n")
        }
        return 0
    }
}
