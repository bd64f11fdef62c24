import Crypto
import Domain
import Foundation
import XCTest

/// Contract: offers end to end through ingest, the broker, the `storeledger signer` process and
/// PostgreSQL, with purchase histories seeded through the real pipeline.
/// - S11: an account that had an intro period under one Apple ID is served the plain variant and a
///   signed `allowIntroductoryOffer: false`, whatever Apple ID it now uses; a new account gets the
///   intro variant and `true`.
/// - S12: an eligible (lapsed) account gets a legacy signature that verifies with the key's public
///   key over Apple's payload, and a promotional-offer JWS that verifies; an account that never
///   subscribed, one still subscribed (win-back) and one that used up the per-account limit get 403
///   with the reason.
/// - The signer stopped (SIGSTOP) means 504 within the deadline, never a hang; the requests it
///   missed are dropped as expired when it resumes.
/// - The signer holds no listening socket, and neither its log lines nor its metrics contain key
///   material.
final class OfferSigningTests: XCTestCase {
    nonisolated(unsafe) static var offers: OfferCluster?
    static let run = String(Int.random(in: 100_000...999_999))

    override class func setUp() {
        super.setUp()
        do {
            let offers = try OfferCluster()
            try offers.start()
            Self.offers = offers
        } catch {
            print("offer cluster failed to start: \(error)")
        }
    }

    override class func tearDown() {
        offers?.stop()
        offers = nil
        super.tearDown()
    }

    private func running() throws -> OfferCluster {
        guard let offers = Self.offers else { throw ClusterError("offer cluster did not start (see log above)") }
        return offers
    }

    private let now = Int64(Date().timeIntervalSince1970 * 1000)
    private var day: Int64 { OfferCluster.day }

    private func publicKey() throws -> PublicKey {
        try P256PrivateKey(pem: String(contentsOfFile: try OfferCluster.signingKeyPath, encoding: .utf8)).publicKey
    }

    private func signature(_ offers: OfferCluster, _ body: [String: Any]) throws -> HTTP.Response {
        try HTTP.post("\(offers.cluster.ingestURL)/v1/offers/signature", json: body, timeout: 15)
    }

    private func userOffers(_ offers: OfferCluster, _ user: String) throws -> [String: Any] {
        let response = try HTTP.get("\(offers.cluster.ingestURL)/v1/users/\(user)/offers?group=vip")
        XCTAssertEqual(response.status, 200, response.text)
        return try XCTUnwrap((response.json?["groups"] as? [[String: Any]])?.first)
    }

    func testS11SecondAppleIDOnTheSameAccountIsServedTheNonIntroVariant() throws {
        let offers = try running()
        let user = "s11-\(Self.run)"
        // Apple ID 1: a free trial then an intro-price month of vip.1m.intro, lapsed two months ago.
        try offers.seed(user: user, subscriptions: [
            OfferSubscription(key: "11\(Self.run)01", purchases: [
                .init(transactionId: "11\(Self.run)011", productId: "vip.1m.intro", startMs: now - 120 * day, endMs: now - 90 * day, isTrial: true),
                .init(transactionId: "11\(Self.run)012", productId: "vip.1m.intro", startMs: now - 90 * day, endMs: now - 60 * day, isIntro: true),
            ]),
        ])
        let seen = try userOffers(offers, user)
        XCTAssertEqual((seen["introOffer"] as? [String: Any])?["eligible"] as? Bool, false)
        let products = try XCTUnwrap(seen["products"] as? [[String: Any]])
        XCTAssertEqual(products.first { $0["productId"] as? String == "vip.1m" }?["show"] as? String, "vip.1m", "non-intro variant")

        // The same account asks StoreKit's 2025 eligibility JWS for a purchase from Apple ID 2.
        let response = try signature(offers, ["user_id": user, "product_id": "vip.1m.intro", "kind": "introductory-eligibility",
                                              "transaction_id": "22\(Self.run)01"])
        XCTAssertEqual(response.status, 200, response.text)
        let jws = try XCTUnwrap(response.json?["jws"] as? String)
        let (header, claims, input, raw) = try decode(jws)
        XCTAssertEqual(header as NSDictionary, ["alg": "ES256", "kid": OfferCluster.keyId, "typ": "JWT"])
        XCTAssertEqual(claims["aud"] as? String, "introductory-offer-eligibility")
        XCTAssertEqual(claims["allowIntroductoryOffer"] as? Bool, false)
        XCTAssertEqual(claims["transactionId"] as? String, "22\(Self.run)01")
        XCTAssertEqual(claims["bid"] as? String, OfferCluster.bundleId)
        XCTAssertEqual(claims["iss"] as? String, OfferCluster.issuerId)
        XCTAssertTrue(try publicKey().verify(rawSignature: raw, message: input))

        // A new account: the intro variant, and `true`.
        let fresh = try userOffers(offers, "s11-new-\(Self.run)")
        XCTAssertEqual((fresh["introOffer"] as? [String: Any])?["eligible"] as? Bool, true)
        XCTAssertEqual((fresh["products"] as? [[String: Any]])?.first { $0["productId"] as? String == "vip.1m" }?["show"] as? String, "vip.1m.intro")
        let allowed = try signature(offers, ["user_id": "s11-new-\(Self.run)", "product_id": "vip.1m.intro",
                                             "kind": "introductory-eligibility", "transaction_id": "33\(Self.run)01"])
        XCTAssertEqual(allowed.status, 200, allowed.text)
        XCTAssertEqual(try decode(try XCTUnwrap(allowed.json?["jws"] as? String)).1["allowIntroductoryOffer"] as? Bool, true)
    }

