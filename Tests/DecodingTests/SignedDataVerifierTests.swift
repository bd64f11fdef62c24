@testable import AppleDecoding
import Crypto
import Foundation
import TestSupport
import XCTest

/// Every JWS of Apple's (from ../shared, one test) verifies or fails exactly as SOURCES.md says its
/// origin (Apple's libraries, with online checks off) expects; the chain verdicts of Apple's
/// ChainVerifier tests, claims and environments run on StoreLedger's generated chain.
final class SignedDataVerifierTests: XCTestCase {
    private func appleTestVerifier(environment: AppStoreEnvironment = .sandbox, bundleId: String = "com.example",
                                   appAppleId: Int64? = 1234) throws -> SignedDataVerifier {
        try SignedDataVerifier(roots: [try Fixtures.testCA()], bundleId: bundleId, appAppleId: appAppleId,
                               environments: [environment], strictChecks: false)
    }

    /// Apple's own signed data (one test: it needs ../shared).
    func testApplesOwnSignedData() throws {
        try mockNotificationVerdictsMatchApple()
        try mockTransactionAndRenewalInfo()
        try mockWrongBundleAndMissingX5C()
        try realAppleNotificationVerifiesStrictlyAtSignedDate()
        try realSandboxTransactionEqualsExpectedPayload()
        try testChainFailsAgainstRealRootAndInStrictMode()
        try xcodeDataIsRefusedUnlessLocalVerificationIsExplicitlySkipped()
    }

    private func mockNotificationVerdictsMatchApple() throws {
        let token = try Fixtures.text("apple-lib/mock_signed_data/testNotification")
        let sandbox = try appleTestVerifier().verifyNotification(token)
        let payload = try XCTUnwrap(try sandbox.get().payload)
        XCTAssertEqual(payload["notificationType"] as? String, "TEST")
        XCTAssertEqual(try appleTestVerifier(environment: .production).verifyNotification(token).failureValue?.status, .invalidEnvironment)
        XCTAssertEqual(try appleTestVerifier(environment: .production, appAppleId: 1235).verifyNotification(token).failureValue?.status,
                       .invalidAppIdentifier)
    }

    private func mockTransactionAndRenewalInfo() throws {
        let transaction = try Fixtures.text("apple-lib/mock_signed_data/transactionInfo")
        let verified = try appleTestVerifier().verifyTransaction(transaction).get()
        XCTAssertEqual(verified.environment, .sandbox)
        XCTAssertEqual(try appleTestVerifier(bundleId: "com.example.x").verifyTransaction(transaction).failureValue?.status,
                       .invalidAppIdentifier)
        let renewal = try Fixtures.text("apple-lib/mock_signed_data/renewalInfo")
        XCTAssertEqual(try appleTestVerifier().verifyRenewalInfo(renewal).get().environment, .sandbox)
        XCTAssertEqual(try appleTestVerifier(environment: .production).verifyRenewalInfo(renewal).failureValue?.status,
                       .invalidEnvironment)
    }

    private func mockWrongBundleAndMissingX5C() throws {
        let verifier = try appleTestVerifier()
        let wrongBundle = try Fixtures.text("apple-lib/mock_signed_data/wrongBundleId")
        XCTAssertEqual(verifier.verifyNotification(wrongBundle).failureValue?.status, .invalidAppIdentifier)
        let missingX5C = try Fixtures.text("apple-lib/mock_signed_data/missingX5CHeaderClaim")
        XCTAssertEqual(verifier.verifyNotification(missingX5C).failureValue?.status, .verificationFailure)
    }

    func testWrongBundleMissingX5CAndMalformedTokens() throws {
        let pki = try TestPKI.load()
        let verifier = try pki.verifier()
        let otherApp = V2Payloads.notification(bundleId: "com.example.other", signedTransaction: nil, signedRenewal: nil)
        XCTAssertEqual(verifier.verifyNotification(try pki.sign(otherApp)).failureValue?.status, .invalidAppIdentifier)
        let ours = V2Payloads.notification(signedTransaction: nil, signedRenewal: nil)
        XCTAssertNoThrow(try verifier.verifyNotification(try pki.sign(ours)).get())
        XCTAssertEqual(verifier.verifyNotification(try pki.sign(ours, header: ["alg": "ES256"])).failureValue?.status, .verificationFailure)
        for token in ["a.b.c.d", "a.b.c", "", "...", "abc"] {
            XCTAssertEqual(verifier.verifyNotification(token).failureValue?.status, .verificationFailure, token)
        }
        // x5c that is no list, as Apple's library judges it by its length: a string or object of
        // three is unreadable certificates, of another length a wrong chain length; a number, a failure.
        let shapes: [(Any, VerificationStatus)] = [("abc", .invalidCertificate), ("abcd", .invalidChainLength),
                                                   (["a": 1, "b": 2, "c": 3], .invalidCertificate), (7, .verificationFailure),
                                                   ("", .verificationFailure), ([String](), .verificationFailure)]
        for (x5c, status) in shapes {
            let token = try pki.sign(ours, header: ["alg": "ES256", "x5c": x5c])
            XCTAssertEqual(verifier.verifyNotification(token).failureValue?.status, status, "\(x5c)")
        }
    }

