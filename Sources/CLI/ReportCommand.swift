import Domain
import Foundation
import Postgres
import Store
import Runtime
import Stages

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
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        let reads = FinanceReads(try PGConnection(url: url))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if report == "reconcile" {
            let rows = try FinanceReport.reconcile(reads, from: from, to: to, environment: arguments.value("environment"))
            if format == "csv" {
                print(ReconcileRow.csvHeader)
                rows.forEach { print($0.csvLine) }
            } else {
                for row in rows { print(String(decoding: try encoder.encode(row), as: UTF8.self)) }
            }
        } else {
            let rows = try FinanceReport.metrics(reads, from: from, to: to, environment: arguments.value("environment"))
            if format == "csv" {
                print(MetricsRow.csvHeader)
                rows.forEach { print($0.csvLine) }
            } else {
                for row in rows { print(String(decoding: try encoder.encode(row), as: UTF8.self)) }
            }
        }
        return 0
    }

    /// Midnight UTC of `YYYY-MM-DD`, in ms.
    static func dayStartMs(_ text: String) -> Int64? { utcDayStartMs(text) }
}

/// The two reports over the finance facts, for the CLI and for ingest's admin route alike.
enum FinanceReport {
    /// The facts that touch `[from, to]` (UTC days, checked by the caller), of one environment or all.
    static func transactions(_ reads: FinanceReads, from: String, to: String, environment: String?) throws -> [FinanceTransaction] {
        guard let fromMs = utcDayStartMs(from), let toMs = utcDayStartMs(to) else { throw UsageError("days are YYYY-MM-DD") }
        let transactions = try reads.transactions(fromMs: fromMs, toMs: toMs + 86_400_000)
        guard let environment else { return transactions }
        return transactions.filter { $0.environment == environment }
    }

    static func reconcile(_ reads: FinanceReads, from: String, to: String, environment: String?) throws -> [ReconcileRow] {
        Reconciliation.rows(try transactions(reads, from: from, to: to, environment: environment), from: from, to: to)
    }

    static func metrics(_ reads: FinanceReads, from: String, to: String, environment: String?) throws -> [MetricsRow] {
        let transactions = try transactions(reads, from: from, to: to, environment: environment)
        let standings = try reads.renewalStandings(Array(Set(transactions.map(\.subscriptionKey))).sorted())
        return SubscriptionMetrics.rows(transactions, renewals: standings, from: from, to: to, nowMs: currentTimeMs())
    }
}
