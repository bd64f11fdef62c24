import Domain
import Foundation
import Kafka
import XCTest

/// Contract: a V1 notification POSTed to the running ingest process travels through the real
/// broker and the four stage worker processes into PostgreSQL; the membership API then shows the
/// periods Apple charged and the ledger entries that granted them. A notification delivered twice
/// grants once; a body that is not JSON is refused with 400 and reaches no topic; a JSON body that
/// is not a notification is accepted at the edge and dead-lettered by decode with its original bytes.
final class PipelineTests: XCTestCase {
    nonisolated(unsafe) static var cluster: Cluster?

    override class func setUp() {
        super.setUp()
        do {
            let cluster = try Cluster()
            try cluster.start()
            Self.cluster = cluster
        } catch {
            print("cluster failed to start: \(error)")
        }
    }

    override class func tearDown() {
        cluster?.stop()
        cluster = nil
        super.tearDown()
    }

    private func running() throws -> Cluster {
        guard let cluster = Self.cluster else { throw ClusterError("cluster did not start (see log above)") }
        return cluster
    }

    private func subscription(_ key: String, _ cluster: Cluster, until condition: @escaping ([String: Any]) -> Bool) throws -> [String: Any] {
        var view: [String: Any] = [:]
        try waitUntil("subscription \(key) satisfies the expectation", timeout: 30, interval: 0.2) {
            let response = try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)")
            guard response.status == 200, let json = response.json else { return false }
            view = json
            return condition(json)
        }
        return view
    }

    func testInitialBuyThenRenewalShowBothPeriodsWithTheirLedgerEntries() throws {
        let cluster = try running()
        let key = "1000\(Int.random(in: 100_000...999_999))"
        let initial = try V1Bodies.initialBuy(originalTransactionId: key)
        let renew = V1Bodies.didRenew(after: initial, transactionId: key + "2")

        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: V1Bodies.data(initial)).status, 200)
        _ = try subscription(key, cluster) { (($0["ledger"] as? [Any])?.count ?? 0) >= 1 }
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: V1Bodies.data(renew)).status, 200)
        let view = try subscription(key, cluster) { (($0["ledger"] as? [Any])?.count ?? 0) >= 2 }

        let ledger = view["ledger"] as! [[String: Any]]
        XCTAssertEqual(ledger.count, 2, "one grant per period")
        XCTAssertEqual(ledger.map { $0["kind"] as? String }, ["grant", "grant"])
        let firstStart: Int64 = 1_593_216_159_000, firstEnd: Int64 = 1_595_808_159_000
        let intervals = ledger.map { ($0["interval"] as! [String: Any]) }
        XCTAssertEqual(intervals[0]["startMs"] as? Int64, firstStart)
        XCTAssertEqual(intervals[0]["endMs"] as? Int64, firstEnd)
        XCTAssertEqual(intervals[1]["startMs"] as? Int64, firstEnd)
        XCTAssertEqual(intervals[1]["endMs"] as? Int64, firstEnd + V1Bodies.month)
        // Before/after show the entitlement growing; the cause names the notification and transaction.
        XCTAssertEqual((ledger[0]["before"] as! [Any]).count, 0)
        XCTAssertEqual((ledger[1]["after"] as! [[String: Any]]).first?["endMs"] as? Int64, firstEnd + V1Bodies.month)
        let causes = ledger.map { $0["cause"] as! [String: Any] }
        XCTAssertEqual(causes.map { $0["notificationType"] as? String }, ["INITIAL_BUY", "DID_RENEW"])
        XCTAssertEqual(causes.map { $0["transactionId"] as? String }, [key, key + "2"])
        XCTAssertEqual(causes[0]["source"] as? String, "notification-v1")
        XCTAssertNotNil((causes[0]["rawPosition"] as? [String: Any])?["offset"])

        let membership = (view["membership"] as! [[String: Any]]).first!
        XCTAssertEqual((membership["intervals"] as! [[String: Any]]).count, 1, "the two periods are contiguous")
        XCTAssertEqual(membership["expiresMs"] as? Int64, firstEnd + V1Bodies.month)
    }

    func testNotificationPostedTwiceGrantsOnce() throws {
        let cluster = try running()
        let key = "2000\(Int.random(in: 100_000...999_999))"
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: key))
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: body).status, 200)
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: body).status, 200)
        // A third, later copy through a different path of the pipeline (new bytes, same purchase) also grants nothing new.
        var copy = try V1Bodies.initialBuy(originalTransactionId: key)
        copy["bvrs"] = "99999"
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: V1Bodies.data(copy)).status, 200)
        _ = try subscription(key, cluster) { (($0["ledger"] as? [Any])?.count ?? 0) >= 1 }
        // Give the duplicates time to travel the whole pipeline, then check nothing was added.
        let seen = try cluster.database().query("SELECT count(*) AS n FROM seen_events WHERE subscription_key = \(key)")
        try waitUntil("all three deliveries reached dedupe", timeout: 20) {
            (try cluster.database().query("SELECT count(*) AS n FROM seen_events WHERE subscription_key = \(key)").first?.int("n") ?? 0) >= 2
        }
        _ = seen
        Thread.sleep(forTimeInterval: 1)
        let view = try subscription(key, cluster) { _ in true }
        XCTAssertEqual((view["ledger"] as! [Any]).count, 1, "one purchase, one grant")
    }

    func testNonJSONBodyGets400AndReachesNoTopic() throws {
        let cluster = try running()
        let marker = "not-json-\(UUID().uuidString)"
        let response = try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: Data(marker.utf8), contentType: "text/plain")
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(response.json?["error"] as? String, "body is not a JSON object")
        let records = try cluster.readTopic(Topic.notificationsRaw)
        XCTAssertFalse(records.contains { String(decoding: $0.value, as: UTF8.self).contains(marker) })
    }

    func testOversizedBodyGets413() throws {
        let cluster = try running()
        let big = Data(repeating: 0x20, count: 3 * 1024 * 1024)
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: big).status, 413)
    }

    func testUndecodableNotificationIsDeadLetteredWithOriginalBytes() throws {
        let cluster = try running()
        let marker = UUID().uuidString
        // With the V1 shared secret (checked and removed at the edge), so decode sees the rest.
        let posted = Data("{\"hello\": \"\(marker)\", \"password\": \"\(TestCredentials.v1Secret)\"}".utf8)
        let body = Data("{\"hello\": \"\(marker)\"}".utf8)
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: posted).status, 200)
        var letter: DeadLetterRecord?
        try waitUntil("the dead letter appears", timeout: 30, interval: 0.5) {
            letter = try cluster.readTopic(Topic.deadLetter, atLeast: 1, timeout: 8)
                .compactMap(DeadLetterRecord.init)
                .first { $0.value == [UInt8](body) }
            return letter != nil
        }
        XCTAssertEqual(letter?.stage, "decode")
        XCTAssertEqual(letter?.kind, "missing_field")
        XCTAssertEqual(letter?.source.topic, Topic.notificationsRaw)
        XCTAssertTrue(letter?.headers.contains { $0.name == "storeledger.received-at" } ?? false)
    }
}
