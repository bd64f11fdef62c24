import Domain
import Foundation
import Runtime
import XCTest

/// Contract: every worker started with `--admin-port` answers `/healthz`, `/readyz` and `/metrics`
/// (the cluster itself waits on `/readyz`, never on stdout). A member whose PostgreSQL is
/// unreachable is alive but not ready (503 with the reason, every partition paused, nothing
/// committed) while the healthy pipeline keeps granting; SIGTERM stops it within 10 s, exit 0.
final class WorkerHealthTests: XCTestCase {
    func testOutageMeansNotReadyAndSigtermStopsGracefully() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }

        let dedupe = try XCTUnwrap(cluster.adminURLs["dedupe"])
        XCTAssertEqual(try HTTP.get("\(dedupe)/healthz").status, 200)
        XCTAssertEqual(try HTTP.get("\(dedupe)/readyz").status, 200)
        let metrics = String(decoding: try HTTP.get("\(dedupe)/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains(#"storeledger_loop_ready{stage="dedupe"} 1"#), metrics)

        // Something for the broken member to read: one notification through the healthy pipeline.
        let key = "3000\(Int.random(in: 100_000...999_999))"
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore",
                                     body: V1Bodies.data(try V1Bodies.initialBuy(originalTransactionId: key))).status, 200)
        try waitUntil("the notification is granted", timeout: 30, interval: 0.2) {
            ((try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)").json?["ledger"] as? [Any])?.count ?? 0) == 1
        }

        // A second membership group whose PostgreSQL does not exist (port 1 refuses connections).
        let port = try FreePort.loopback()
        let broken = Process()
        broken.executableURL = URL(fileURLWithPath: try Cluster.binary())
        broken.arguments = ["worker", "membership", "--group", "outage-\(UUID().uuidString)", "--admin-port", String(port),
                            "--database-url", "postgresql://127.0.0.1:1/none?connect_timeout=2"]
        var environment = ProcessInfo.processInfo.environment
        environment["KAFKA_BOOTSTRAP_SERVERS"] = cluster.bootstrap
        environment["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS"] = "3000"
        environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"] = "10"
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        broken.environment = environment
        try broken.run()
        defer { if broken.isRunning { kill(broken.processIdentifier, SIGKILL) } }
        let admin = "http://127.0.0.1:\(port)"

        var reason = ""
        try waitUntil("the member without PostgreSQL reports an outage", timeout: 60, interval: 0.2) {
            guard let response = try? HTTP.get("\(admin)/readyz", timeout: 2), response.status == 503 else { return false }
            reason = response.json?["reasons"] as? String ?? ""
            return reason.contains("outage")
        }
        XCTAssertEqual(try HTTP.get("\(admin)/healthz").status, 200, "alive while not ready")
        let brokenMetrics = String(decoding: try HTTP.get("\(admin)/metrics").body, as: UTF8.self)
        XCTAssertTrue(brokenMetrics.contains(#"storeledger_loop_ready{stage="membership"} 0"#), brokenMetrics)
        XCTAssertFalse(brokenMetrics.contains(#"storeledger_loop_paused_partitions{stage="membership"} 0"#), brokenMetrics)
        XCTAssertTrue(brokenMetrics.contains(#"class="infrastructure""#), brokenMetrics)
        XCTAssertFalse(brokenMetrics.contains("storeledger_dead_letters_total"), "an outage never dead-letters")

        // The healthy pipeline is unaffected.
        XCTAssertEqual(try HTTP.get("\(cluster.adminURLs["membership"]!)/readyz").status, 200)

        let signalled = Date()
        kill(broken.processIdentifier, SIGTERM)
        try waitUntil("the member stops after SIGTERM", timeout: 10, interval: 0.05) { !broken.isRunning }
        print("worker stopped \(String(format: "%.2f", Date().timeIntervalSince(signalled))) s after SIGTERM")
        XCTAssertEqual(broken.terminationStatus, 0)
    }
}
