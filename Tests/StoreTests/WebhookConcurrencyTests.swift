import Domain
import Foundation
import HTTPServer
import Postgres
import Runtime
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
        let service = WebhookDeliveryService(config: config, databaseURL: url)
        let stop = StopSignal()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? service.run(until: stop)
            done.signal()
        }
        defer {
            stop.stop()
            done.wait()
        }
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
