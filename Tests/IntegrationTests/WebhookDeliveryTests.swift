import Crypto
import Domain
import Foundation
import HTTPServer
import Postgres
import Simulator
import Synchronization
import XCTest

/// Contract (issue 17): `storeledger worker webhooks` delivers every membership event to every
/// configured endpoint. One local receiver fails (HTTP 500), then times out, then recovers; another
/// is healthy all along. The healthy one has every event while the flaky one is still failing (a
/// failing endpoint slows nobody else); after recovery the flaky one has accepted every event
/// exactly once, in per-user order; every request's StoreLedger-Signature verifies (also with the
/// openssl command line, as the README shows); `storeledger webhooks show` logs the failed attempts,
/// and ingest's admin routes `/v1/admin/webhooks[/{endpoint}/deliveries]` answer the same log. Two
/// workers run: each endpoint has one deliverer, the other worker stands by.
final class WebhookDeliveryTests: XCTestCase {
    func testFailingTimingOutAndRecoveringEndpointGetsEveryEventOnceSigned() throws {
        let flaky = try Receiver(secret: "flaky-secret-0123456789abcdef")
        let steady = try Receiver(secret: "steady-secret-0123456789abcdef")
        defer { flaky.stop(); steady.stop() }
        let directory = NSTemporaryDirectory() + "storeledger-webhooks-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configFile = directory + "/webhooks.json"
        let config = """
            {"endpoints": [{"id": "flaky", "url": "\(flaky.url)", "secretEnv": "FLAKY_SECRET", "timeoutMs": 500},
                           {"id": "steady", "url": "\(steady.url)", "secretEnv": "STEADY_SECRET"}],
             "retry": {"baseDelayMs": 200, "maxDelayMs": 1000, "giveUpAfterMs": 259200000}}
            """
        XCTAssertTrue(FileManager.default.createFile(atPath: configFile, contents: Data(config.utf8)))

        let sim = try SimulationCluster()
        defer { sim.stop() }
        let environment = ["DATABASE_URL": sim.cluster.databaseURL, "STORELEDGER_WEBHOOKS": configFile,
                           "FLAKY_SECRET": flaky.secret, "STEADY_SECRET": steady.secret, "STORELEDGER_LOG_LEVEL": "warning"]
        // Two workers, as scale-out or a rolling deploy runs them: one delivers per endpoint, the other
        // stands by, so nothing is sent twice.
        for role in ["webhooks", "webhooks-standby"] {
            try sim.cluster.supervisor.start(.init(role: role, arguments: ["worker", "webhooks"], environment: environment, onExit: .ignore))
        }

        flaky.set(.fail)
        var population = PopulationConfig()
        population.users = 12
        population.seed = 1717
        let run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population,
                                       driver: DriverConfig(ingestURL: sim.ingestURL), cohortSize: 12)
        let (report, _) = try run.run(check: false, settleTimeout: 30) { print("[webhooks] \($0)") }
        XCTAssertEqual(report.driver.undelivered, 0)

        let db = try sim.cluster.database()
        let expected = try waitForOutbox(db)
        XCTAssertGreaterThan(expected.count, 30)
        try waitUntil("the steady endpoint has every event", timeout: 60, interval: 0.5) { steady.acceptedIds == Set(expected.keys) }
        XCTAssertEqual(flaky.acceptedIds, [], "still failing: nothing accepted yet")
        XCTAssertGreaterThan(flaky.requests, 0)

        flaky.set(.timeout)
        let timeoutsBefore = flaky.requests
        try waitUntil("the flaky endpoint was tried while timing out", timeout: 30, interval: 0.2) { flaky.requests >= timeoutsBefore + 3 }
        flaky.set(.ok)
        try waitUntil("the flaky endpoint has every event after recovery", timeout: 120, interval: 0.5) {
            flaky.acceptedIds == Set(expected.keys)
        }
        Thread.sleep(forTimeInterval: 2)   // nothing is delivered a second time afterwards

        for receiver in [flaky, steady] {
            XCTAssertEqual(receiver.duplicates, [], "accepted twice")
            XCTAssertEqual(receiver.badSignatures, 0)
            XCTAssertEqual(receiver.accepted.count, expected.count)
            var lastPerKey: [String: Int64] = [:]
            for (key, entry) in receiver.accepted {
                if let previous = lastPerKey[key] { XCTAssertLessThan(previous, entry, "per-user order for \(key)") }
                lastPerKey[key] = entry
            }
        }
        // A receiver without StoreLedger's code verifies the signature with openssl alone.
        let sample = try XCTUnwrap(flaky.sample)
        XCTAssertEqual(try opensslHMAC(secret: flaky.secret, message: "\(sample.timestamp).".utf8 + sample.body), sample.signature)

