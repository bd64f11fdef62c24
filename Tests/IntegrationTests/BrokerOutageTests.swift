import Foundation
import XCTest

/// Contract: ingest never answers 200 for a write the broker did not acknowledge. With the
/// broker process gone, a notification gets 503 (Apple retries) within 5 seconds, and `/readyz`
/// answers 503.
final class BrokerOutageTests: XCTestCase {
    func testBrokerStoppedMeans503Within5SecondsNever200() throws {
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: "3000\(Int.random(in: 100_000...999_999))"))
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: body).status, 200)
        XCTAssertEqual(try HTTP.get("\(cluster.ingestURL)/readyz").status, 200)

        cluster.kill("broker")
        Thread.sleep(forTimeInterval: 0.5)
        for _ in 0..<3 {
            let started = Date()
            let response = try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: body, timeout: 15)
            let elapsed = Date().timeIntervalSince(started)
            XCTAssertEqual(response.status, 503, "no acknowledged write, no 200")
            XCTAssertLessThan(elapsed, 5.0)
            XCTAssertNotNil(response.json?["error"])
        }
        // Readiness says so, so a load balancer or an orchestrator takes the instance out.
        let ready = try HTTP.get("\(cluster.ingestURL)/readyz", timeout: 15)
        XCTAssertEqual(ready.status, 503, ready.text)
        XCTAssertEqual(ready.json?["error"] as? String, "broker unavailable")
    }
}
