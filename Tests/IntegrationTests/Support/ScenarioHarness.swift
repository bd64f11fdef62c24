import Domain
import Foundation
import Postgres
import XCTest

/// What the scenario tests read back through the read API, typed.
struct ScenarioLedgerLine: Decodable, Equatable {
    var kind: String
    var subscriptionKey: String
    var userId: String?
    var purchaseId: String?
    var productId: String?
    var group: String?
    var interval: Interval?
    var amount: Int?
    var before: [Interval]
    var after: [Interval]
    var cutKind: String?
    var reason: String
    var cause: Cause
}

struct ScenarioSubscriptionView: Decodable {
    var subscriptionKey: String
    var userId: String?
    var membership: [GroupMembership]
    var ledger: [ScenarioLedgerLine]

    var grants: [ScenarioLedgerLine] { ledger.filter { $0.kind == "grant" } }
    var kinds: [String] { ledger.map(\.kind) }
    func group(_ id: String = "vip") -> GroupMembership? { membership.first { $0.group == id } }
}

struct ScenarioUserView: Decodable {
    var userId: String
    var subscriptions: [String]
    var groups: [GroupMembership]
    func group(_ id: String = "vip") -> GroupMembership? { groups.first { $0.group == id } }
}

struct ScenarioUserLedger: Decodable {
    var userId: String
    var entries: [ScenarioLedgerLine]
}

/// One running cluster configured for the scenarios (catalog, V2 test chain, verifyReceipt stub),
/// with helpers that post Apple inputs and wait for their effects (never sleeping blindly).
final class ScenarioWorld: @unchecked Sendable {
    // Safe: built once in a test class's setUp, then only read.
    let cluster: Cluster
    let stub: ScenarioVerifyReceiptStub
    let signer: ScenarioBodies.V2Signer

    init() throws {
        signer = try ScenarioBodies.V2Signer.load()
        stub = try ScenarioVerifyReceiptStub()
        cluster = try Cluster()
        do {
            // A boot that fails stops what it started; the stub is ours to stop.
            try cluster.start(extraEnvironment: try ScenarioBodies.clusterEnvironment(verifyReceiptURL: stub.url))
        } catch {
            stub.stop()
            throw error
        }
    }

    func stop() {
        cluster.stop()
        stub.stop()
    }

    func notify(_ body: [String: Any], file: StaticString = #filePath, line: UInt = #line) throws {
        try notify(ScenarioBodies.data(body), file: file, line: line)
    }

