import Domain
import Foundation
import Postgres
import Runtime
import Stages
import Store

/// `storeledger report reconcile|metrics`: finance reconciliation and subscription metrics from the
/// ledger's finance facts, per UTC day, environment (sandbox apart from production) and product.
struct ReportCommand: CLICommand {
    let name = "report"
    let summary = "Finance reports from PostgreSQL: `reconcile` (purchases, renewals, trials, intro/promotional/offer-code/win-back offers, refunds and revocations with the time they cut, Apple's prices) and `metrics` (active subscriptions and trials, MRR per currency, new subscriptions, trial conversion, churn, refund rate), per day and product."
    let usage = "reconcile|metrics --from YYYY-MM-DD --to YYYY-MM-DD [--format csv|json] [--environment Production|Sandbox] [--database-url URL]"
    let optionNames: Set<String> = ["from", "to", "format", "environment", "database-url"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positionals.count == 1, let report = arguments.positionals.first, ["reconcile", "metrics"].contains(report) else {
            throw UsageError("name one report: reconcile or metrics")
        }
        guard let from = arguments.value("from"), let to = arguments.value("to"),
              let fromMs = Self.dayStartMs(from), let toMs = Self.dayStartMs(to), fromMs <= toMs else {
            throw UsageError("--from and --to are UTC days YYYY-MM-DD, from <= to")
        }
        let format = arguments.value("format") ?? "csv"
        guard ["csv", "json"].contains(format) else { throw UsageError("--format is csv or json") }
        // An environment in any case, as Apple's own spellings name them; a typo is an error, not an empty report.
        var environment: String?
        if let given = arguments.value("environment") {
            guard let known = SubscriptionKey.environments.first(where: { $0.lowercased() == given.lowercased() }) else {
                throw UsageError("--environment is one of \(SubscriptionKey.environments.joined(separator: ", "))")
            }
            environment = known
        }
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        let reads = FinanceReads(try PGConnection(url: url))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        /// CSV under its header line, or one JSON object a line.
        func write<Row: Encodable>(_ rows: [Row], csvHeader: String, csvLine: (Row) -> String) throws {
            if format == "csv" {
                print(csvHeader)
                rows.forEach { print(csvLine($0)) }
            } else {
                for row in rows { print(String(decoding: try encoder.encode(row), as: UTF8.self)) }
            }
        }
        if report == "reconcile" {
            try write(try FinanceReport.reconcile(reads, from: from, to: to, environment: environment),
                      csvHeader: ReconcileRow.csvHeader, csvLine: \.csvLine)
        } else {
            // JSON lines carry the two rates, as the CSV and the admin route do.
            try write(try FinanceReport.metrics(reads, from: from, to: to, environment: environment).map(AdminReads.MetricsLine.init),
                      csvHeader: MetricsRow.csvHeader, csvLine: \.row.csvLine)
        }
        return 0
    }

    /// Midnight UTC of `YYYY-MM-DD`, in ms.
    static func dayStartMs(_ text: String) -> Int64? { utcDayStartMs(text) }
}