    /// R17 and R8 together: an app that prints the account's UUID in upper case is the same account,
    /// so the intro offer it already had stays used, and its history makes it a previous subscriber.
    func testAUUIDUserIdInUpperCaseIsTheSameAccountForOffers() throws {
        let offers = try running()
        let user = UUID().uuidString.lowercased()
        try offers.seed(user: user, subscriptions: [
            OfferSubscription(key: "13\(Self.run)01", purchases: [
                .init(transactionId: "13\(Self.run)011", productId: "vip.1m.intro", startMs: now - 90 * day, endMs: now - 60 * day, isTrial: true),
            ]),
        ])
        let upper = user.uppercased()
        let intro = try signature(offers, ["user_id": upper, "product_id": "vip.1m.intro", "kind": "introductory-eligibility",
                                           "transaction_id": "13\(Self.run)011"])
        XCTAssertEqual(intro.status, 200, intro.text)
        XCTAssertEqual(try decode(try XCTUnwrap(intro.json?["jws"] as? String)).1["allowIntroductoryOffer"] as? Bool, false)
        let seen = try userOffers(offers, upper)
        XCTAssertEqual((seen["introOffer"] as? [String: Any])?["eligible"] as? Bool, false)
        let winback = try signature(offers, ["user_id": upper, "product_id": "vip.1m", "offer_id": "winback"])
        XCTAssertEqual(winback.status, 200, "a lapsed previous subscriber, whatever the case of its id: \(winback.text)")
    }

