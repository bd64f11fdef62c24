import Foundation
import HTTPServer
@testable import Simulator
import Synchronization
import XCTest

/// Contract: the driver posts every delivery to a real HTTP server (libmicrohttpd), retries a
/// failed post on Apple's schedule (compressed) until it succeeds or the schedule runs out, never
/// retries the sandbox, injects duplicates and lost acknowledgements when asked, and counts a
/// deliberately malformed upload's 400 as expected.
final class DriverTests: XCTestCase {
    /// Answers 503 to the first `failures` posts of each body, then 200; 400 to bodies marked bad.
    final class Counts: Sendable {
        let map = Mutex<[String: Int]>([:])
        func withLock<R: Sendable>(_ body: (inout [String: Int]) -> R) -> R { map.withLock { body(&$0) } }
    }

    final class FlakyIngest: Sendable {
        let server: HTTPServer
        let seen = Counts()

        init(failures: Int) throws {
            let seen = self.seen
            server = HTTPServer(port: 0, threads: 2, maxBodyBytes: 1 << 20) { request, responder in
                guard request.method == "POST" else { responder.respond(.json(["status": "ok"])); return }
                let body = String(decoding: request.body, as: UTF8.self)
                let count = seen.withLock { counts -> Int in
                    counts[body, default: 0] += 1
                    return counts[body]!
                }
                if body.contains("bad") { responder.respond(.error(status: 400, reason: "bad")); return }
                responder.respond(count <= failures ? .error(status: 503, reason: "try later") : .json(["status": "accepted"]))
            }
            try server.start()
        }

        var url: String { "http://127.0.0.1:\(server.boundPort)" }
    }

    func delivery(_ name: String, _ channel: Delivery.Channel, _ environment: SimEnvironment = .production, rejected: Bool = false) -> Delivery {
        Delivery(channel: channel, body: Array("{\"id\":\"\(name)\"}".utf8), simMs: 0, userId: "u", label: name,
                 environment: environment, expectsRejection: rejected)
    }

    func run(_ ingest: FlakyIngest, _ deliveries: [Delivery], configure: (inout DriverConfig) -> Void = { _ in }) throws -> DriverStats {
        var config = DriverConfig(ingestURL: ingest.url)
        config.connections = 3
        config.msPerSimHour = 0.5
        config.duplicateShare = 0
        config.lostAckShare = 0
        config.reorderShare = 0
        configure(&config)
        let driver = Driver(config: config)
        try driver.start()
        defer { driver.stop() }
        driver.submit(deliveries)
        XCTAssertTrue(driver.drain(timeout: 20))
        return driver.snapshot
    }

    func testRetriesOnApplesScheduleUntilAccepted() throws {
        let ingest = try FlakyIngest(failures: 2)
        defer { ingest.server.stop() }
        let stats = try run(ingest, [delivery("v2", .notificationV2), delivery("v1", .notificationV1), delivery("upload", .receiptUpload)])
        XCTAssertEqual(stats.accepted, 3)
        XCTAssertEqual(stats.retries, 6)
        XCTAssertEqual(stats.undelivered, 0)
        XCTAssertEqual(stats.unexpectedStatus[503], 6)
        XCTAssertEqual(ingest.seen.withLock { $0 }.values.sorted(), [3, 3, 3])
    }

    func testGivesUpAfterTheScheduleAndNeverRetriesTheSandbox() throws {
        let ingest = try FlakyIngest(failures: 100)
        defer { ingest.server.stop() }
        let stats = try run(ingest, [delivery("v2", .notificationV2), delivery("v1", .notificationV1), delivery("sandbox", .notificationV2, .sandbox)])
        XCTAssertEqual(stats.undelivered, 3)
        let posts = ingest.seen.withLock { $0 }
        XCTAssertEqual(posts["{\"id\":\"v2\"}"], 6, "V2: the first try and 5 retries")
        XCTAssertEqual(posts["{\"id\":\"v1\"}"], 4, "V1: the first try and 3 retries")
        XCTAssertEqual(posts["{\"id\":\"sandbox\"}"], 1, "the sandbox sends once")
    }

    func testDuplicatesLostAcksAndExpectedRejections() throws {
        let ingest = try FlakyIngest(failures: 0)
        defer { ingest.server.stop() }
        let many = (0..<200).map { delivery("n\($0)", .notificationV2) } + [delivery("bad", .receiptUpload, rejected: true)]
        let stats = try run(ingest, many) { config in
            config.duplicateShare = 0.2
            config.lostAckShare = 0.2
            config.reorderShare = 0.3
            config.seed = 99
        }
        XCTAssertGreaterThanOrEqual(stats.expectedRejections, 1)
        XCTAssertGreaterThan(stats.duplicatesInjected, 10)
        XCTAssertGreaterThan(stats.lostAcks, 10)
        XCTAssertGreaterThan(stats.reordered, 20)
        XCTAssertEqual(stats.unexpectedStatus, [:])
        let posts = ingest.seen.withLock { $0 }
        XCTAssertEqual(posts.count, 201, "every delivery arrived")
        XCTAssertEqual(posts.values.reduce(0, +), stats.attempts)
        XCTAssertEqual(stats.attempts, 201 + stats.duplicatesInjected + stats.retries)
    }

    func testRateLimitHoldsTheTargetRate() throws {
        let ingest = try FlakyIngest(failures: 0)
        defer { ingest.server.stop() }
        let started = Date()
        _ = try run(ingest, (0..<60).map { delivery("r\($0)", .notificationV2) }) { $0.ratePerSecond = 200 }
        // The pacer lets a late sender catch up by at most 50 ms (10 posts at 200/s), so the 60 posts
        // take at least (60 - 1 - 10) x 5 ms = 245 ms however fast the machine: a lower bound only.
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.244, "60 posts at 200/s take about 0.3 s")
    }
}