        let log = try storeledgerOutput(["webhooks", "show", "flaky", "--database-url", sim.cluster.databaseURL])
            .split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertTrue(log.contains { $0["httpStatus"] as? Int == 500 }, "the log shows the HTTP 500 attempts")
        XCTAssertTrue(log.contains { ($0["error"] as? String)?.isEmpty == false && $0["httpStatus"] == nil }, "and the timeouts")
        XCTAssertEqual(Set(log.filter { $0["httpStatus"] as? Int == 200 }.compactMap { $0["entryId"] as? Int }.map(Int64.init)),
                       Set(expected.keys))
        let list = try storeledgerOutput(["webhooks", "list", "--database-url", sim.cluster.databaseURL])
        XCTAssertTrue(list.contains(#""delivered":\#(expected.count)"#), list)
        XCTAssertTrue(list.contains(#""pending":0"#), list)

        // The same log over HTTP for operators: admin key only, the same attempts as the CLI's.
        let admin = TestCredentials.bearer(TestCredentials.adminKey)
        let endpoints = try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks", authorization: admin)
        XCTAssertEqual(endpoints.status, 200, endpoints.text)
        let summaries = try XCTUnwrap(endpoints.json?["endpoints"] as? [[String: Any]])
        XCTAssertEqual(Set(summaries.compactMap { $0["endpoint"] as? String }), ["flaky", "steady"])
        for summary in summaries {
            XCTAssertEqual(summary["delivered"] as? Int, expected.count, "\(summary)")
            XCTAssertEqual(summary["pending"] as? Int, 0, "\(summary)")
        }
        let deliveries = try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?limit=1000", authorization: admin)
        XCTAssertEqual(deliveries.status, 200, deliveries.text)
        let attempts = try XCTUnwrap(deliveries.json?["attempts"] as? [[String: Any]])
        XCTAssertEqual(attempts.count, min(log.count, 1000), "the HTTP log is the CLI's")
        XCTAssertEqual(Set(attempts.filter { $0["httpStatus"] as? Int == 200 }.compactMap { $0["entryId"] as? Int }.map(Int64.init)),
                       Set(expected.keys))
        XCTAssertTrue(attempts.contains { $0["httpStatus"] as? Int == 500 })
        // Newest first, a page at a time: the same attempts the other way round.
        let newest = try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?order=newest&limit=2&offset=1", authorization: admin)
        let newestAttempts = try XCTUnwrap(newest.json?["attempts"] as? [[String: Any]], newest.text)
        let all = try XCTUnwrap(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?limit=1000&order=newest",
                                             authorization: admin).json?["attempts"] as? [[String: Any]])
        XCTAssertEqual(newestAttempts.map { $0["attemptedAt"] as? String }, all.dropFirst().prefix(2).map { $0["attemptedAt"] as? String })
        if log.count <= 1000 {
            XCTAssertEqual(all.first?["attemptedAt"] as? String, attempts.last?["attemptedAt"] as? String, "the newest attempt first")
        }
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?order=sideways", authorization: admin).status, 400)
        let one = try XCTUnwrap(expected.keys.min())
        let single = try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?entry=ledger-\(one)", authorization: admin)
        let singleAttempts = try XCTUnwrap(single.json?["attempts"] as? [[String: Any]])
        XCTAssertFalse(singleAttempts.isEmpty)
        XCTAssertTrue(singleAttempts.allSatisfy { $0["entryId"] as? Int == Int(one) }, single.text)
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/nobody/deliveries", authorization: admin).status, 404)
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries?limit=0", authorization: admin).status, 400)
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks").status, 403, "a service key may not read the log")
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks/flaky/deliveries", authorization: nil).status, 401)
        print("[webhooks] \(expected.count) events; flaky endpoint: \(flaky.requests) requests, \(log.count) logged attempts")
    }

    /// The outbox's events (entry id -> key) once it has stopped growing.
    private func waitForOutbox(_ db: PGConnection) throws -> [Int64: String] {
        var last = -1
        var since = Date()
        try waitUntil("the outbox stops growing", timeout: 120, interval: 1) {
            let count = try db.query("SELECT count(*) AS n FROM membership_outbox WHERE relay_seq IS NOT NULL").first!.int("n")
            let all = try db.query("SELECT count(*) AS n FROM membership_outbox").first!.int("n")
            if count != last || count != all { last = count; since = Date() }
            return Date().timeIntervalSince(since) > 6
        }
        return Dictionary(uniqueKeysWithValues: try db.query("SELECT entry_id, event_key FROM membership_outbox").map {
            (try $0.int64("entry_id"), try $0.string("event_key"))
        })
    }

    private func opensslHMAC(secret: String, message: [UInt8]) throws -> String {
        let file = NSTemporaryDirectory() + "hmac-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data(message)))
        let text = try run("/usr/bin/openssl", ["dgst", "-sha256", "-hmac", secret, "-r", file])
        return String(text.split(separator: " ").first ?? "")
    }

    private func storeledgerOutput(_ arguments: [String]) throws -> String { try run(try Cluster.binary(), arguments) }

    private func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        while process.isRunning { usleep(10_000) }
        XCTAssertEqual(process.terminationStatus, 0, "\(executable) \(arguments.joined(separator: " "))")
        return String(decoding: data, as: UTF8.self)
    }
}

/// A webhook receiver on loopback that verifies each signature and remembers what it accepted.
final class Receiver: Sendable {
    enum Mode: Sendable { case ok, fail, timeout }
    final class Memory: Sendable {
        let mode = Mutex(Mode.ok)
        let log = Mutex<(accepted: [(String, Int64)], ids: Set<Int64>, duplicates: [Int64], bad: Int, requests: Int)>(([], [], [], 0, 0))
        let sample = Mutex<(timestamp: Int64, body: [UInt8], signature: String)?>(nil)
    }
    let secret: String
    let memory = Memory()
    private let server: HTTPServer

