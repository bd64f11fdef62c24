import Auth
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
@testable import Ingest
import Kafka
import Synchronization
import XCTest

/// Ingest when what it depends on fails. Requests that wait on something slow outside ingest (the
/// broker for a raw record, Apple for an admin refresh) hold a thread each: beyond their bound, more
/// are answered 503 at once instead of piling up. A producer that failed for good stops ingest.
/// Served by the real HTTP server on loopback; the broker address has nothing behind it.
final class IngestResilienceTests: XCTestCase {
    private let kafka = KafkaConfig(bootstrapServers: "127.0.0.1:1", clientId: "in-flight-bound-test")

    func testRawRecordReadsBeyondTheReadBoundAreRefusedAtOnce() throws {
        let routes = SupportRoutes(pool: nil, kafka: kafka, bounded: BoundedReads(timeout: .seconds(5), maxInFlight: 1))
        let server = HTTPServer(port: 0, threads: 2, maxBodyBytes: 1024) { request, responder in routes.handle(request, responder) }
        try server.start()
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.boundPort)/support/raw/storeledger.notifications.raw/0/0"

        // The first read waits on the absent broker (seconds) and holds the only place.
        let first = Self.send(url)
        Thread.sleep(forTimeInterval: 0.5)
        let started = Date()
        let second = Self.send(url).wait()
        XCTAssertEqual(second.status, 503)
        XCTAssertTrue(second.body.contains("Too many reads"), second.body)
        XCTAssertLessThan(Date().timeIntervalSince(started), 2, "refused at once, not after the broker's wait")