    func testS12EligibleUserGetsVerifyingSignaturesOthersGetReasons() throws {
        let offers = try running()
        let lapsed = "s12-lapsed-\(Self.run)", redeemed = "s12-redeemed-\(Self.run)", current = "s12-current-\(Self.run)"
        try offers.seed(user: lapsed, subscriptions: [OfferSubscription(key: "12\(Self.run)01", purchases: [
            .init(transactionId: "12\(Self.run)011", productId: "vip.1m", startMs: now - 90 * day, endMs: now - 60 * day),
        ])])
        try offers.seed(user: redeemed, subscriptions: [OfferSubscription(key: "12\(Self.run)02", purchases: [
            .init(transactionId: "12\(Self.run)021", productId: "vip.1m", startMs: now - 200 * day, endMs: now - 170 * day),
            .init(transactionId: "12\(Self.run)022", productId: "vip.1m", startMs: now - 100 * day, endMs: now - 70 * day,
                  promotionalOfferId: "winback"),
        ])])
        try offers.seed(user: current, subscriptions: [OfferSubscription(key: "12\(Self.run)03", purchases: [
            .init(transactionId: "12\(Self.run)031", productId: "vip.1m", startMs: now - 10 * day, endMs: now + 20 * day),
        ])])

        // Eligible, no offer named: the win-back offer is picked and signed (legacy form).
        // applicationUsername is the user itself (issue 11: a signature binds to the account it is for).
        let legacy = try signature(offers, ["user_id": lapsed, "product_id": "vip.1m", "format": "legacy"])
        XCTAssertEqual(legacy.status, 200, legacy.text)
        let answer = try XCTUnwrap(legacy.json)
        XCTAssertEqual(answer["offer_id"] as? String, "winback")
        XCTAssertEqual(answer["keyIdentifier"] as? String, OfferCluster.keyId)
        let nonce = try XCTUnwrap(answer["nonce"] as? String)
        let timestamp = try XCTUnwrap((answer["timestamp"] as? NSNumber)?.int64Value)
        // Against the clock now: `now` was taken when XCTest built the test instances, possibly minutes ago.
        XCTAssertLessThan(abs(timestamp - Int64(Date().timeIntervalSince1970 * 1000)), 60_000)
        let payload = [OfferCluster.bundleId, OfferCluster.keyId, "vip.1m", "winback", lapsed.lowercased(), nonce, String(timestamp)]
            .joined(separator: "\u{2063}")
        let der = try XCTUnwrap((answer["signature"] as? String).flatMap { Base64.decode($0) })
        XCTAssertTrue(try publicKey().verify(signature: der, message: Array(payload.utf8)), "verifies over Apple's payload")

        // The same offer as a promotional offer V2 JWS.
        let jwsAnswer = try signature(offers, ["user_id": lapsed, "product_id": "vip.1m", "offer_id": "winback", "format": "jws",
                                               "transaction_id": "12\(Self.run)011"])
        XCTAssertEqual(jwsAnswer.status, 200, jwsAnswer.text)
        let (header, claims, input, raw) = try decode(try XCTUnwrap(jwsAnswer.json?["jws"] as? String))
        XCTAssertEqual(header as NSDictionary, ["alg": "ES256", "kid": OfferCluster.keyId, "typ": "JWT"])
        XCTAssertEqual(Set(claims.keys), ["iss", "iat", "aud", "bid", "nonce", "productId", "offerIdentifier", "transactionId"])
        XCTAssertEqual(claims["offerIdentifier"] as? String, "winback")
        XCTAssertEqual(claims["aud"] as? String, "promotional-offer")
        XCTAssertNotEqual(claims["nonce"] as? String, nonce, "a fresh nonce per signature")
        XCTAssertTrue(try publicKey().verify(rawSignature: raw, message: input))

        // Never subscribed.
        let stranger = try signature(offers, ["user_id": "s12-stranger-\(Self.run)", "product_id": "vip.1m"])
        XCTAssertEqual(stranger.status, 403, stranger.text)
        XCTAssertEqual(stranger.json?["code"] as? String, "not_eligible")
        XCTAssertEqual(((stranger.json?["refusals"] as? [[String: Any]])?.compactMap { $0["code"] as? String }).map(Set.init),
                       ["not_a_previous_subscriber"])
        XCTAssertTrue((stranger.json?["error"] as? String)?.contains("previous subscribers") ?? false)

        // Exhausted per-account limit: win-back redeemed once already.
        let exhausted = try signature(offers, ["user_id": redeemed, "product_id": "vip.1m", "offer_id": "winback"])
        XCTAssertEqual(exhausted.status, 403, exhausted.text)
        XCTAssertEqual(exhausted.json?["code"] as? String, "redemption_limit_reached")
        XCTAssertEqual(exhausted.json?["error"] as? String, "offer winback already redeemed 1 time; the limit is 1 per account")

        // Still subscribed: no win-back; the retention offer is picked instead.
        let still = try signature(offers, ["user_id": current, "product_id": "vip.1m", "offer_id": "winback"])
        XCTAssertEqual(still.status, 403, still.text)
        XCTAssertEqual(still.json?["code"] as? String, "still_subscribed")
        let retention = try signature(offers, ["user_id": current, "product_id": "vip.1m"])
        XCTAssertEqual(retention.status, 200, retention.text)
        XCTAssertEqual(retention.json?["offer_id"] as? String, "loyalty")

        // The read side says the same.
        let view = try userOffers(offers, redeemed)
        let winback = (view["offers"] as? [[String: Any]])?.first { $0["offerId"] as? String == "winback" }
        XCTAssertEqual(winback?["eligible"] as? Bool, false)
        XCTAssertEqual(winback?["code"] as? String, "redemption_limit_reached")
        XCTAssertEqual(winback?["redemptions"] as? Int, 1)
    }

    func testBadRequestsAreRefusedClearly() throws {
        let offers = try running()
        let url = "\(offers.cluster.ingestURL)/v1/offers/signature"
        XCTAssertEqual(try HTTP.post(url, body: Data("nope".utf8)).status, 400)
        XCTAssertEqual(try HTTP.post(url, json: ["user_id": "u", "product_id": "vip.1m", "format": "pdf"]).status, 400)
        XCTAssertEqual(try HTTP.post(url, json: ["user_id": "u", "product_id": "unknown.product"]).status, 404)
        XCTAssertEqual(try HTTP.post(url, json: ["user_id": "u", "product_id": "vip.1m", "offer_id": "nope"]).status, 404)
        XCTAssertEqual(try HTTP.post(url, json: ["user_id": "u", "product_id": "vip.1m", "offer_id": "upgrade"]).status, 400)
        // A field given empty is the caller's mistake, not the signer's refusal (502).
        let empty = try HTTP.post(url, json: ["user_id": "u", "product_id": "vip.1m", "kind": "introductory-eligibility", "transaction_id": ""])
        XCTAssertEqual(empty.status, 400)
        XCTAssertTrue(empty.text.contains("transaction_id is empty"), empty.text)
    }

