import Foundation
import Runtime
import Synchronization
import XCTest

/// Contract: PostgreSQL going away mid-run is an outage the stages wait out, not a crash: while it
/// is down, a notification posted to ingest (200: the broker has it) reaches dedupe, the first
/// stage that needs PostgreSQL, which turns not ready (`/readyz` 503, an outage in its metrics) and
/// keeps running; once PostgreSQL is back every stage reconnects by itself, turns ready again with
/// the same pid, and the notification is granted exactly once.
final class PostgresRestartTests: XCTestCase {
    func testStagesWaitOutAPostgresRestartAndLoseNothing() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }
        let pids = Cluster.stages.map { cluster.supervisor.pid(of: $0) }
        let admin = try XCTUnwrap(cluster.adminURLs["dedupe"])

        let restarted = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? cluster.restartPostgres(downFor: 10)
            restarted.signal()
        }
        Thread.sleep(forTimeInterval: 1)
        let key = "7000\(Int.random(in: 100_000...999_999))"
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore",
                                     body: V1Bodies.data(try V1Bodies.initialBuy(originalTransactionId: key))).status, 200)
        try waitUntil("dedupe reports the outage", timeout: 30, interval: 0.2) {
            (try? HTTP.get("\(admin)/readyz", timeout: 2).status) == 503
                && (try? HTTP.get("\(admin)/metrics", timeout: 2).text.contains(#"storeledger_loop_failures_total{class="infrastructure",stage="dedupe"}"#)) == true
        }
        XCTAssertEqual(restarted.wait(timeout: .now() + 60), .success, "PostgreSQL came back")

        try waitUntil("the notification is granted after the restart", timeout: 60, interval: 0.3) {
            ((try? HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)").json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        try cluster.waitUntilReady(timeout: 30)
        XCTAssertEqual(Cluster.stages.map { cluster.supervisor.pid(of: $0) }, pids, "the same workers, never restarted")
        for pid in pids.compactMap({ $0 }) { XCTAssertEqual(kill(pid, 0), 0, "still running") }
        let entries = try cluster.database().query("SELECT count(*)::bigint AS n FROM ledger WHERE subscription_key LIKE \("%\(key)%")")
        XCTAssertEqual(try entries.first?.int64("n"), 1, "granted exactly once")
    }

    /// A hung PostgreSQL (every process stopped, sockets open) holds no client of the read API:
    /// each read is answered 503 within ingest's read timeout (5 s), the support pages too; reads beyond the in-flight
    /// bound at once, and reads work again as soon as the server resumes.
    func testReadsAnswer503InTimeWhilePostgresHangs() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }
        let url = "\(cluster.ingestURL)/v1/users/nobody-\(Int.random(in: 1_000...9_999))/membership"
        XCTAssertNotEqual(try HTTP.get(url).status, 503)
        try cluster.freezePostgres(true)
        var resumed = false
        defer { if !resumed { try? cluster.freezePostgres(false) } }
        let readers = 40   // more than the 32 reads ingest lets wait on PostgreSQL at once
        let answers = Mutex<[(status: Int, seconds: Double)]>([])
        DispatchQueue.concurrentPerform(iterations: readers) { _ in
            let started = Date()
            let status = (try? HTTP.get(url, timeout: 30).status) ?? -1
            answers.withLock { $0.append((status, Date().timeIntervalSince(started))) }
        }
        let all = answers.withLock { $0 }
        XCTAssertEqual(all.map(\.status), Array(repeating: 503, count: readers), "every read answered 503 while PostgreSQL hangs")
        XCTAssertLessThan(all.map(\.seconds).max() ?? 99, 12, "within the read timeout, not held")
        let ready = try HTTP.get("\(cluster.ingestURL)/readyz", timeout: 20)
        XCTAssertEqual(ready.status, 503, "not ready while the database hangs")
        // The support pages read PostgreSQL too, within the same bounds.
        let started = Date()
        let page = try HTTP.get("\(cluster.ingestURL)/support/users/nobody", timeout: 30, authorization: "Bearer " + TestCredentials.adminKey)
        XCTAssertEqual(page.status, 503, page.text)
        XCTAssertLessThan(Date().timeIntervalSince(started), 8, "a support page answers within the read timeout (5 s), not held")
        try cluster.freezePostgres(false)
        resumed = true
        try waitUntil("reads work again once PostgreSQL resumes", timeout: 30, interval: 0.5) {
            (try? HTTP.get(url, timeout: 10).status).map { $0 != 503 } ?? false
        }
    }
}
