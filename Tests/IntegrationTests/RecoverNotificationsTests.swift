import AppStoreServerAPI
import AppleDecoding
import Crypto
import Domain
import Foundation
import Kafka
import LocalStack
import Postgres
import Runtime
import Signer
@testable import Simulator
import Synchronization
import XCTest

/// Contract: `storeledger recover notifications --only-failures`, run as its own process against
/// the real broker and the simulated App Store Server API, gets its bearer tokens from a signer
/// over the sign topics (sealed; the recover process is never given a key), pages through the
/// notification history, and writes into `storeledger.notifications.raw` exactly the
/// notifications Apple failed to deliver — each once, with Apple's body and
/// `storeledger.provenance: recovered` — in both environments, and reports what it did.
/// The signer side is `APITokenIssuer.answer`, run here by the test as the signer worker will
/// once it routes `kind: api-token` requests to it.
final class RecoverNotificationsTests: XCTestCase {
    func testOnlyFailuresFeedsExactlyTheLostNotificationsOnceWithProvenance() throws {
        let broker = try Self.startBroker()
        defer { broker.stop() }
        let bootstrap = broker.bootstrap

        // The simulated App Store: 30 V2 notifications in production and 4 in the sandbox; every
        // 10th production one and every other sandbox one is lost for good.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("recover-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pki = try SimulatorPKI.generate()
        try pki.write(to: directory)
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, catalog: SimulatorCatalog.standard, runId: Int.random(in: 0..<900_000))
        let store = AppStore(config: config)
        let emitter = WireEmitter(pki: pki, config: config)
        let key = try P256PrivateKey.generate()
        let issuer = APITokenIssuer(keys: try SigningKeyRing(keys: ["RECOVERKEY": key]), issuerId: "issuer-recover")
        let server = ServerAPIServer(store: store, pki: pki, policy: APITokenPolicy(publicKey: key.publicKey, bundleId: config.bundleId,
                                                                                  keyId: "RECOVERKEY", issuerId: "issuer-recover"),
                                     pageSize: 7)
        try server.start()
        defer { server.stop() }
        let nowMs = currentTimeMs()
        var lost: Set<String> = []
        var count = 0
        for (environment, users) in [(SimEnvironment.production, 10), (.sandbox, 2)] {
            for user in 0..<users {
                let userId = "\(environment.rawValue)-\(user)"
                let first = try store.mutate { state in
                    state.addUser(userId)
                    let index = try state.addAppleID(user: userId, environment: environment)
                    return try state.purchase(user: userId, appleId: index, productId: "vip.a.1m", atMs: nowMs - 70 * 86_400_000)
                }
                var deliveries = [try store.read { try emitter.v2($0, otid: first.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: first.purchaseMs) }]
                for _ in 0..<2 {
                    let renewal = try store.mutate { try $0.renew(first.originalTransactionId) }
                    deliveries.append(try store.read { try emitter.v2($0, otid: first.originalTransactionId, type: "DID_RENEW", transaction: renewal, atMs: renewal.purchaseMs) })
                }
                for delivery in deliveries {
                    count += 1
                    let isLost = environment == .production ? count % 10 == 0 : count % 2 == 0
                    server.state.record(delivery, delivered: !isLost)
                    if isLost { lost.insert(try XCTUnwrap(ServerAPIState.facts(delivery.body)?.signedPayload)) }
                }
            }
        }
        XCTAssertEqual(server.state.notifications.count, 36)
        XCTAssertEqual(lost.count, 3 + 3)

        // The signer's half, as the signer worker runs it.
        let responder = try TokenResponder(bootstrap: bootstrap, issuer: issuer)
        defer { responder.stop() }

        let environment = [
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "STORELEDGER_KAFKA_FETCH_WAIT_MS": "10",
            "STORELEDGER_APPLE_ROOTS": "\(directory)/root.pem", "STORELEDGER_BUNDLE_ID": config.bundleId,
            "STORELEDGER_APP_APPLE_ID": String(config.appAppleId), "STORELEDGER_ENVIRONMENT": "Production,Sandbox",
            "STORELEDGER_API_PRODUCTION_URL": server.baseURL(for: .production), "STORELEDGER_API_SANDBOX_URL": server.baseURL(for: .sandbox),
            "STORELEDGER_LOG_LEVEL": "warning",
        ]
        let output = try Self.run(["recover", "notifications", "--from", String(nowMs - 90 * 86_400_000), "--to", String(nowMs),
                                   "--only-failures", "--json"], environment: environment)
        struct Reports: Decodable {
            struct Report: Decodable { var environment: String; var found: Int; var fed: Int; var neverDelivered: Int; var error: String? }
            var recovery: [Report]
        }
        let reports = try JSONDecoder().decode(Reports.self, from: Data(output.utf8)).recovery
        XCTAssertEqual(reports.map(\.environment), ["Production", "Sandbox"])
        XCTAssertEqual(reports.map(\.found), [3, 3], output)
        XCTAssertEqual(reports.map(\.fed), [3, 3], output)
        XCTAssertEqual(reports.map(\.neverDelivered), [3, 3])
        XCTAssertTrue(reports.allSatisfy { $0.error == nil }, output)
        XCTAssertGreaterThanOrEqual(responder.answered, 1, "tokens came from the signer")