    func testSignerHasNoListeningSocketAndLeaksNoKeyMaterial() throws {
        let offers = try running()
        // Make it sign at least once so its logs and metrics have content.
        let user = "leak-\(Self.run)"
        try offers.seed(user: user, subscriptions: [OfferSubscription(key: "44\(Self.run)01", purchases: [
            .init(transactionId: "44\(Self.run)011", productId: "vip.1m", startMs: now - 90 * day, endMs: now - 60 * day),
        ])])
        XCTAssertEqual(try signature(offers, ["user_id": user, "product_id": "vip.1m"]).status, 200)

        let pid = try XCTUnwrap(offers.signerPid)
        let sockets = try ProcessSockets.all(pid: pid)
        XCTAssertTrue(sockets.contains { $0.table.hasPrefix("tcp") }, "the signer is connected to the broker: \(sockets)")
        XCTAssertTrue(sockets.allSatisfy { !$0.listening }, "no listening socket: \(sockets)")
        XCTAssertFalse(sockets.contains { $0.table.hasPrefix("udp") }, "no UDP socket: \(sockets)")
        XCTAssertEqual(sockets.count, try ProcessSockets.inodes(pid: pid).count, "every socket it holds was inspected")
        // Positive control: the same inspection finds ingest's listening socket.
        let ingestPid = try XCTUnwrap(offers.cluster.supervisor.pid(of: "ingest"))
        XCTAssertTrue(try ProcessSockets.all(pid: ingestPid).contains { $0.listening })

        try waitUntil("the signer wrote its metrics file", timeout: 15) {
            (try? String(contentsOfFile: offers.signerMetricsPath, encoding: .utf8))?.contains("outcome=\"signed\"") ?? false
        }
        let log = try String(contentsOfFile: offers.signerLogPath, encoding: .utf8)
        let metrics = try String(contentsOfFile: offers.signerMetricsPath, encoding: .utf8)
        XCTAssertTrue(log.contains("signer_started"))
        let pem = try String(contentsOfFile: try OfferCluster.signingKeyPath, encoding: .utf8)
        let key = try P256PrivateKey(pem: pem)
        var secrets = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        let der = try key.pkcs8DER()
        secrets.append(Base64.encode(der))
        secrets.append(der.suffix(32).map { String(format: "%02x", $0) }.joined())   // the tail of the private scalar area
        for secret in secrets {
            XCTAssertFalse(log.contains(secret), "log lines contain key material")
            XCTAssertFalse(metrics.contains(secret), "metrics contain key material")
        }
    }

    /// Last: SIGSTOP freezes the signer; ingest answers 504 within the deadline; SIGCONT resumes it
    /// and the requests it missed are dropped as expired.
    func testZZSignerStoppedMeans504WithinTheDeadline() throws {
        let offers = try running()
        let user = "s504-\(Self.run)"
        try offers.seed(user: user, subscriptions: [OfferSubscription(key: "50\(Self.run)01", purchases: [
            .init(transactionId: "50\(Self.run)011", productId: "vip.1m", startMs: now - 90 * day, endMs: now - 60 * day),
        ])])
        let pid = try XCTUnwrap(offers.signerPid)
        XCTAssertEqual(kill(pid, SIGSTOP), 0)
        let started = Date()
        let response = try signature(offers, ["user_id": user, "product_id": "vip.1m"])
        let elapsed = Date().timeIntervalSince(started) * 1000
        kill(pid, SIGCONT)
        XCTAssertEqual(response.status, 504, response.text)
        XCTAssertGreaterThanOrEqual(elapsed, Double(OfferCluster.signTimeoutMs) - 50)
        XCTAssertLessThan(elapsed, Double(OfferCluster.signTimeoutMs) + 1000, "answered at the deadline, not later")
        try waitUntil("the resumed signer dropped the expired request", timeout: 20) {
            (try? String(contentsOfFile: offers.signerMetricsPath, encoding: .utf8))?.contains("outcome=\"expired\"") ?? false
        }
        // And it answers again.
        XCTAssertEqual(try signature(offers, ["user_id": user, "product_id": "vip.1m"]).status, 200)
    }

    private func decode(_ jws: String) throws -> ([String: Any], [String: Any], [UInt8], [UInt8]) {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let h = Base64URL.decode(parts[0]), let c = Base64URL.decode(parts[1]), let s = Base64URL.decode(parts[2]),
              let header = try JSONSerialization.jsonObject(with: Data(h)) as? [String: Any],
              let claims = try JSONSerialization.jsonObject(with: Data(c)) as? [String: Any] else {
            throw ClusterError("not a compact JWS: \(jws)")
        }
        return (header, claims, Array((parts[0] + "." + parts[1]).utf8), s)
    }
}
