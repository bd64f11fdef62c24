import Crypto
import Foundation
import Signer
import TestSupport
import XCTest

/// Contract: the 2025 StoreKit compact JWS forms carry exactly the header {alg ES256, kid, typ JWT}
/// and the claims Apple specifies (iss, iat, aud, bid, nonce + the form's own), verify with the
/// key's public key, decode and verify with PyJWT, and have the same shape as the JWS Apple's own
/// Python signature creators make for the same inputs.
final class JWSSignatureTests: XCTestCase {
    private let now: Int64 = 1_760_000_000_456

    private func signer() throws -> OfferSigner {
        OfferSigner(keys: try SigningKeyRing(keys: ["keyId": try SignerFixtures.signingKey()]), issuerId: "issuerId",
                    clock: { [now] in now })
    }

    func testPromotionalOfferV2HeaderAndClaimsAreExactAndVerify() throws {
        let signed = try signer().signPromotionalOfferJWS(bundleId: "bundleId", productId: "productId", offerId: "offerIdentifier",
                                                         transactionId: "transactionId")
        let jws = try DecodedJWS(signed.jws)
        XCTAssertEqual(jws.header as NSDictionary, ["alg": "ES256", "kid": "keyId", "typ": "JWT"])
        XCTAssertEqual(Set(jws.claims.keys), ["iss", "iat", "aud", "bid", "nonce", "productId", "offerIdentifier", "transactionId"])
        XCTAssertEqual(jws.claims["iss"] as? String, "issuerId")
        XCTAssertEqual((jws.claims["iat"] as? NSNumber)?.int64Value, now / 1000, "iat in seconds")
        XCTAssertEqual(jws.claims["aud"] as? String, "promotional-offer")
        XCTAssertEqual(jws.claims["bid"] as? String, "bundleId")
        XCTAssertEqual(jws.claims["nonce"] as? String, signed.nonce)
        XCTAssertEqual(jws.claims["productId"] as? String, "productId")
        XCTAssertEqual(jws.claims["offerIdentifier"] as? String, "offerIdentifier")
        XCTAssertEqual(jws.claims["transactionId"] as? String, "transactionId")
        XCTAssertEqual(jws.signature.count, 64, "ES256 signature is r||s")
        XCTAssertTrue(try SignerFixtures.signingKey().publicKey.verify(rawSignature: jws.signature, message: jws.signingInput))

        let withoutTransaction = try DecodedJWS(try signer().signPromotionalOfferJWS(
            bundleId: "bundleId", productId: "productId", offerId: "offerIdentifier", transactionId: nil).jws)
        XCTAssertNil(withoutTransaction.claims["transactionId"], "transactionId is optional")
    }

    func testIntroductoryOfferEligibilityCarriesABooleanAndVerifies() throws {
        for allow in [true, false] {
            let signed = try signer().signIntroductoryOfferEligibilityJWS(bundleId: "bundleId", productId: "productId",
                                                                          allowIntroductoryOffer: allow, transactionId: "transactionId")
            let jws = try DecodedJWS(signed.jws)
            XCTAssertEqual(jws.header as NSDictionary, ["alg": "ES256", "kid": "keyId", "typ": "JWT"])
            XCTAssertEqual(Set(jws.claims.keys), ["iss", "iat", "aud", "bid", "nonce", "productId", "allowIntroductoryOffer", "transactionId"])
            XCTAssertEqual(jws.claims["aud"] as? String, "introductory-offer-eligibility")
            // A JSON boolean, not 0/1: StoreKit decodes it as Bool.
            XCTAssertTrue(String(decoding: Base64URL.decode(signed.jws.split(separator: ".")[1])!, as: UTF8.self)
                .contains("\"allowIntroductoryOffer\":\(allow)"))
            XCTAssertTrue(try SignerFixtures.signingKey().publicKey.verify(rawSignature: jws.signature, message: jws.signingInput))
        }
        XCTAssertThrowsError(try signer().signIntroductoryOfferEligibilityJWS(bundleId: "b", productId: "p", allowIntroductoryOffer: true,
                                                                              transactionId: ""))
    }

    func testJWSNeedsAnIssuerId() throws {
        let noIssuer = OfferSigner(keys: try SigningKeyRing(keys: ["keyId": try SignerFixtures.signingKey()]))
        XCTAssertThrowsError(try noIssuer.signPromotionalOfferJWS(bundleId: "b", productId: "p", offerId: "o", transactionId: nil)) {
            XCTAssertEqual(($0 as? SignerError).map { "\($0)" }?.contains("issuer id"), true)
        }
    }

    func testPyJWTVerifiesOursAndAppleLibraryMakesTheSameShape() throws {
        let publicPath = FileManager.default.temporaryDirectory.appendingPathComponent("signer-jws-\(UUID().uuidString).pem").path
        try GeneratedPKI.shared().offerPublicKeyPEM.write(toFile: publicPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: publicPath) }
        let keyPath = try SignerFixtures.signingKeyPath

        let ours = try signer().signPromotionalOfferJWS(bundleId: "bundleId", productId: "productId", offerId: "offerIdentifier",
                                                       transactionId: "transactionId")
        let decoded = try XCTUnwrap(ApplePython.run(["decode-jws", publicPath], json: ["jws": ours.jws, "audience": "promotional-offer"]) as? [String: Any])
        XCTAssertEqual(decoded["header"] as? NSDictionary, ["alg": "ES256", "kid": "keyId", "typ": "JWT"])
        XCTAssertEqual((decoded["claims"] as? [String: Any])?["nonce"] as? String, ours.nonce)

        let apple = try XCTUnwrap(ApplePython.run(["apple-jws", keyPath], json: [
            "kind": "promotional", "keyId": "keyId", "issuerId": "issuerId", "bundleId": "bundleId",
            "productId": "productId", "offerId": "offerIdentifier", "transactionId": "transactionId",
        ]) as? [String: String])
        let theirs = try DecodedJWS(try XCTUnwrap(apple["jws"]))
        let mine = try DecodedJWS(ours.jws)
        XCTAssertEqual(theirs.header as NSDictionary, mine.header as NSDictionary)
        XCTAssertEqual(Set(theirs.claims.keys), Set(mine.claims.keys))
        for claim in ["iss", "aud", "bid", "productId", "offerIdentifier", "transactionId"] {
            XCTAssertEqual(theirs.claims[claim] as? String, mine.claims[claim] as? String, claim)
        }
        XCTAssertTrue(try SignerFixtures.signingKey().publicKey.verify(rawSignature: theirs.signature, message: theirs.signingInput))

        let appleIntro = try XCTUnwrap(ApplePython.run(["apple-jws", keyPath], json: [
            "kind": "intro", "keyId": "keyId", "issuerId": "issuerId", "bundleId": "bundleId",
            "productId": "productId", "allowIntroductoryOffer": false, "transactionId": "transactionId",
        ]) as? [String: String])
        let myIntro = try DecodedJWS(try signer().signIntroductoryOfferEligibilityJWS(
            bundleId: "bundleId", productId: "productId", allowIntroductoryOffer: false, transactionId: "transactionId").jws)
        let theirIntro = try DecodedJWS(try XCTUnwrap(appleIntro["jws"]))
        XCTAssertEqual(Set(theirIntro.claims.keys), Set(myIntro.claims.keys))
        XCTAssertEqual(theirIntro.claims["allowIntroductoryOffer"] as? Bool, false)
        XCTAssertEqual(myIntro.claims["allowIntroductoryOffer"] as? Bool, false)
    }
}