    private func realAppleNotificationVerifiesStrictlyAtSignedDate() throws {
        let token = try Fixtures.jsonString("jws/apple-signed/test-notification-signed-payload.json", field: "signedPayload")
        let verifier = try SignedDataVerifier(roots: [try Fixtures.appleRootG3()], bundleId: "com.Abilities", appAppleId: nil,
                                              environments: [.sandbox], strictChecks: true)
        let payload = try verifier.verifyNotification(token).get().payload
        XCTAssertEqual(payload["notificationType"] as? String, "TEST")
        XCTAssertEqual(payload["notificationUUID"] as? String, "5e09dcfc-205e-4ea1-9883-96676f394992")
        // Apple's real chain does not verify against the test CA.
        let wrongRoot = try SignedDataVerifier(roots: [try Fixtures.testCA()], bundleId: "com.Abilities", appAppleId: nil,
                                               environments: [.sandbox], strictChecks: false)
        XCTAssertEqual(wrongRoot.verifyNotification(token).failureValue?.status, .verificationFailure)
    }

    private func realSandboxTransactionEqualsExpectedPayload() throws {
        let token = try Fixtures.text("jws/apple-signed/sandbox-consumable-transaction.jws")
        let verifier = try SignedDataVerifier(roots: [try Fixtures.appleRootG3()], bundleId: "com.goodheartapp", appAppleId: nil,
                                              environments: [.sandbox])
        let payload = try verifier.verifyTransaction(token).get().payload
        let expected = try Fixtures.jsonObject("jws/apple-signed/sandbox-consumable-transaction.expected.json")
        XCTAssertEqual(NSDictionary(dictionary: payload), NSDictionary(dictionary: expected))
        let facts = try XCTUnwrap(V2Facts.transaction(JSONFields(payload)))
        XCTAssertEqual(facts.transactionId, "2000000847061981")
        XCTAssertEqual(facts.productType, "Consumable")
        XCTAssertEqual(facts.price, 230000)
        XCTAssertEqual(facts.currency, "JPY")
        XCTAssertEqual(facts.purchaseDateMs, 1_738_645_560_000)
    }

    private func testChainFailsAgainstRealRootAndInStrictMode() throws {
        let token = try Fixtures.text("apple-lib/mock_signed_data/testNotification")
        let realRoot = try SignedDataVerifier(roots: [try Fixtures.appleRootG3()], bundleId: "com.example", appAppleId: nil,
                                              environments: [.sandbox], strictChecks: false)
        XCTAssertEqual(realRoot.verifyNotification(token).failureValue?.status, .verificationFailure)
        let strict = try SignedDataVerifier(roots: [try Fixtures.testCA()], bundleId: "com.example", appAppleId: nil,
                                            environments: [.sandbox], strictChecks: true)
        XCTAssertEqual(strict.verifyNotification(token).failureValue?.status, .verificationFailure)
        let noRoots = try SignedDataVerifier(roots: [], bundleId: "com.example", appAppleId: nil, environments: [.sandbox])
        XCTAssertEqual(noRoots.verifyNotification(token).failureValue?.status, .invalidCertificate)
    }

    private func xcodeDataIsRefusedUnlessLocalVerificationIsExplicitlySkipped() throws {
        let token = try Fixtures.text("apple-lib/xcode/xcode-signed-transaction")
        let bundle = "com.example.naturelab.backyardbirds.example"
        let production = try SignedDataVerifier(roots: [try Fixtures.appleRootG3()], bundleId: bundle, appAppleId: 1,
                                                environments: [.production])
        XCTAssertNotNil(production.verifyTransaction(token).failureValue)
        let xcodeVerified = try SignedDataVerifier(roots: [try Fixtures.appleRootG3()], bundleId: bundle, appAppleId: nil,
                                                   environments: [.xcode])
        XCTAssertEqual(xcodeVerified.verifyTransaction(token).failureValue?.status, .invalidChainLength)
        let skipping = try SignedDataVerifier(roots: [], bundleId: bundle, appAppleId: nil, environments: [.xcode],
                                              skipLocalVerification: true)
        let facts = try XCTUnwrap(V2Facts.transaction(JSONFields(try skipping.verifyTransaction(token).get().payload)))
        XCTAssertEqual(facts.productId, "pass.premium")
        XCTAssertEqual(facts.purchaseDateMs, 1_697_679_936_049)  // fractional ms truncated
        XCTAssertEqual(facts.expiresDateMs, 1_700_358_336_049)
        XCTAssertEqual(facts.offerType, 1)
        let renewal = try skipping.verifyRenewalInfo(try Fixtures.text("apple-lib/xcode/xcode-signed-renewal-info")).get()
        XCTAssertEqual(V2Facts.renewal(JSONFields(renewal.payload))?.autoRenewStatus, true)
        XCTAssertThrowsError(try SignedDataVerifier(roots: [], bundleId: bundle, appAppleId: 1, environments: [.production, .xcode],
                                                    skipLocalVerification: true))
    }