    init(secret: String) throws {
        self.secret = secret
        let key = Array(secret.utf8)
        let memory = self.memory
        server = HTTPServer(port: 0, threads: 4, maxBodyBytes: 1 << 20) { request, responder in
            let header = request.headers[WebhookSignature.header] ?? ""
            let parsed = WebhookSignature.parse(header)
            let valid = parsed.map { parsed in
                let mac = WebhookSignature.hex(HMACSHA256.authenticate(WebhookSignature.signedPayload(timestamp: parsed.timestamp, body: request.body), key: key))
                return parsed.signatures.contains(mac) && abs(Int64(Date().timeIntervalSince1970) - parsed.timestamp) < 300
            } ?? false
            if let parsed, valid { memory.sample.withLock { $0 = (parsed.timestamp, request.body, parsed.signatures[0]) } }
            memory.log.withLock { $0.requests += 1; if !valid { $0.bad += 1 } }
            switch memory.mode.withLock({ $0 }) {
            case .fail:
                responder.respond(HTTPResponse(status: 500))
            case .timeout:
                // Answer long after the sender's 500 ms timeout: it must count as a failed attempt.
                DispatchQueue.global().asyncAfter(deadline: .now() + 1.5) { responder.respond(HTTPResponse(status: 503)) }
            case .ok:
                guard let event = try? JSONDecoder().decode(MembershipEvent.self, from: Data(request.body)), valid else {
                    responder.respond(HTTPResponse(status: 400))
                    return
                }
                memory.log.withLock { log in
                    if log.ids.insert(event.ledgerEntryId).inserted {
                        log.accepted.append((event.partitionKey, event.ledgerEntryId))
                    } else {
                        log.duplicates.append(event.ledgerEntryId)
                    }
                }
                responder.respond(HTTPResponse(status: 200))
            }
        }
        try server.start()
    }

    func set(_ mode: Mode) { memory.mode.withLock { $0 = mode } }
    var url: String { "http://127.0.0.1:\(server.boundPort)/hooks" }
    var acceptedIds: Set<Int64> { memory.log.withLock { $0.ids } }
    var accepted: [(String, Int64)] { memory.log.withLock { $0.accepted } }
    var duplicates: [Int64] { memory.log.withLock { $0.duplicates } }
    var badSignatures: Int { memory.log.withLock { $0.bad } }
    var requests: Int { memory.log.withLock { $0.requests } }
    var sample: (timestamp: Int64, body: [UInt8], signature: String)? { memory.sample.withLock { $0 } }
    func stop() { server.stop() }
}