        let records = try Cluster.readTopics([Topic.notificationsRaw], bootstrap: bootstrap, atLeast: lost.count, timeout: 30)
        XCTAssertEqual(records.count, lost.count, "each lost notification exactly once, nothing else")
        let fed = try records.map { record -> String in
            let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(record.value)) as? [String: Any])
            XCTAssertEqual(record.headers.first { $0.name == NotificationRecovery.provenanceHeader }.map { String(decoding: $0.value, as: UTF8.self) },
                           "recovered")
            XCTAssertEqual(record.headers.first { $0.name == RecordHeader.source }.map { String(decoding: $0.value, as: UTF8.self) },
                           RawSource.appStoreNotification.rawValue)
            return try XCTUnwrap(body["signedPayload"] as? String)
        }
        XCTAssertEqual(Set(fed), lost)

        // With DATABASE_URL, what the dedupe stage already saw (seen_events) is not fed again.
        let postgres = try EmbeddedPostgres.start()
        defer { postgres.stop() }
        try Self.run(["migrate", "--database-url", postgres.url], environment: [:])
        // Dedupe records a notification under the subscription it is about (R18's key: the original
        // transaction id, with the environment unless Production); the same UUID under another
        // subscription is another input, and that notification is fed.
        let sorted = lost.sorted()
        func seenInput(_ signed: String) -> (key: String, event: String) {
            let claims = ServerAPIState.claims(signed) ?? [:]
            let data = claims["data"] as? [String: Any] ?? [:]
            let transaction = (data["signedTransactionInfo"] as? String).flatMap(ServerAPIState.claims) ?? [:]
            let key = SubscriptionKey.make(originalTransactionId: transaction["originalTransactionId"] as? String ?? "",
                                           environment: data["environment"] as? String ?? "")
            return (key, "uuid:" + ((claims["notificationUUID"] as? String) ?? "").lowercased())
        }
        let seen = sorted.prefix(2).map(seenInput) + [(key: "another-subscription", event: seenInput(sorted[2]).event)]
        let db = try PGConnection(url: postgres.url)
        for input in seen { _ = try db.execute("INSERT INTO seen_events (subscription_key, event_key) VALUES (\(input.key), \(input.event))") }
        db.close()
        let second = try Self.run(["recover", "notifications", "--from", String(nowMs - 90 * 86_400_000), "--to", String(nowMs),
                                   "--only-failures", "--json", "--database-url", postgres.url], environment: environment)
        let again = try JSONDecoder().decode(Reports.self, from: Data(second.utf8)).recovery
        XCTAssertEqual(again.map(\.fed).reduce(0, +), lost.count - 2, second)
        XCTAssertEqual(try Cluster.readTopics([Topic.notificationsRaw], bootstrap: bootstrap, atLeast: 2 * lost.count - 2, timeout: 30).count, 2 * lost.count - 2)
    }

    // MARK: - Processes and topics

    /// The broker alone (no database, no workers), booted as every stack is.
    static func startBroker() throws -> LocalStack {
        var plan = try Cluster.plan(partitions: 2)
        plan.brokerControl = false
        plan.database = .none
        return try LocalStack.start(plan)
    }

    /// Runs the binary to completion (at most 180 s) and returns its standard output.
    @discardableResult
    static func run(_ arguments: [String], environment: [String: String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = Mutex(Data())
        let reader = Thread { data.withLock { $0 = output.fileHandleForReading.readDataToEndOfFile() } }
        reader.start()
        let deadline = Date().addingTimeInterval(180)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        while reader.isExecuting || !reader.isFinished { usleep(10_000) }
        let text = data.withLock { String(decoding: $0, as: UTF8.self) }
        guard process.terminationStatus == 0 else {
            throw ClusterError("storeledger \(arguments.joined(separator: " ")) exited \(process.terminationStatus): \(text)")
        }
        return text
    }
}

/// Answers `kind: api-token` requests on the sign topics with `APITokenIssuer.answer`.
final class TokenResponder: Sendable {
    private let running = Atomic<Bool>(true)
    private let count = Atomic<Int>(0)
    private let done = DispatchSemaphore(value: 0)

    init(bootstrap: String, issuer: APITokenIssuer) throws {
        let consumer = try KafkaConsumer(config: Cluster.kafka(bootstrap: bootstrap), groupId: "test-signer-\(UUID().uuidString)",
                                         topics: [Topic.signRequests])
        let producer = try KafkaProducer(config: Cluster.kafka(bootstrap: bootstrap))
        let thread = Thread { [self] in
            defer {
                consumer.close()
                producer.close()
                done.signal()
            }
            while running.load(ordering: .acquiring) {
                guard let records = try? consumer.poll(maxRecords: 100, timeout: .milliseconds(100)) else { continue }
                for record in records {
                    guard let request = try? JSONDecoder().decode(APITokenRequest.self, from: Data(record.value)),
                          request.kind == APITokenRequest.kindValue, let reply = try? JSONEncoder().encode(issuer.answer(request)) else { continue }
                    _ = try? producer.sendAndWait(topic: Topic.signReplies, key: Array(request.correlationId.utf8), value: [UInt8](reply),
                                                  timeout: .seconds(10))
                    count.add(1, ordering: .relaxed)
                }
            }
        }
        thread.start()
    }

    var answered: Int { count.load(ordering: .relaxed) }

    func stop() {
        running.store(false, ordering: .releasing)
        done.wait()
    }
}
