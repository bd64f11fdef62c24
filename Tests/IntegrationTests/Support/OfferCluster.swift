import Domain
import Foundation
import LocalStack
import Runtime
import Synchronization
import TestSupport
import XCTest

/// The cluster plus what offers need: a catalog with intro variants and promotional offers (given to
/// ingest and classify through STORELEDGER_CATALOG) and a `storeledger signer` process holding the
/// generated offer key (TestSupport.GeneratedPKI), started with the stages; its standard error is
/// relayed to `signerLogPath` so its log lines can be inspected.
final class OfferCluster: @unchecked Sendable {
    // Safe: set once in start() on the test thread, read afterwards.
    let cluster: Cluster
    let directory: URL
    var catalogPath: String { directory.appendingPathComponent("catalog.json").path }
    var signerLogPath: String { directory.appendingPathComponent("signer.log").path }
    var signerMetricsPath: String { directory.appendingPathComponent("signer.prom").path }

    static let bundleId = "com.storeledger.offers-test"
    static let keyId = "TESTKEY001"
    static let issuerId = "57246542-96fe-1a63-e053-0824d011072a"
    static let signTimeoutMs: Int64 = 1500
    static let day: Int64 = 86_400_000

    /// vip.1m (plain) and vip.1m.intro (same subscription with an intro offer, R8) at level 2,
    /// vip.12m.premium at level 1, and one promotional offer per audience.
    static let catalog = Catalog(
        bundleId: bundleId,
        products: [
            CatalogProduct(id: "vip.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30, introVariantOf: "vip.1m.intro"),
            CatalogProduct(id: "vip.1m.intro", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.12m.premium", kind: .autoRenewable, group: "vip", level: 1, durationDays: 365),
        ],
        promotionalOffers: [
            PromotionalOffer(id: "winback", productId: "vip.1m", audience: .lapsed, maxRedemptionsPerUser: 1, priority: 10),
            PromotionalOffer(id: "loyalty", productId: "vip.1m", audience: .current, maxRedemptionsPerUser: 2, priority: 20),
            PromotionalOffer(id: "upgrade", productId: "vip.12m.premium", audience: .currentLowerLevel, priority: 10),
        ])

    init(logFile: String? = nil) throws {
        cluster = try Cluster(logFile: logFile)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("offer-cluster-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    static var signingKeyPath: String { get throws { try GeneratedPKI.shared().offerKeyPath } }

    func start(extraEnvironment: [String: String] = [:]) throws {
        try JSONEncoder().encode(Self.catalog).write(to: URL(fileURLWithPath: catalogPath))
        try cluster.start(extraEnvironment: ["STORELEDGER_CATALOG": catalogPath,
                                             "STORELEDGER_OFFER_SIGN_TIMEOUT_MS": String(Self.signTimeoutMs)].merging(extraEnvironment) { $1 },
                          extraChildren: [try signer()])
        try waitUntilSigning()
    }

    /// The whole path is live once an eligibility JWS (which needs no purchase history) comes back:
    /// the signer has joined its group and ingest reads the reply topic.
    func waitUntilSigning() throws {
        try waitUntil("ingest gets answers from the signer", timeout: 60, interval: 0.2) {
            let response = try HTTP.post("\(cluster.ingestURL)/v1/offers/signature", json: [
                "user_id": "readiness-probe", "product_id": "vip.1m", "kind": "introductory-eligibility", "transaction_id": "1",
            ], timeout: 5)
            return response.status == 200
        }
    }

    private func signer() throws -> StackChild {
        .signer(environment: [
            "STORELEDGER_SIGNING_KEYS": "\(Self.keyId)=\(try Self.signingKeyPath)",
            "STORELEDGER_SIGNING_ISSUER_ID": Self.issuerId,
            "STORELEDGER_SIGNER_METRICS_FILE": signerMetricsPath,
            "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "STORELEDGER_LOG_LEVEL": "info",
        ], onExit: .ignore, stderr: .relay(to: signerLogPath))
    }

    var signerPid: Int32? { cluster.supervisor.pid(of: "signer") }

    func stop() {
        cluster.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Seeds a purchase history the way production traffic arrives: one V1 notification per
    /// subscription (Apple's facts: periods, trial/intro flags, promotional_offer_id) POSTed to
    /// ingest, each transaction carrying `app_account_token` = `user` (the app sets StoreKit's
    /// appAccountToken to the account id; the catalog's default account policy links on it), so
    /// classify itself emits the account link. Nothing is written to a topic directly.
    func seed(user: String, subscriptions: [OfferSubscription]) throws {
        for subscription in subscriptions {
            let response = try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: try subscription.notification(account: user))
            guard response.status == 200 else { throw ClusterError("seeding \(subscription.key): ingest answered \(response.status)") }
        }
        let expected = subscriptions.reduce(0) { $0 + $1.purchases.count }
        try waitUntil("user \(user)'s \(expected) purchases are in PostgreSQL", timeout: 40, interval: 0.25) {
            let rows = try cluster.database().query("SELECT state::text AS state FROM subscriptions WHERE user_id = \(user)")
            let states = try rows.map { try JSONDecoder().decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) }
            return states.reduce(0) { $0 + $1.grants.count } >= expected
        }
    }
}

/// One subscription (one Apple ID) and its transactions, as a V1 notification would report them.
struct OfferSubscription {
    struct Purchase {
        var transactionId: String
        var productId: String
        var startMs: Int64
        var endMs: Int64
        var isTrial = false
        var isIntro = false
        var promotionalOfferId: String?
    }

    var key: String
    var purchases: [Purchase]

    /// The V1 INITIAL_BUY template, renamed, with these transactions in `latest_receipt_info`,
    /// each carrying `account` as its `app_account_token`.
    func notification(account: String) throws -> Data {
        var body = try V1Bodies.initialBuy(originalTransactionId: key)
        var unified = body["unified_receipt"] as! [String: Any]
        let template = (unified["latest_receipt_info"] as! [[String: Any]])[0]
        unified["latest_receipt_info"] = purchases.map { purchase -> [String: Any] in
            var row = template
            row["bid"] = OfferCluster.bundleId
            row["transaction_id"] = purchase.transactionId
            row["web_order_line_item_id"] = purchase.transactionId + "1"
            row["product_id"] = purchase.productId
            row["purchase_date_ms"] = String(purchase.startMs)
            row["expires_date_ms"] = String(purchase.endMs)
            for name in ["purchase_date", "purchase_date_pst", "expires_date", "expires_date_pst"] { row.removeValue(forKey: name) }
            row["is_trial_period"] = purchase.isTrial ? "true" : "false"
            row["is_in_intro_offer_period"] = purchase.isIntro ? "true" : "false"
            if let offer = purchase.promotionalOfferId { row["promotional_offer_id"] = offer }
            row["app_account_token"] = account
            return row
        }
        var pending = unified["pending_renewal_info"] as! [[String: Any]]
        pending[0]["product_id"] = purchases.last?.productId
        pending[0]["auto_renew_product_id"] = purchases.last?.productId
        unified["pending_renewal_info"] = pending
        body["unified_receipt"] = unified
        body["auto_renew_product_id"] = purchases.last?.productId
        // The app's bundle: classify records purchases of another app without granting them.
        body["bid"] = OfferCluster.bundleId
        return try V1Bodies.data(body)
    }
}

/// Sockets of a process, from /proc: its fds' socket inodes matched against the kernel's socket
/// tables of its network namespace.
enum ProcessSockets {
    struct Socket: CustomStringConvertible {
        var table: String
        var localPort: Int?
        /// TCP LISTEN (state 0A) or a Unix socket accepting connections (__SO_ACCEPTCON).
        var listening: Bool
        var description: String { "\(table):\(localPort.map(String.init) ?? "-")\(listening ? " LISTEN" : "")" }
    }

    static func inodes(pid: Int32) throws -> Set<String> {
        let fdDirectory = "/proc/\(pid)/fd"
        var inodes: Set<String> = []
        for fd in try FileManager.default.contentsOfDirectory(atPath: fdDirectory) {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(fdDirectory)/\(fd)"),
                  target.hasPrefix("socket:[") else { continue }
            inodes.insert(String(target.dropFirst(8).dropLast()))
        }
        return inodes
    }

    /// Every socket `pid` holds that the tcp, tcp6, udp, udp6 or unix tables know.
    static func all(pid: Int32) throws -> [Socket] {
        let mine = try inodes(pid: pid)
        var sockets: [Socket] = []
        for table in ["tcp", "tcp6", "udp", "udp6", "unix"] {
            // /proc files report size 0: read to EOF rather than by size.
            guard let data = FileHandle(forReadingAtPath: "/proc/\(pid)/net/\(table)")?.readDataToEndOfFile() else { continue }
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                if table == "unix" {
                    // Num RefCount Protocol Flags Type St Inode [Path]
                    guard fields.count > 6, mine.contains(String(fields[6])) else { continue }
                    let flags = Int(fields[3], radix: 16) ?? 0
                    sockets.append(Socket(table: table, localPort: nil, listening: flags & 0x10000 != 0))
                } else {
                    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
                    guard fields.count > 9, mine.contains(String(fields[9])) else { continue }
                    let port = Int(fields[1].split(separator: ":").last ?? "", radix: 16)
                    sockets.append(Socket(table: table, localPort: port, listening: table.hasPrefix("tcp") && fields[3] == "0A"))
                }
            }
        }
        return sockets
    }
}
