import Domain
import Foundation
import HTTPServer
import Postgres
import Stages
import Store
import Synchronization
import TestSupport
import XCTest

/// Contract: a webhook endpoint gets up to `concurrency` POSTs at once, never two of one user at a
/// time, and each user's events in order, also when one fails and is retried; every event once.
/// Against a real PostgreSQL and slow local receivers (100 ms per answer).
final class WebhookConcurrencyTests: PGTestCase {
    func testDifferentUsersGoSideBySideEachUsersEventsInOrder() throws {
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        // Each user's events next to each other in the relay's order: only per-user holding keeps them apart.
        let users = 12, perUser = 3
        var seq: Int64 = 0
        for user in 0..<users {
            for _ in 0..<perUser {
                seq += 1
                try db.execute("""
                    INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, relay_seq, kafka_partition)
                    VALUES (\("u-\(user)"), \(seq), 's', 'membership.granted', \("{\"user\":\"u-\(user)\"}"), \(seq), 0)
                    """)
            }
        }
        let wide = try SlowReceiver(failFirstAttemptOf: 1), narrow = try SlowReceiver()
        defer { wide.stop(); narrow.stop() }
        let secret = Array("webhook-test-secret-0123456789".utf8)
        let config = WebhookConfig(endpoints: [
            .init(id: "wide", url: URL(string: wide.url)!, secret: secret, start: .beginning, concurrency: 4),
            .init(id: "narrow", url: URL(string: narrow.url)!, secret: secret, start: .beginning, concurrency: 1),
        ], retry: WebhookRetryPolicy(baseDelayMs: 300, maxDelayMs: 300, giveUpAfterMs: 60_000))
        let service = ServiceThread(WebhookDeliveryService(config: config, databaseURL: url))
        defer { service.stop() }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, wide.accepted.count < Int(seq) || narrow.accepted.count < Int(seq) {
            Thread.sleep(forTimeInterval: 0.1)
        }
        Thread.sleep(forTimeInterval: 0.5)   // nothing more arrives
        XCTAssertEqual(wide.arrivals.count, Int(seq) + 1, "every event once, and the failed one once more")
        XCTAssertEqual(narrow.arrivals.count, Int(seq), "every event once")
        for receiver in [wide, narrow] {
            XCTAssertEqual(Set(receiver.accepted), Set(1...seq))
            var perUserArrivals: [String: [Int64]] = [:]
            for arrival in receiver.arrivals { perUserArrivals[arrival.user, default: []].append(arrival.entry) }
            for (user, entries) in perUserArrivals where user != "u-0" {
                XCTAssertEqual(entries, entries.sorted(), "per-user order for \(user)")
            }
            XCTAssertEqual(receiver.maxSameUserInFlight, 1, "never two of one user at once")
        }
        XCTAssertEqual(wide.arrivals.filter { $0.user == "u-0" }.map(\.entry), [1, 1, 2, 3], "2 waits until 1 is delivered")
        XCTAssertEqual(wide.maxInFlight, 4, "four users' events side by side")
        XCTAssertEqual(narrow.maxInFlight, 1)
    }

