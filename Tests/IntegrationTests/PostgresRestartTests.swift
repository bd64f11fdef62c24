import Foundation
import Runtime
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
}
