import Crypto
import Foundation
import HTTPServer
import Synchronization

/// The simulated App Store's legacy `verifyReceipt` endpoints: `POST /production/verifyReceipt`
/// and `POST /sandbox/verifyReceipt` (`/verifyReceipt` is production). Like Apple's, it verifies
/// the receipt's signature, answers `21007` in an HTTP 200 when a sandbox receipt reaches
/// production and `21008` the other way round, checks the shared secret (`21004`), and on success
/// returns the receipt plus the latest facts of its subscriptions (`latest_receipt_info`,
/// `pending_renewal_info`) from the store's ground truth.
/// https://developer.apple.com/documentation/appstorereceipts/verifyreceipt
public final class VerifyReceiptServer: Sendable {
    private let server: HTTPServer
    private let store: AppStore
    private let emitter: WireEmitter
    private let trust: TrustStore
    private let counts = Mutex<[String: Int]>([:])
    /// Share of requests answered `21005` (temporarily unavailable) to exercise the client's retries.
    private let flakyShare: Double

    public init(store: AppStore, pki: SimulatorPKI, port: Int = 0, flakyShare: Double = 0) throws {
        self.store = store
        self.emitter = WireEmitter(pki: pki, config: store.config)
        self.trust = try TrustStore(roots: [pki.chain.root.certificate])
        self.flakyShare = flakyShare
        let routes = LateBoundRoutes<VerifyReceiptServer> { $0.handle($1) }
        self.server = routes.server(port: port, maxBodyBytes: 4 * 1024 * 1024)
        routes.bind(self)
    }

    public func start() throws { try server.start() }
    public func stop() { server.stop() }
    public var url: String { "http://127.0.0.1:\(server.boundPort)" }
    /// Requests answered, by "<endpoint> <status>".
    public var answered: [String: Int] { counts.withLock { $0 } }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        let endpoint: SimEnvironment
        switch (request.method, request.path) {
        case ("POST", "/production/verifyReceipt"), ("POST", "/verifyReceipt"): endpoint = .production
        case ("POST", "/sandbox/verifyReceipt"): endpoint = .sandbox
        default: return .error(status: 404, reason: "POST /production/verifyReceipt or /sandbox/verifyReceipt")
        }
        let answer = verify(request.body, at: endpoint)
        let status = (answer["status"] as? Int) ?? -1
        counts.withLock { $0["\(endpoint.rawValue) \(status)", default: 0] += 1 }
        guard let data = try? JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return .error(status: 500, reason: "encoding failed")
        }
        return .json(data: data)
    }

    func verify(_ body: [UInt8], at endpoint: SimEnvironment) -> [String: Any] {
        func status(_ code: Int) -> [String: Any] {
            ["status": code, "environment": endpoint.rawValue] as [String: Any]
        }
        guard let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let receiptData = request["receipt-data"] as? String else { return status(21000) }
        if flakyShare > 0, Double.random(in: 0..<1) < flakyShare { return status(21005) }
        if let password = request["password"] as? String, password != store.config.sharedSecret { return status(21004) }
        guard let der = Base64.decode(receiptData), let signed = try? PKCS7SignedData.parse(der: der),
              let summary = ReceiptEncoder.summary(signed.content) else { return status(21002) }
        // The chain is valid for the whole simulated span; Apple checks at the receipt's creation date.
        guard signed.verify(trustStore: trust, at: signed.certificates.map(\.notBefore).max()!.addingTimeInterval(86_400)).isValid,
              summary.bundleId == store.config.bundleId else { return status(21003) }
        let receiptEnvironment: SimEnvironment = summary.receiptType == "Production" ? .production : .sandbox
        if receiptEnvironment == .sandbox, endpoint == .production { return status(21007) }
        if receiptEnvironment == .production, endpoint == .sandbox { return status(21008) }
        let excludeOld = (request["exclude-old-transactions"] as? Bool) ?? false
        let subscriptions = store.read { state in
            Dictionary(summary.purchases.compactMap { state.subscriptions[$0.originalTransactionId] }.map { ($0.originalTransactionId, $0) }) { a, _ in a }
        }
        do {
            var inApp: [[String: Any]] = []
            var latest: [[String: Any]] = []
            var pending: [[String: Any]] = []
            var seen: Set<String> = []
            for purchase in summary.purchases {
                guard let subscription = subscriptions[purchase.originalTransactionId],
                      let t = subscription.transactions.first(where: { $0.transactionId == purchase.transactionId || $0.restoredIds.contains(purchase.transactionId) }) else { continue }
                var entry = emitter.v1Transaction(t)
                entry["transaction_id"] = purchase.transactionId
                inApp.append(entry)
                guard seen.insert(subscription.originalTransactionId).inserted else { continue }
                let transactions = excludeOld ? Array(subscription.transactions.suffix(1)) : subscription.transactions
                latest += transactions.map { emitter.v1Transaction($0) }
                if subscription.kind == .autoRenewable { pending.append(emitter.v1Renewal(subscription, atMs: Int64(Date().timeIntervalSince1970 * 1000))) }
            }
            var answer = status(0)
            answer["receipt"] = [
                "receipt_type": summary.receiptType,
                "bundle_id": summary.bundleId,
                "application_version": store.config.bundleVersion,
                "in_app": inApp,
            ] as [String: Any]
            answer["latest_receipt_info"] = latest
            answer["pending_renewal_info"] = pending
            answer["latest_receipt"] = receiptData
            return answer
        }
    }
}