    /// Apple's ChainVerifier cases (python test_x509_verification), as x5c headers of signed
    /// tokens, on StoreLedger's generated chain and its wrong-marker twins.
    func testChainVerdictsOfApplesChainVerifierTests() throws {
        let generated = try GeneratedPKI.shared()
        let pki = try TestPKI.load()
        let (wrongIntermediate, wrongLeaf) = try generated.wrongMarkerChains()
        let payload: [String: Any] = ["bundleId": "com.example", "environment": "Sandbox", "signedDate": 1_761_962_975_000]
        let verifier = try pki.verifier()
        func status(_ x5c: [Any]) throws -> VerificationStatus? {
            verifier.verifyTransaction(try pki.sign(payload, header: ["x5c": x5c])).failureValue?.status
        }
        let valid = generated.chain.x5c
        XCTAssertNil(try status(valid))
        XCTAssertEqual(try status(wrongIntermediate.x5c), .verificationFailure)
        XCTAssertEqual(try status(wrongLeaf.x5c), .verificationFailure)
        XCTAssertEqual(try status(Array(valid.prefix(2))), .invalidChainLength)
        XCTAssertEqual(try status(["abc", valid[1], valid[2]]), .invalidCertificate)
        XCTAssertEqual(try status([Base64.encode(Array("abc".utf8)), valid[1], valid[2]]), .invalidCertificate)
        var expired = payload
        expired["signedDate"] = 2_280_946_846_000  // 2042, after the chain's notAfter
        XCTAssertEqual(verifier.verifyTransaction(try pki.sign(expired)).failureValue?.status, .verificationFailure)
    }

    func testAlgorithmSignatureAndClaims() throws {
        let pki = try TestPKI.load()
        let verifier = try pki.verifier()
        let payload = V2Payloads.transaction()
        let good = try pki.sign(payload)
        XCTAssertNoThrow(try verifier.verifyTransaction(good).get())
        // Cached chain: same verdict again.
        XCTAssertNoThrow(try verifier.verifyTransaction(good).get())
        // Tampered payload.
        let parts = good.split(separator: ".").map(String.init)
        var tamperedPayload = payload
        tamperedPayload["price"] = 1
        let forged = parts[0] + "." + Base64URL.encode(try JSONSerialization.data(withJSONObject: tamperedPayload)) + "." + parts[2]
        XCTAssertEqual(verifier.verifyTransaction(forged).failureValue?.status, .verificationFailure)
        // alg other than ES256 (signature still ES256): refused before the chain.
        let es384 = try JWSSigner.signES256(encodedHeader: Base64URL.encode(try JSONSerialization.data(withJSONObject: ["alg": "ES384", "x5c": pki.x5c])),
                                            encodedPayload: parts[1], key: pki.leafKey)
        XCTAssertEqual(verifier.verifyTransaction(es384).failureValue?.status, .verificationFailure)
        // Expired or audience-bound tokens fail as PyJWT fails them.
        var expiring = payload
        expiring["exp"] = 1
        XCTAssertEqual(verifier.verifyTransaction(try pki.sign(expiring)).failureValue?.status, .verificationFailure)
        var audience = payload
        audience["aud"] = "someone"
        XCTAssertEqual(verifier.verifyTransaction(try pki.sign(audience)).failureValue?.status, .verificationFailure)
        // Unknown enum values are kept, not refused.
        let unknown = try verifier.verifyTransaction(try pki.sign(V2Payloads.transaction(extra: ["type": "Future Type", "offerType": 9]))).get()
        XCTAssertEqual(V2Facts.transaction(JSONFields(unknown.payload))?.productType, "Future Type")
    }

    func testSeveralEnvironmentsCheckAgainstThePayloadsOwn() throws {
        let pki = try TestPKI.load()
        let both = try pki.verifier(environments: [.production, .sandbox])
        XCTAssertEqual(try both.verifyTransaction(try pki.sign(V2Payloads.transaction(environment: "Sandbox"))).get().environment, .sandbox)
        XCTAssertEqual(try both.verifyTransaction(try pki.sign(V2Payloads.transaction(environment: "Production"))).get().environment, .production)
        XCTAssertEqual(both.verifyTransaction(try pki.sign(V2Payloads.transaction(environment: "Xcode"))).failureValue?.status, .invalidEnvironment)
        XCTAssertThrowsError(try SignedDataVerifier(roots: [pki.root], bundleId: "b", appAppleId: nil, environments: [.production]))
    }
}