    func notify(_ data: Data, file: StaticString = #filePath, line: UInt = #line) throws {
        let response = try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: data)
        XCTAssertEqual(response.status, 200, response.text, file: file, line: line)
    }

    func upload(_ data: Data, file: StaticString = #filePath, line: UInt = #line) throws {
        let response = try HTTP.post("\(cluster.ingestURL)/v1/receipts", body: data)
        XCTAssertEqual(response.status, 200, response.text, file: file, line: line)
    }

    /// The subscription key of `otid` (R18: a non-Production environment is part of it). The scenario
    /// inputs are Sandbox unless a test says otherwise.
    static func key(_ otid: String, _ environment: String = "Sandbox") -> String {
        SubscriptionKey.make(originalTransactionId: otid, environment: environment)
    }

    func subscription(_ otid: String, environment: String = "Sandbox") throws -> ScenarioSubscriptionView? {
        let response = try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(Self.key(otid, environment))")
        guard response.status == 200 else { return nil }
        return try JSONDecoder().decode(ScenarioSubscriptionView.self, from: response.body)
    }

    /// Waits until the subscription's view satisfies `condition`, then returns it.
    @discardableResult
    func subscription(_ key: String, environment: String = "Sandbox", timeout: TimeInterval = 30,
                      until condition: (ScenarioSubscriptionView) -> Bool) throws -> ScenarioSubscriptionView {
        var last: ScenarioSubscriptionView?
        do {
            try waitUntil("subscription \(key) (\(environment)) reaches the expected state", timeout: timeout, interval: 0.1) {
                last = try subscription(key, environment: environment)
                return last.map(condition) ?? false
            }
        } catch {
            throw ClusterError("\(error); last seen: kinds \(last?.kinds ?? []), membership \(last?.membership.map { "\($0.group) \($0.intervals)" } ?? [])")
        }
        return last!
    }

    func user(_ id: String) throws -> ScenarioUserView? {
        let response = try HTTP.get("\(cluster.ingestURL)/v1/users/\(id)/membership")
        guard response.status == 200 else { return nil }
        return try JSONDecoder().decode(ScenarioUserView.self, from: response.body)
    }

    @discardableResult
    func user(_ id: String, timeout: TimeInterval = 30, until condition: (ScenarioUserView) -> Bool) throws -> ScenarioUserView {
        var last: ScenarioUserView?
        try waitUntil("user \(id) reaches the expected state", timeout: timeout, interval: 0.1) {
            last = try user(id)
            return last.map(condition) ?? false
        }
        return last!
    }

    func userLedger(_ id: String) throws -> ScenarioUserLedger {
        let response = try HTTP.get("\(cluster.ingestURL)/v1/users/\(id)/ledger")
        guard response.status == 200 else { throw ClusterError("GET ledger of \(id): \(response.status) \(response.text)") }
        return try JSONDecoder().decode(ScenarioUserLedger.self, from: response.body)
    }

    /// How many distinct inputs dedupe has seen for a subscription, and how many deliveries in all.
    func seen(_ otid: String, environment: String = "Sandbox") throws -> (inputs: Int, deliveries: Int) {
        let db = try cluster.database()
        defer { db.close() }
        let key = Self.key(otid, environment)
        let row = try db.query("SELECT count(*) AS n, coalesce(sum(deliveries), 0)::bigint AS d FROM seen_events WHERE subscription_key = \(key)").first
        return (try row?.int("n") ?? 0, try row?.int("d") ?? 0)
    }

    func waitSeen(_ key: String, environment: String = "Sandbox", inputs: Int, deliveries: Int? = nil, timeout: TimeInterval = 30) throws {
        try waitUntil("dedupe saw \(inputs) inputs (\(deliveries ?? inputs) deliveries) of \(key)", timeout: timeout, interval: 0.1) {
            let seen = try self.seen(key, environment: environment)
            return seen.inputs >= inputs && seen.deliveries >= (deliveries ?? inputs)
        }
    }
}

/// Reads the ledger and the stored states back from PostgreSQL as domain values.
enum ScenarioDatabase {
    static func ledger(_ db: PGConnection, where filter: SQL = "TRUE") throws -> [LedgerEntry] {
        let decoder = JSONDecoder()
        func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T { try decoder.decode(type, from: Data(text.utf8)) }
        return try db.query("SELECT * FROM ledger WHERE " + filter + " ORDER BY entry_id").map { row in
            let start: Int64? = try row.decode("interval_start_ms")
            let end: Int64? = try row.decode("interval_end_ms")
            let cutKind: String? = try row.decode("cut_kind")
            return LedgerEntry(
                kind: LedgerEntry.Kind(rawValue: try row.string("kind"))!, subscriptionKey: try row.string("subscription_key"),
                userId: try row.decode("user_id"), purchaseId: try row.decode("purchase_id"), productId: try row.decode("product_id"),
                group: try row.decode("group_id"), interval: start.map { Interval(startMs: $0, endMs: end) },
                amount: try row.decode("amount"), before: try decode([Interval].self, try row.string("before_intervals")),
                after: try decode([Interval].self, try row.string("after_intervals")), balanceAfter: try row.decode("balance_after"),
                cutKind: cutKind.flatMap(Cut.Kind.init(rawValue:)), reason: try row.string("reason"),
                commandId: try row.string("command_id"), cause: try decode(Cause.self, try row.string("cause")))
        }
    }

    static func states(_ db: PGConnection, where filter: SQL = "TRUE") throws -> [SubscriptionState] {
        try db.query("SELECT state::text AS state FROM subscriptions WHERE " + filter + " ORDER BY subscription_key").map {
            try JSONDecoder().decode(SubscriptionState.self, from: Data(try $0.string("state").utf8))
        }
    }
}
