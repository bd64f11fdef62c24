import Crypto
import Foundation
import Signer
import TestSupport
import XCTest

/// Contract: the legacy promotional-offer signature is ECDSA P-256/SHA-256, base64 DER, over the
/// U+2063-joined payload exactly as Apple's server libraries build it. Every signature made with
/// the generated offer key verifies with OpenSSL (through the Crypto adapter and the `openssl`
/// command line) over the vector's expected payload, and Apple's own Python
/// `PromotionalOfferSignatureCreator` signs byte-identical payload strings for the same inputs.
/// The vectors are ours, plus Apple's library vectors when ../shared is present.
final class LegacySignatureTests: XCTestCase {
    private func payload(_ vector: SignerFixtures.Vector) -> PromotionalOfferPayload {
        PromotionalOfferPayload(bundleId: vector.bundleId, keyIdentifier: vector.keyId, productIdentifier: vector.productId,
                                offerIdentifier: vector.offerId, applicationUsername: vector.appAccountToken_or_applicationUsername,
                                nonce: vector.nonce, timestampMs: vector.timestamp)
    }

    func testPayloadMatchesEveryVectorWithSixInvisibleSeparators() throws {
        for vector in try SignerFixtures.vectors() {
            let text = payload(vector).string
            XCTAssertEqual(text, vector.expected_payload)
            XCTAssertEqual(payload(vector).bytes, Array(vector.expected_payload.utf8), "signed bytes = the expected string's UTF-8")
            XCTAssertEqual(text.components(separatedBy: "\u{2063}").count, 7)
            XCTAssertEqual(Array(text.utf8).filter { $0 == 0xE2 }.count, 6, "separator encodes as E2 81 A3")
            let fields = text.components(separatedBy: "\u{2063}")
            XCTAssertEqual(fields[4], vector.appAccountToken_or_applicationUsername.lowercased(), "username lowercased")
            XCTAssertEqual(fields[5], vector.nonce.lowercased(), "nonce lowercased")
        }
    }

    /// Apple's library vectors carry Apple's published key: it must be the .p8 they were made with.
    func testApplesVectorsNameApplesPublishedKey() throws {
        let inputs = try SignerFixtures.appleInputs()
        let key = try P256PrivateKey(pem: try String(contentsOfFile: try SharedFixtures.path("apple-lib/certs/testSigningKey.p8"), encoding: .utf8))
        XCTAssertEqual(key.publicKey, try PublicKey(pem: inputs.public_key_spki_pem))
        XCTAssertEqual(inputs.vectors.count, 3)
    }

    func testSignaturesVerifyWithOpenSSLOverTheExpectedPayload() throws {
        let pki = try GeneratedPKI.shared()
        let key = pki.offerKey
        let published = try PublicKey(pem: pki.offerPublicKeyPEM)
        XCTAssertEqual(key.publicKey, published, "the PEM public key belongs to the signing key")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("signer-openssl-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let publicPath = directory.appendingPathComponent("public.pem").path
        try pki.offerPublicKeyPEM.write(toFile: publicPath, atomically: true, encoding: .utf8)

        for (index, vector) in try SignerFixtures.vectors().enumerated() {
            let signed = try OfferSigner.sign(payload(vector), key: key)
            XCTAssertEqual(signed.keyIdentifier, vector.keyId)
            XCTAssertEqual(signed.nonce, vector.nonce.lowercased())
            XCTAssertEqual(signed.timestamp, vector.timestamp)
            let der = try XCTUnwrap(Base64.decode(signed.signature))
            XCTAssertEqual(der.first, 0x30, "DER SEQUENCE, not 64-byte r||s")
            XCTAssertTrue((68...72).contains(der.count))
            let expected = Array(vector.expected_payload.utf8)
            XCTAssertTrue(published.verify(signature: der, message: expected))
            XCTAssertFalse(published.verify(signature: der, message: Array((vector.expected_payload + "0").utf8)))

            // The openssl command line, independently of our adapter.
            let payloadPath = directory.appendingPathComponent("payload-\(index)").path
            let signaturePath = directory.appendingPathComponent("signature-\(index).der").path
            try Data(expected).write(to: URL(fileURLWithPath: payloadPath))
            try Data(der).write(to: URL(fileURLWithPath: signaturePath))
            let output = try runTool("/usr/bin/openssl", ["dgst", "-sha256", "-verify", publicPath, "-signature", signaturePath, payloadPath])
            XCTAssertEqual(String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines), "Verified OK")
        }
    }

    func testAppleLibrarySignsTheSamePayloadBytesForTheSameInputs() throws {
        let vectors = try SignerFixtures.vectors()
        let published = try SignerFixtures.signingKey().publicKey
        let keyPath = try SignerFixtures.signingKeyPath
        let request = vectors.map { v -> [String: Any] in
            ["bundleId": v.bundleId, "keyId": v.keyId, "productId": v.productId, "offerId": v.offerId,
             "applicationUsername": v.appAccountToken_or_applicationUsername, "nonce": v.nonce, "timestamp": v.timestamp]
        }
        let answers = try XCTUnwrap(ApplePython.run(["legacy", keyPath], json: request) as? [[String: String]])
        XCTAssertEqual(answers.count, vectors.count)
        for (vector, answer) in zip(vectors, answers) {
            let ours = payload(vector).string
            XCTAssertEqual(answer["payload"], ours, "Apple's library signed exactly our payload")
            // And Apple's signature verifies over our bytes with OpenSSL.
            let theirs = try XCTUnwrap(answer["signature"].flatMap { Base64.decode($0) })
            XCTAssertTrue(published.verify(signature: theirs, message: Array(ours.utf8)))
        }
    }

    func testSignerUsesFreshLowercaseNonceAndCurrentTime() throws {
        let ring = try SigningKeyRing(keys: ["KEY1": try SignerFixtures.signingKey()])
        let signer = OfferSigner(keys: ring, clock: { 1_700_000_000_123 })
        let first = try signer.signLegacy(bundleId: "com.example", productId: "vip.1m", offerId: "winback", applicationUsername: "Alice-Token")
        let second = try signer.signLegacy(bundleId: "com.example", productId: "vip.1m", offerId: "winback", applicationUsername: "Alice-Token")
        XCTAssertNotEqual(first.nonce, second.nonce)
        XCTAssertEqual(first.nonce, first.nonce.lowercased())
        XCTAssertNotNil(UUID(uuidString: first.nonce))
        XCTAssertEqual(first.timestamp, 1_700_000_000_123)
        XCTAssertEqual(first.keyIdentifier, "KEY1")
        let expected = "com.example\u{2063}KEY1\u{2063}vip.1m\u{2063}winback\u{2063}alice-token\u{2063}\(first.nonce)\u{2063}1700000000123"
        XCTAssertTrue(ring.keys["KEY1"]!.publicKey.verify(signature: Base64.decode(first.signature)!, message: Array(expected.utf8)))
    }

    func testUnknownKeyIdAndMissingFieldsAreRefusedWithReasons() throws {
        let signer = OfferSigner(keys: try SigningKeyRing(keys: ["KEY1": try SignerFixtures.signingKey()]))
        XCTAssertThrowsError(try signer.signLegacy(bundleId: "b", keyId: "OTHER", productId: "p", offerId: "o", applicationUsername: "")) {
            XCTAssertEqual($0 as? SignerError, .refused("unknown signing key id OTHER"))
        }
        XCTAssertThrowsError(try signer.signLegacy(bundleId: "b", productId: "p", offerId: "", applicationUsername: "")) {
            XCTAssertEqual($0 as? SignerError, .refused("offerId is required"))
        }
    }
}
