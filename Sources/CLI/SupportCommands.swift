import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Store
import Runtime
import Stages

/// `storeledger support extend|mass-extend|mass-status|history`: renewal-date extensions Apple applies,
/// each recorded in `support_actions` with the acting admin and the reason (`history` reads them back). A single extension is
/// followed by a refresh of the subscription, so the ledger shows the new expiry (cause server-api).
struct SupportCommand: CLICommand {
    let name = "support"
    let summary = "Support actions through the App Store Server API: extend one subscription's renewal date or all active subscribers of a product (recorded with admin and reason), and read a mass extension's status."
    let usage = """
    extend --original-transaction-id ID --days 1-90 --reason-code 0-3 --admin NAME --reason TEXT [--request-id ID]
    mass-extend --product ID --days 1-90 --reason-code 0-3 --admin NAME --reason TEXT [--storefronts USA,CAN] [--request-id ID] [--wait S]
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

/// Who asks for what and why: validated once, before anything is sent.
struct SupportOrder {
    var days: Int32
    var reasonCode: ExtendReasonCode
    var admin: String
    var reason: String
    var requestId: String

    init(_ arguments: Arguments) throws {
        let days = try arguments.int("days", default: 0)
        guard (1...90).contains(days) else { throw UsageError("--days must be 1...90 (Apple's limit per extension)") }
        guard let code = Int32(arguments.value("reason-code") ?? ""), let reasonCode = ExtendReasonCode(rawValue: code) else {
            throw UsageError("--reason-code must be 0...3")
        }
        guard let admin = arguments.value("admin"), (1...128).contains(admin.utf8.count),
              let reason = arguments.value("reason"), (1...1000).contains(reason.utf8.count) else {
            throw UsageError("--admin (1-128 bytes) and --reason (1-1000 bytes) are required: every action is recorded with them")
        }
        let requestId = arguments.value("request-id") ?? UUID().uuidString.lowercased()
        guard (1...128).contains(requestId.utf8.count) else { throw UsageError("--request-id must have 1...128 bytes") }
        self.days = Int32(days)
        self.reasonCode = reasonCode
        self.admin = admin
        self.reason = reason
        self.requestId = requestId
    }
}

struct SupportReport: Codable {
    var kind: String
    var target: String
    var requestIdentifier: String
    var environment: String?
    var admin: String
    var succeeded: Bool?
    var effectiveDate: Int64?
    var succeededCount: Int64?
    var failedCount: Int64?
    var complete: Bool?
    var error: String?
    var refresh: RefreshReport?

    var summary: String {
        if let error { return "support \(kind) \(target): FAILED \(error)" }
        if kind == "extend" {
            return "support extend \(target) by \(admin): success \(succeeded ?? false), renews \(effectiveDate.map { TimeText.iso($0) } ?? "?")"
                + (refresh.map { "; " + $0.summary } ?? "")
        }
        return "support mass-extend \(target) by \(admin) (request \(requestIdentifier)): complete \(complete ?? false), "
            + "succeeded \(succeededCount ?? 0), failed \(failedCount ?? 0)"
    }
}

/// Sends the extension and records it, whatever Apple answered (an attempt is evidence too).
struct SupportActions {
    let client: AppStoreServerAPIClient
    let database: PGConnection

    func extend(_ otid: String, _ order: SupportOrder, environment: AppStoreEnvironment?) -> SupportReport {
        let request = ExtendRenewalDateRequest(extendByDays: order.days, extendReasonCode: order.reasonCode, requestIdentifier: order.requestId)
        var report = SupportReport(kind: "extend", target: otid, requestIdentifier: order.requestId, admin: order.admin)
        switch client.extendRenewalDate(originalTransactionId: otid, request, environment: environment) {
        case .success(let answer):
            report.succeeded = answer.success
            report.effectiveDate = answer.effectiveDate
            if answer.success != true { report.error = "Apple did not extend the renewal date" }
        case .failure(let failure):
            report.error = failure.description
            report.environment = failure.environment?.rawValue
        }
        let target = SubscriptionKey.make(originalTransactionId: otid, environment: report.environment ?? environment?.rawValue ?? "Production")
        record(target: target, request: request, order, &report)
        return report
    }

    func massExtend(_ product: String, storefronts: [String]?, _ order: SupportOrder, environment: AppStoreEnvironment?,
                    waitSeconds: Int) -> SupportReport {
        let request = MassExtendRenewalDateRequest(extendByDays: order.days, extendReasonCode: order.reasonCode, requestIdentifier: order.requestId,
                                                   storefrontCountryCodes: storefronts, productId: product)
        var report = SupportReport(kind: "mass-extend", target: product, requestIdentifier: order.requestId,
                                   environment: (environment ?? .production).rawValue, admin: order.admin)
        switch client.extendRenewalDateForAllActiveSubscribers(request, environment: environment) {
        case .failure(let failure):
            report.error = failure.description
        case .success:
            // Apple works through the subscribers asynchronously: poll its status for a while.
            let deadline = Date().addingTimeInterval(TimeInterval(max(0, min(waitSeconds, 600))))
            repeat {
                if case .success(let status) = client.massExtensionStatus(productId: product, requestIdentifier: order.requestId,
                                                                          environment: environment) {
                    report.complete = status.complete
                    report.succeededCount = status.succeededCount
                    report.failedCount = status.failedCount
                    if status.complete == true { break }
                }
                Thread.sleep(forTimeInterval: 1)
            } while Date() < deadline
        }
        record(target: "product:\(product)@\(report.environment ?? "Production")", request: request, order, &report)
        return report
    }

    private func record<Request: Encodable>(target: String, request: Request, _ order: SupportOrder, _ report: inout SupportReport) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            try ServerAPIStore.recordSupportAction(target: target, kind: report.kind, admin: order.admin, reason: order.reason,
                                                   request: String(decoding: try encoder.encode(request), as: UTF8.self),
                                                   outcome: String(decoding: try encoder.encode(report), as: UTF8.self), db: database)
        } catch {
            report.error = (report.error.map { $0 + "; " } ?? "") + "not recorded: \(error)"
        }
    }
}
