import Domain
import Foundation
import Ingest
import Postgres
import Stages
import Store

/// Ingest's operator reads (`AdminReadRoutes`): the webhook delivery log and the finance reports,
/// answered by the same Workers reads as `storeledger webhooks` and `storeledger report`.
enum AdminReads {
    static func routes(databaseURL: String) -> AdminReadRoutes {
        // Its own small pool: an operator's report never waits behind the membership reads.
        let pool = PGPool(url: databaseURL, size: 2)
        return AdminReadRoutes(
            webhooks: {
                let summaries = try pool.withConnection { try WebhookStore($0).summaries() }
                return try encode(["endpoints": summaries])
            },
            deliveries: { endpoint, page in
                try pool.withConnection { db -> Data? in
                    let store = WebhookStore(db)
                    guard let summary = try store.summaries().first(where: { $0.endpoint == endpoint }) else { return nil }
                    let attempts = try store.log(endpoint: endpoint, entryId: page.entryId, limit: page.limit, offset: page.offset,
                                                 newestFirst: page.newestFirst)
                    return try encode(DeliveryLog(endpoint: endpoint, summary: summary, attempts: attempts))
                }
            },
            reports: { report, from, to, environment in
                try pool.withConnection { db in
                    let reads = FinanceReads(db)
                    switch report {
                    case .reconcile:
                        let rows = try FinanceReport.reconcile(reads, from: from, to: to, environment: environment)
                        return try encode(ReportAnswer(report: report.rawValue, from: from, to: to, environment: environment, rows: rows))
                    case .metrics:
                        let rows = try FinanceReport.metrics(reads, from: from, to: to, environment: environment).map(MetricsLine.init)
                        return try encode(ReportAnswer(report: report.rawValue, from: from, to: to, environment: environment, rows: rows))
                    }
                }
            })
    }

    private static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(value)
    }

    struct DeliveryLog: Encodable {
        var endpoint: String
        var summary: WebhookStore.Summary
        var attempts: [WebhookStore.Attempt]
    }

    struct ReportAnswer<Row: Encodable>: Encodable {
        var report: String
        var from: String
        var to: String
        var environment: String?
        var rows: [Row]
    }

    /// A metrics row with its two rates written out (the CLI's CSV has them too); null when undefined.
    struct MetricsLine: Encodable {
        var row: MetricsRow
        init(_ row: MetricsRow) { self.row = row }

        private enum Keys: String, CodingKey { case refundRate, trialConversionRate }
        func encode(to encoder: any Encoder) throws {
            try row.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(row.refundRate, forKey: .refundRate)
            try container.encode(row.trialConversionRate, forKey: .trialConversionRate)
        }
    }
}
