import Domain
import Foundation
import HTTPServer

/// Operator reads of issue 17 behind the admin key (AccessPolicy): the webhook delivery log per
/// endpoint (what `storeledger webhooks list|show` prints) and the finance reports (what
/// `storeledger report metrics|reconcile --format json` prints). The reads are injected: the CLI
/// builds them over Store's `WebhookStore` and `FinanceReads`, so every SQL statement
/// stays in the module that owns the schema, and ingest only checks the request and answers.
///
/// - `GET /v1/admin/webhooks`: `{"endpoints": [summary]}`
/// - `GET /v1/admin/webhooks/{endpoint}/deliveries[?entry=ID][&limit=N][&offset=K][&order=newest]`: `{"endpoint", "summary", "attempts"}`
/// - `GET /v1/admin/reports/{metrics|reconcile}?from=YYYY-MM-DD&to=YYYY-MM-DD[&environment=E]`: `{"report", "from", "to", "rows"}`
public struct AdminReadRoutes: Sendable {
    public enum Report: String, Sendable, CaseIterable { case metrics, reconcile }

    /// JSON of every endpoint's summary.
    public typealias Webhooks = @Sendable () throws -> Data
    /// Which of an endpoint's attempts to show: one ledger entry's or all, a page of them, oldest or
    /// newest first (an operator asks why deliveries fail today: newest first, without paging through
    /// every attempt ever made).
    public struct DeliveryPage: Sendable, Equatable {
        public var entryId: Int64?
        public var limit: Int
        public var offset: Int
        public var newestFirst: Bool
    }

    /// JSON of one endpoint's attempts, nil when the endpoint is unknown.
    public typealias Deliveries = @Sendable (_ endpoint: String, _ page: DeliveryPage) throws -> Data?
    /// JSON of a report over `[from, to]` (UTC days, already checked).
    public typealias Reports = @Sendable (_ report: Report, _ from: String, _ to: String, _ environment: String?) throws -> Data

    let webhooks: Webhooks
    let deliveries: Deliveries
    let reports: Reports

    public init(webhooks: @escaping Webhooks, deliveries: @escaping Deliveries, reports: @escaping Reports) {
        self.webhooks = webhooks
        self.deliveries = deliveries
        self.reports = reports
    }

    /// Bounds of the query (STYLE.md practice 12): the log is paged, a report covers at most two years (731 days).
    public static let maxDeliveries = 1_000
    public static let defaultDeliveries = 200
    public static let maxDeliveriesOffset = 10_000_000
    public static let maxReportDays = 731
    public static let environments = Set(SubscriptionKey.environments)

    func webhookList() throws -> HTTPResponse { .json(data: try webhooks()) }

    func webhookDeliveries(_ endpoint: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let text = request.queryValue("entry")
        guard let entry = EdgeChecks.entryId(text.map { $0.hasPrefix("ledger-") ? String($0.dropFirst(7)) : $0 }) else {
            return .error(status: 400, reason: "entry must be a ledger entry id (123 or ledger-123)")
        }
        var limit = Self.defaultDeliveries
        if let text = request.queryValue("limit") {
            guard text.utf8.count <= 5, let value = Int(text), (1...Self.maxDeliveries).contains(value) else {
                return .error(status: 400, reason: "limit must be an integer in 1...\(Self.maxDeliveries)")
            }
            limit = value
        }
        var offset = 0
        if let text = request.queryValue("offset") {
            guard text.utf8.count <= 8, let value = Int(text), (0...Self.maxDeliveriesOffset).contains(value) else {
                return .error(status: 400, reason: "offset must be an integer in 0...\(Self.maxDeliveriesOffset)")
            }
            offset = value
        }
        let order = request.queryValue("order") ?? "oldest"
        guard order == "oldest" || order == "newest" else { return .error(status: 400, reason: "order must be oldest or newest") }
        let page = DeliveryPage(entryId: entry, limit: limit, offset: offset, newestFirst: order == "newest")
        guard let json = try deliveries(endpoint, page) else {
            return .error(status: 404, reason: "no webhook endpoint \(endpoint) has deliveries")
        }
        return .json(data: json)
    }

    /// Every schema-valid query has an answer (the OpenAPI contract is checked by schemathesis): a
    /// `to` before `from` is an empty range, and a longer span than `maxReportDays` is cut at
    /// `from + maxReportDays - 1` (the answer's `to` says where it ended).
    func report(_ report: Report, _ request: HTTPRequest) throws -> HTTPResponse {
        guard let from = request.queryValue("from"), let to = request.queryValue("to"),
              let fromMs = utcDayStartMs(from), let toMs = utcDayStartMs(to) else {
            return .error(status: 400, reason: "from and to are required UTC days YYYY-MM-DD")
        }
        let lastMs = fromMs + Int64(Self.maxReportDays - 1) * 86_400_000
        let end = toMs > lastMs ? utcDayText(lastMs) : to
        let environment = request.queryValue("environment")
        if let environment, !Self.environments.contains(environment) {
            return .error(status: 400, reason: "environment must be one of \(Self.environments.sorted().joined(separator: ", "))")
        }
        return .json(data: try reports(report, from, end, environment))
    }

    /// The path segment after `/v1/admin/webhooks/` is an endpoint id as WebhookConfig allows it.
    static func endpointProblem(_ id: String) -> String? {
        let ok = !id.isEmpty && id.utf8.count <= 64
            && id.unicodeScalars.allSatisfy { ($0.isASCII && CharacterSet.alphanumerics.contains($0)) || $0 == "-" || $0 == "_" }
        return ok ? nil : "a webhook endpoint id is 1-64 letters, digits, - or _"
    }
}