        let held = first.wait()
        XCTAssertEqual(held.status, 503, "the broker is absent")
        XCTAssertTrue(held.body.contains("Broker unavailable"), held.body)
        // The place is given back: the next read waits on the broker again instead of being refused.
        XCTAssertTrue(Self.send(url).wait().body.contains("Broker unavailable"))
    }

    func testAdminAppleCallsBeyondTheirBoundAreRefusedAtOnce() throws {
        let adminKey = "slk_in-flight-bound-admin"
        let release = DispatchSemaphore(value: 0)
        let calls = Atomic<Int>(0)
        let slowRefresh = ServerAPIAdminRoutes(refresh: { _ in
            calls.add(1, ordering: .relaxed)
            release.wait()
            return (200, Data(#"{"refresh":{}}"#.utf8))
        })
        let ingest = try ingest(key: adminKey, role: .admin) { config in
            config.maxAppleCallsInFlight = 2
            config.serverAPIAdmin = slowRefresh
        }
        defer { ingest.stop() }
        let url = "http://127.0.0.1:\(ingest.port)/v1/admin/refresh/2000000000000001"

        let held = [Self.send(url, post: true, bearer: adminKey), Self.send(url, post: true, bearer: adminKey)]
        try waitUntil { calls.load(ordering: .relaxed) == 2 }
        let refused = Self.send(url, post: true, bearer: adminKey).wait()
        XCTAssertEqual(refused.status, 503)
        XCTAssertTrue(refused.body.contains("too many admin requests waiting on Apple"), refused.body)
        XCTAssertEqual(calls.load(ordering: .relaxed), 2, "the refused request never reached Apple")

        release.signal()
        release.signal()
        XCTAssertEqual(held.map { $0.wait().status }, [200, 200])
        // Both places are free again.
        release.signal()
        XCTAssertEqual(Self.send(url, post: true, bearer: adminKey).wait().status, 200)
        XCTAssertEqual(calls.load(ordering: .relaxed), 3)
    }

    /// A producer that failed for good (librdkafka's fatal error: an idempotent producer that lost
    /// its ordering guarantee) sends nothing more: ingest says it is not ready and asks to be
    /// stopped, once, rather than answering 503 to every write for ever while looking healthy.
    func testAFatallyFailedProducerStopsIngest() throws {
        let serviceKey = "slk_fatal-producer-service"
        let stops = Atomic<Int>(0)
        let ingest = try ingest(key: serviceKey, role: .service, onProducerFailure: { stops.add(1, ordering: .relaxed) })
        defer { ingest.stop() }
        XCTAssertFalse(ingest.producerHasFailed)
        ingest.producer.raiseFatalErrorForTesting("test: out of order sequence")
        XCTAssertNotNil(ingest.producer.fatalFailure)

        let url = "http://127.0.0.1:\(ingest.port)/v1/receipts"
        let body = Data(#"{"user_id":"u-1","receipt_data":"cmVjZWlwdA=="}"#.utf8)
        for _ in 0..<2 {
            XCTAssertEqual(Self.send(url, post: true, body: body, bearer: serviceKey).wait().status, 503)
        }
        XCTAssertTrue(ingest.producerHasFailed)
        XCTAssertEqual(stops.load(ordering: .relaxed), 1, "asked to stop once")
        XCTAssertEqual(Self.send("http://127.0.0.1:\(ingest.port)/readyz").wait().status, 503, "not ready")
    }

    /// A body in UTF-16 (or UTF-32) is refused before anything reads it: Foundation's parser would
    /// read it, but the byte-level checks (nesting depth, a V1 password's removal) would not see it,
    /// and the shared secret would reach the raw topic.
    func testABodyThatIsNotUTF8IsRefused() throws {
        let serviceKey = "slk_utf16-service"
        let ingest = try ingest(key: serviceKey, role: .service)
        defer { ingest.stop() }
        let json = #"{"user_id":"u1","receipt_data":"TUlJ","password":"app-shared-secret"}"#
        for body in [Data(json.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }),
                     Data(json.unicodeScalars.flatMap { [UInt8($0.value & 0xFF), 0, 0, 0] })] {
            let answer = Self.send("http://127.0.0.1:\(ingest.port)/v1/receipts", post: true, body: body, bearer: serviceKey).wait()
            XCTAssertEqual(answer.status, 400)
            XCTAssertTrue(answer.body.contains("UTF-8"), answer.body)
            XCTAssertFalse(answer.body.contains("app-shared-secret"))
        }
    }

    /// `/readyz` is anyone's: one check at a time, its answer reused for a second, the last one given
    /// while a check runs (503 when there is none recent), so a flood of probes loads nothing.
    func testReadinessRunsOneCheckAtATimeAndReusesItsAnswer() {
        let probe = ReadinessProbe()
        func isCheck(_ decision: ReadinessProbe.Decision) -> Bool { if case .check = decision { return true } else { return false } }
        func status(_ decision: ReadinessProbe.Decision) -> Int? { if case .answer(let response) = decision { return response.status } else { return nil } }
        XCTAssertTrue(isCheck(probe.decide(nowMs: 0)), "the first caller checks")
        XCTAssertEqual(status(probe.decide(nowMs: 10)), 503, "no answer yet while it runs")
        probe.finished(.json(["status": "ready"]), nowMs: 100)
        XCTAssertEqual(status(probe.decide(nowMs: 1_000)), 200, "reused within a second")
        XCTAssertTrue(isCheck(probe.decide(nowMs: 1_200)), "then checked again, by one caller")
        XCTAssertEqual(status(probe.decide(nowMs: 1_300)), 200, "the last answer while that check runs")
        XCTAssertEqual(status(probe.decide(nowMs: 5_000)), 200, "still the last answer while that check runs")
        XCTAssertTrue(isCheck(probe.decide(nowMs: 20_000)), "a check hung past 10 s holds nobody back: another starts")
        XCTAssertEqual(status(probe.decide(nowMs: 20_100)), 503, "an answer too old is none")
        probe.finished(.error(status: 503, reason: "broker unavailable"), nowMs: 20_200)
        XCTAssertEqual(status(probe.decide(nowMs: 20_300)), 503)
    }

    private func waitUntil(_ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            guard Date() < deadline else {
                XCTFail("condition not reached in 10 s")
                throw CancellationError()
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// One request in flight; `wait()` gives its answer.
    private final class Pending: @unchecked Sendable {
        // Safe: written once by the completion handler before `done` is signalled, read after.
        private var value = (status: 0, body: "")
        let done = DispatchSemaphore(value: 0)
        func set(_ status: Int, _ body: String) { value = (status, body) }
        func wait() -> (status: Int, body: String) {
            XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "answered within 30 s")
            return value
        }
    }

    /// An ingest on a free port whose only credential is `key` in `role`, writing to the absent broker.
    private func ingest(key: String, role: APIKeyRing.Role, _ adjust: (inout IngestConfig) -> Void = { _ in },
                        onProducerFailure: @escaping @Sendable () -> Void = {}) throws -> IngestService {
        let keys = APIKeyRing(entries: [.init(name: "k", role: role, sha256: SHA256.hash(Array(key.utf8)))])
        var config = IngestConfig(kafka: kafka, databaseURL: nil)
        config.port = 0
        config.security = EdgeSecuritySettings(auth: AuthConfiguration(authenticator: Authenticator(apiKeys: keys, jwt: nil)), v1SharedSecrets: [])
        adjust(&config)
        let service = try IngestService(config: config, onProducerFailure: onProducerFailure)
        try service.start()
        return service
    }

    private static func send(_ url: String, post: Bool = false, body: Data = Data(), bearer: String? = nil) -> Pending {
        var request = URLRequest(url: URL(string: url)!)
        request.timeoutInterval = 30
        if post { request.httpMethod = "POST"; request.httpBody = body }
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        let pending = Pending()
        URLSession.shared.dataTask(with: request) { data, response, _ in
            pending.set((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data ?? Data(), as: UTF8.self))
            pending.done.signal()
        }.resume()
        return pending
    }
}
