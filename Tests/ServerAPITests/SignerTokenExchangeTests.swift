import AppStoreServerAPI
import AppleDecoding
import Crypto
import Domain
import Foundation
import Signer
@testable import Simulator
import Synchronization
import XCTest

/// Contract: an API token travels from the signer to the requester only sealed: the request and
/// reply records, as JSON on the topic, never contain the token; the requester alone opens the
/// reply, and what it opens is a token the simulated App Store accepts; refusals (unknown key,
/// bad reply key, passed deadline) are replies with a reason, never a token.
final class SignerTokenExchangeTests: XCTestCase {
    static func roundTrip<T: Codable>(_ value: T) throws -> (T, String) {
        let data = try JSONEncoder().encode(value)
        return (try JSONDecoder().decode(T.self, from: data), String(decoding: data, as: UTF8.self))
    }

    func testTheSealedTokenOpensOnlyForTheRequesterAndWorksAgainstTheSimulatedAppStore() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("sealed-user")
        let topicText = TopicText()
        let issuer = h.issuer
        let provider = SignerTokenProvider(bundleId: h.store.config.bundleId, newCorrelationId: { "corr-1" }) { request in
            // What crosses the topic is JSON, both ways.
            guard let (onTopic, requestText) = try? Self.roundTrip(request) else { return nil }
            let reply = issuer.answer(onTopic)
            guard let (received, replyText) = try? Self.roundTrip(reply) else { return nil }
            topicText.add(requestText + replyText)
            return received
        }
        let token = try provider.token().value()
        XCTAssertFalse(topicText.all.contains(token.value), "the token is never on the topic in clear")
        XCTAssertFalse(topicText.all.contains(String(token.value.split(separator: ".")[2])))

        let info = try h.client(tokens: CachingTokenProvider(fetch: provider.token)).transactionInfo(transactionId: purchase.transactionId).value()
        XCTAssertEqual(info.transaction.payload["transactionId"] as? String, purchase.transactionId)

        let pending = try SignerTokenRequest(correlationId: "corr-2", deadlineMs: Int64(Date().timeIntervalSince1970 * 1000) + 5000,
                                             bundleId: h.store.config.bundleId)
        let reply = issuer.answer(pending.request)
        let eavesdropper = try SignerTokenRequest(correlationId: "corr-2", deadlineMs: pending.request.deadlineMs, bundleId: h.store.config.bundleId)
        XCTAssertEqual(try eavesdropper.open(reply).failure().kind, .noToken, "another process's key cannot open it")
        XCTAssertNoThrow(try pending.open(reply).get())
        var replayed = reply
        replayed.correlationId = "corr-3"
        XCTAssertEqual(try pending.open(replayed).failure().kind, .noToken)
    }

    func testRefusalsAreRepliesWithAReasonAndNoToken() throws {
        let key = try P256PrivateKey.generate()
        let issuer = APITokenIssuer(keys: try SigningKeyRing(keys: ["K1": key]), issuerId: "issuer", clock: { 1_000_000 })
        let pending = try SignerTokenRequest(correlationId: "c", deadlineMs: 1_000_000_000 + 5_000, bundleId: "com.example")

        var unknownKey = pending.request
        unknownKey.keyId = "K9"
        XCTAssertEqual(issuer.answer(unknownKey).status, .refused)
        var late = pending.request
        late.deadlineMs = 999_999_999
        XCTAssertEqual(issuer.answer(late).reason, "deadline passed")
        var badKey = pending.request
        badKey.replyKey = "bm90IGEga2V5"
        XCTAssertEqual(issuer.answer(badKey).status, .refused)
        var tooLong = pending.request
        tooLong.lifetimeSeconds = 7200
        let refused = issuer.answer(tooLong)
        XCTAssertEqual(refused.status, .refused)
        XCTAssertNil(refused.sealedToken)
        XCTAssertEqual(try pending.open(refused).failure().kind, .noToken)

        let issued = issuer.answer(pending.request)
        XCTAssertEqual(issued.status, .issued)
        XCTAssertEqual(issued.keyIdentifier, "K1")
        XCTAssertEqual(issued.expiresAt, 1_000_000 + APITokenMinter.defaultLifetimeSeconds)
        let token = try pending.open(issued).get()
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(token.value.split(separator: ".")[1])))) as? [String: Any])
        XCTAssertEqual(claims["bid"] as? String, "com.example")
        XCTAssertEqual(claims["iss"] as? String, "issuer")
    }
}

final class TopicText: Sendable {
    private let text = Mutex("")
    func add(_ more: String) { text.withLock { $0 += more } }
    var all: String { text.withLock { $0 } }
}
