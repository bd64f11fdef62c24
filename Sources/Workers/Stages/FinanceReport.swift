import Domain
import Foundation
import Runtime
import Store

/// The two reports over the finance facts, for the CLI and for ingest's admin route alike.
public enum FinanceReport {
    /// The facts that touch `[from, to]` (UTC days, checked by the caller), of one environment or all.
    static func transactions(_ reads: FinanceReads, from: String, to: String, environment: String?,
                             wholeHistories: Bool = false) throws -> [FinanceTransaction] {
        guard let fromMs = utcDayStartMs(from), let toMs = utcDayStartMs(to) else { throw UsageError("days are YYYY-MM-DD") }
        let transactions = try reads.transactions(fromMs: fromMs, toMs: toMs + 86_400_000, wholeHistories: wholeHistories)
        guard let environment else { return transactions }
        return transactions.filter { $0.environment == environment }
    }

    public static func reconcile(_ reads: FinanceReads, from: String, to: String, environment: String?) throws -> [ReconcileRow] {
        Reconciliation.rows(try transactions(reads, from: from, to: to, environment: environment), from: from, to: to)
    }

    public static func metrics(_ reads: FinanceReads, from: String, to: String, environment: String?) throws -> [MetricsRow] {
        // Whole histories: a resubscription is no new subscription, and a lapse followed by one is no
        // churn, whichever day the report starts on.
        let transactions = try transactions(reads, from: from, to: to, environment: environment, wholeHistories: true)
        let standings = try reads.renewalStandings(Array(Set(transactions.map(\.subscriptionKey))).sorted())
        return SubscriptionMetrics.rows(transactions, renewals: standings, from: from, to: to, nowMs: currentTimeMs())
    }
}