    /// An event nothing can rebuild (its ledger row gone) is given up at once, so the user's next event
    /// goes out; one a newer release wrote stays pending, untried, and holds back that user's later ones.
    func testAnUnreadableEventIsGivenUpAtOnceAndANewerReleasesWaits() throws {
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        func row(_ user: String, _ entry: Int64, payload: String? = nil, details: String? = nil) throws {
            try db.execute("""
                INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, details, relay_seq, kafka_partition)
                VALUES (\(user), \(entry), 's', 'RENEWAL', \(payload), decode(\(details), 'hex'), \(entry), 0)
                """)
        }
        try row("u-a", 1, payload: #"{"user":"u-a"}"#)
        try row("u-b", 2, details: "01000000000000")          // version 1, no ledger row 2
        try row("u-b", 3, payload: #"{"user":"u-b"}"#)
        try row("u-c", 4, details: "02")                      // a later version
        try row("u-c", 5, payload: #"{"user":"u-c"}"#)
        let receiver = try SlowReceiver()
        defer { receiver.stop() }
        let config = WebhookConfig(endpoints: [
            .init(id: "crm", url: URL(string: receiver.url)!, secret: Array("webhook-test-secret-0123456789".utf8), start: .beginning),
        ], retry: WebhookRetryPolicy(baseDelayMs: 60_000, maxDelayMs: 60_000, giveUpAfterMs: 3_600_000))
        let service = ServiceThread(WebhookDeliveryService(config: config, databaseURL: url))
        defer { service.stop() }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, receiver.accepted.count < 2 { Thread.sleep(forTimeInterval: 0.1) }
        Thread.sleep(forTimeInterval: 1)   // later rounds change nothing
        XCTAssertEqual(Set(receiver.accepted), [1, 3], "u-b's next event is not held behind the unreadable one")
        let deliveries = Dictionary(uniqueKeysWithValues: try db.query("""
            SELECT entry_id, status, attempts, coalesce(last_error, '') AS error FROM webhook_deliveries WHERE endpoint_id = 'crm'
            """).map { (try $0.int64("entry_id"), (status: try $0.string("status"), attempts: try $0.int("attempts"), error: try $0.string("error"))) })
        XCTAssertEqual(deliveries[2]?.status, "gave_up")
        XCTAssertEqual(deliveries[2]?.attempts, 1)
        XCTAssertTrue(deliveries[2]?.error.contains("ledger row is missing") == true, deliveries[2]?.error ?? "")
        XCTAssertEqual(deliveries[4]?.status, "pending", "a newer release's deliverer sends it")
        XCTAssertEqual(deliveries[4]?.attempts, 0)
        XCTAssertEqual(deliveries[5]?.status, "pending", "u-c's later event waits behind it")
        XCTAssertEqual(deliveries[5]?.attempts, 0)
    }
}

/// A receiver that answers 200 after 100 ms and counts what is in flight.
private final class SlowReceiver: Sendable {
    struct Arrival: Sendable { var user: String; var entry: Int64 }
    private struct State: Sendable {
        var arrivals: [Arrival] = []
        var accepted: [Int64] = []
        var inFlight: [String: Int] = [:]
        var maxInFlight = 0
        var maxSameUser = 0
    }
    private final class Counts: Sendable { let state = Mutex(State()) }
    private let counts: Counts
    private let server: HTTPServer

    /// `failFirstAttemptOf`: the first POST of that entry gets HTTP 500.
    init(failFirstAttemptOf failing: Int64? = nil) throws {
        let counts = Counts()
        self.counts = counts
        server = HTTPServer(port: 0, threads: 8, maxBodyBytes: 1 << 16) { request, responder in
            let entry = Int64((request.headers["StoreLedger-Event-Id"] ?? "").dropFirst("ledger-".count)) ?? -1
            let user = ((try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: String])?["user"] ?? "?"
            let fails = counts.state.withLock { state in
                state.arrivals.contains { $0.entry == entry } == false && entry == failing
            }
            counts.state.withLock {
                $0.arrivals.append(Arrival(user: user, entry: entry))
                $0.inFlight[user, default: 0] += 1
                $0.maxInFlight = max($0.maxInFlight, $0.inFlight.values.reduce(0, +))
                $0.maxSameUser = max($0.maxSameUser, $0.inFlight[user] ?? 0)
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) {
                counts.state.withLock {
                    $0.inFlight[user, default: 1] -= 1
                    if !fails { $0.accepted.append(entry) }
                }
                responder.respond(HTTPResponse(status: fails ? 500 : 200))
            }
        }
        try server.start()
    }

    private var snapshot: State { counts.state.withLock { $0 } }
    var url: String { "http://127.0.0.1:\(server.boundPort)/hooks" }
    var arrivals: [Arrival] { snapshot.arrivals }
    var accepted: [Int64] { snapshot.accepted }
    var maxInFlight: Int { snapshot.maxInFlight }
    var maxSameUserInFlight: Int { snapshot.maxSameUser }
    func stop() { server.stop() }
}
