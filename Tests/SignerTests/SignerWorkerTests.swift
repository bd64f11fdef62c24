import Crypto
import Domain
import Foundation
import Kafka
import Runtime
import Signer
import XCTest

/// Contract: the worker answers sign requests from the request topic on the reply topic, keyed by
/// correlation id; refusals are replies with a reason; requests past their deadline and undecodable
/// ones get no reply and are counted; the metrics file it writes instead of serving /metrics holds
/// counters and no key material. Runs against librdkafka's mock cluster in this process.
final class SignerWorkerTests: XCTestCase {
    func testAnswersRefusesAndDropsExpiredRequests() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        for topic in [Topic.signRequests, Topic.signReplies] { try broker.createTopic(topic, partitions: 2) }
        var kafka = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "signer-test")
        kafka.sessionTimeout = .seconds(6)
        kafka.heartbeatInterval = .milliseconds(500)

        let key = try SignerFixtures.signingKey()
        let signer = OfferSigner(keys: try SigningKeyRing(keys: ["KEY1": key]), issuerId: "issuer")
        let metricsPath = FileManager.default.temporaryDirectory.appendingPathComponent("signer-metrics-\(UUID().uuidString).prom").path
        defer { try? FileManager.default.removeItem(atPath: metricsPath) }
        var config = SignerWorkerConfig(kafka: kafka)
        config.metricsFile = metricsPath
        config.metricsInterval = .milliseconds(200)
        let worker = SignerWorker(signer: signer, config: config)
        let stop = StopSignal()
        let finished = DispatchSemaphore(value: 0)
        Thread {
            do { try worker.run(until: stop) } catch { XCTFail("worker failed: \(error)") }
            finished.signal()
        }.start()
        defer {
            stop.stop()
            finished.wait()
        }

        let expiredBefore = Metrics.shared.counter("storeledger_signer_requests_total", ["outcome": "expired"])
        let invalidBefore = Metrics.shared.counter("storeledger_signer_requests_total", ["outcome": "invalid"])
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        let deadline = currentTimeMs() + 30_000
        let requests = [
            SignRequest(correlationId: "ok", deadlineMs: deadline, kind: .legacy, bundleId: "com.example", productId: "vip.1m",
                        offerId: "winback", applicationUsername: "User-1"),
            SignRequest(correlationId: "jws", deadlineMs: deadline, kind: .promotionalOfferJWS, bundleId: "com.example",
                        productId: "vip.1m", offerId: "winback"),
            SignRequest(correlationId: "unknown-key", deadlineMs: deadline, kind: .legacy, bundleId: "com.example", keyId: "NOPE",
                        productId: "vip.1m", offerId: "winback"),
            SignRequest(correlationId: "expired", deadlineMs: currentTimeMs() - 1, kind: .legacy, bundleId: "com.example",
                        productId: "vip.1m", offerId: "winback"),
        ]
        for request in requests {
            _ = try producer.sendAndWait(topic: Topic.signRequests, key: Array(request.correlationId.utf8),
                                         value: [UInt8](try JSONEncoder().encode(request)), timeout: .seconds(5))
        }
        _ = try producer.sendAndWait(topic: Topic.signRequests, key: nil, value: Array("not json".utf8), timeout: .seconds(5))

        let consumer = try KafkaConsumer(config: kafka, groupId: "signer-test-\(UUID().uuidString)", topics: [Topic.signReplies])
        defer { consumer.close() }
        var replies: [String: SignReply] = [:]
        let until = Date().addingTimeInterval(30)
        while replies.count < 3, Date() < until {
            for record in try consumer.poll(maxRecords: 100, timeout: .milliseconds(200)) {
                let reply = try JSONDecoder().decode(SignReply.self, from: Data(record.value))
                XCTAssertEqual(record.key, Array(reply.correlationId.utf8))
                replies[reply.correlationId] = reply
            }
        }
        XCTAssertEqual(Set(replies.keys), ["ok", "jws", "unknown-key"], "no reply for the expired or undecodable request")

        let ok = try XCTUnwrap(replies["ok"])
        XCTAssertEqual(ok.status, .signed)
        let payload = PromotionalOfferPayload(bundleId: "com.example", keyIdentifier: "KEY1", productIdentifier: "vip.1m",
                                              offerIdentifier: "winback", applicationUsername: "user-1",
                                              nonce: try XCTUnwrap(ok.nonce), timestampMs: try XCTUnwrap(ok.timestampMs))
        XCTAssertTrue(key.publicKey.verify(signature: try XCTUnwrap(ok.signature.flatMap { Base64.decode($0) }), message: payload.bytes))
        let jws = try DecodedJWS(try XCTUnwrap(replies["jws"]?.jws))
        XCTAssertEqual(jws.claims["aud"] as? String, "promotional-offer")
        XCTAssertTrue(key.publicKey.verify(rawSignature: jws.signature, message: jws.signingInput))
        XCTAssertEqual(replies["unknown-key"]?.status, .refused)
        XCTAssertEqual(replies["unknown-key"]?.reason, "unknown signing key id NOPE")

        try waitFor("expired and invalid requests are counted") {
            Metrics.shared.counter("storeledger_signer_requests_total", ["outcome": "expired"]) == expiredBefore + 1
                && Metrics.shared.counter("storeledger_signer_requests_total", ["outcome": "invalid"]) == invalidBefore + 1
        }
        try waitFor("the metrics file shows the signed requests") {
            (try? String(contentsOfFile: metricsPath, encoding: .utf8))?.contains("outcome=\"signed\"") ?? false
        }
        let metrics = try String(contentsOfFile: metricsPath, encoding: .utf8)
        XCTAssertTrue(metrics.contains("storeledger_signer_nonces_remembered"))
        let pem = try String(contentsOfFile: try SignerFixtures.signingKeyPath, encoding: .utf8)
        for line in pem.split(separator: "\n") where !line.hasPrefix("-----") {
            XCTAssertFalse(metrics.contains(line), "metrics must not carry key material")
        }
    }

    private func waitFor(_ what: String, timeout: TimeInterval = 10, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTFail("timed out waiting until \(what)")
    }
}
