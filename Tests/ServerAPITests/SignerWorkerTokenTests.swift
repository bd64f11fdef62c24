import AppStoreServerAPI
import Crypto
import Domain
import Foundation
import Kafka
import Runtime
@testable import Signer
import XCTest

/// Contract: the running signer answers API token requests on the sign topics next to sign
/// requests: with an issuer id the reply opens, for the requester only, to an ES256 token whose
/// header and claims are Apple's (kid, iss, aud, bid) and whose signature verifies with the key;
/// without one it refuses with a reason. A sign request in the same batch is still signed.
final class SignerWorkerTokenTests: XCTestCase {
    func testTheSignerIssuesAPITokensBesideSignatures() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        for topic in [Topic.signRequests, Topic.signReplies] { try broker.createTopic(topic, partitions: 2) }
        var kafka = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "signer-token-test")
        kafka.sessionTimeout = .seconds(6)
        kafka.heartbeatInterval = .milliseconds(500)

        let key = try P256PrivateKey.generate()
        let ring = try SigningKeyRing(keys: ["KEY1": key])
        let worker = SignerWorker(signer: OfferSigner(keys: ring, issuerId: "issuer-7"), config: SignerWorkerConfig(kafka: kafka))
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

        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        let deadline = currentTimeMs() + 30_000
        let pending = try SignerTokenRequest(correlationId: "token-1", deadlineMs: deadline, bundleId: "com.example")
        let sign = SignRequest(correlationId: "sign-1", deadlineMs: deadline, kind: .legacy, bundleId: "com.example",
                               productId: "vip.1m", offerId: "winback", applicationUsername: "user-1")
        for (id, value) in [("token-1", try JSONEncoder().encode(pending.request)), ("sign-1", try JSONEncoder().encode(sign))] {
            _ = try producer.sendAndWait(topic: Topic.signRequests, key: Array(id.utf8), value: [UInt8](value), timeout: .seconds(5))
        }

        let consumer = try KafkaConsumer(config: kafka, groupId: "signer-token-test-\(UUID().uuidString)", topics: [Topic.signReplies])
        defer { consumer.close() }
        var tokenReply: APITokenReply?
        var signReply: SignReply?
        let until = Date().addingTimeInterval(30)
        while tokenReply == nil || signReply == nil, Date() < until {
            for record in try consumer.poll(maxRecords: 100, timeout: .milliseconds(200)) {
                if record.key == Array("token-1".utf8) {
                    tokenReply = try JSONDecoder().decode(APITokenReply.self, from: Data(record.value))
                } else if record.key == Array("sign-1".utf8) {
                    signReply = try JSONDecoder().decode(SignReply.self, from: Data(record.value))
                }
            }
        }
        XCTAssertEqual(signReply?.status, .signed)
        let reply = try XCTUnwrap(tokenReply, "the signer answers the token request")
        XCTAssertEqual(reply.status, .issued, reply.reason ?? "")
        let token = try pending.open(reply).get()
        let parts = token.value.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        let header = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(parts[0])))) as? [String: Any])
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(parts[1])))) as? [String: Any])
        XCTAssertEqual(header["kid"] as? String, "KEY1")
        XCTAssertEqual(claims["iss"] as? String, "issuer-7")
        XCTAssertEqual(claims["aud"] as? String, APITokenMinter.audience)
        XCTAssertEqual(claims["bid"] as? String, "com.example")
        XCTAssertTrue(key.publicKey.verify(rawSignature: try XCTUnwrap(Base64URL.decode(parts[2])),
                                           message: Array((parts[0] + "." + parts[1]).utf8)))
        XCTAssertFalse(String(decoding: try JSONEncoder().encode(reply), as: UTF8.self).contains(parts[2]),
                       "the reply on the topic never holds the token in clear")
    }

    /// A sign request over the record bound gets no reply (its reply, which repeats the correlation
    /// id, could be too large for the broker and would hold every request behind it); one at the
    /// bound is answered.
    func testASignRequestOverTheRecordBoundIsDroppedNotAnswered() throws {
        let worker = SignerWorker(signer: OfferSigner(keys: try SigningKeyRing(keys: ["KEY1": try P256PrivateKey.generate()])),
                                  config: SignerWorkerConfig(kafka: KafkaConfig(bootstrapServers: "127.0.0.1:1", clientId: "unused")))
        func record(correlationBytes: Int) throws -> KafkaRecord {
            let request = SignRequest(correlationId: String(repeating: "c", count: correlationBytes), deadlineMs: currentTimeMs() + 30_000,
                                      kind: .legacy, bundleId: "com.example", productId: "vip.a.1m", offerId: "o1")
            return KafkaRecord(topic: Topic.signRequests, partition: 0, offset: 0, key: [], value: [UInt8](try JSONEncoder().encode(request)),
                               headers: [], timestamp: 0)
        }
        let base = try record(correlationBytes: 0).value.count
        let atBound = try record(correlationBytes: SignRequest.maxRecordBytes - base)
        XCTAssertEqual(atBound.value.count, SignRequest.maxRecordBytes)
        XCTAssertEqual(worker.replies([atBound]).count, 1)
        XCTAssertEqual(worker.replies([try record(correlationBytes: SignRequest.maxRecordBytes - base + 1)]).count, 0)
        XCTAssertEqual(worker.replies([try record(correlationBytes: 900_000)]).count, 0)
    }

    func testWithoutAnIssuerIdTheRequestIsRefusedWithAReason() throws {
        let worker = SignerWorker(signer: OfferSigner(keys: try SigningKeyRing(keys: ["KEY1": try P256PrivateKey.generate()])),
                                  config: SignerWorkerConfig(kafka: KafkaConfig(bootstrapServers: "127.0.0.1:1", clientId: "unused")))
        let pending = try SignerTokenRequest(correlationId: "token-2", deadlineMs: currentTimeMs() + 30_000, bundleId: "com.example")
        let record = KafkaRecord(topic: Topic.signRequests, partition: 0, offset: 0, key: Array("token-2".utf8),
                                 value: [UInt8](try JSONEncoder().encode(pending.request)), headers: [], timestamp: 0)
        let outputs = worker.replies([record])
        XCTAssertEqual(outputs.count, 1)
        let reply = try JSONDecoder().decode(APITokenReply.self, from: Data(outputs[0].value))
        XCTAssertEqual(reply.status, .refused)
        XCTAssertNil(reply.sealedToken)
        XCTAssertTrue(reply.reason?.contains("issuer id") ?? false, reply.reason ?? "")
    }
}
