import Crypto
import Foundation
import TestSupport
import XCTest

/// ECDSA P-256 sign -> verify through OpenSSL, signature encodings (JWS r||s and DER), and, from
/// ../shared when present, the .p8 test key Apple publishes and a real Apple-signed JWS.
final class SignatureTests: XCTestCase {
    private let message = Array("header.payload".utf8)

    func testGeneratedKeySignsAndVerifiesInBothEncodings() throws {
        let key = try P256PrivateKey.generate()
        let signature = try key.sign(message)
        XCTAssertEqual(signature.raw.count, 64)
        XCTAssertEqual(key.publicKey.type, .p256)
        XCTAssertTrue(key.publicKey.verify(signature: signature, message: message))
        XCTAssertTrue(key.publicKey.verify(signature: signature.der, message: message))
        XCTAssertTrue(key.publicKey.verify(rawSignature: signature.raw, message: message))
        XCTAssertFalse(key.publicKey.verify(signature: signature, message: Array("header.payloaD".utf8)))
        XCTAssertFalse(try P256PrivateKey.generate().publicKey.verify(signature: signature, message: message), "another key")
        XCTAssertFalse(key.publicKey.verify(signature: signature.der, message: message, digest: .sha384), "another digest")
        XCTAssertNotEqual(try key.sign(message), signature, "ECDSA nonces are random")
    }

    func testEveryFlippedBitOfSignatureOrMessageFails() throws {
        let key = try P256PrivateKey.generate()
        let signature = try key.sign(message)
        for index in 0..<64 {
            XCTAssertFalse(key.publicKey.verify(rawSignature: signature.raw.flippingBit(at: index, bit: 0x10), message: message))
        }
        for index in message.indices {
            XCTAssertFalse(key.publicKey.verify(rawSignature: signature.raw, message: message.flippingBit(at: index)))
        }
        let der = signature.der
        for index in der.indices {
            XCTAssertFalse(key.publicKey.verify(signature: der.flippingBit(at: index), message: message), "DER byte \(index)")
        }
    }

    func testMalformedSignaturesAreFalseNotErrors() throws {
        let key = try P256PrivateKey.generate()
        for bad: [UInt8] in [[], [0x30], [0x30, 0x00], Array(repeating: 0, count: 64), Array(repeating: 0xFF, count: 72)] {
            XCTAssertFalse(key.publicKey.verify(signature: bad, message: message))
            XCTAssertFalse(key.publicKey.verify(rawSignature: bad, message: message))
        }
        let signature = try key.sign(message)
        XCTAssertFalse(key.publicKey.verify(signature: signature.der + [0], message: message), "trailing byte")
        XCTAssertFalse(key.publicKey.verify(rawSignature: signature.raw + [0, 0], message: message), "66-byte raw")
        XCTAssertFalse(key.publicKey.verify(rawSignature: [0] + signature.raw.dropLast(), message: message))
    }

    func testRawAndDERConversions() throws {
        // r with the high bit set needs a 0x00 pad in DER; s with leading zeros is minimised.
        let r = [UInt8](repeating: 0x80, count: 32)
        let s = [UInt8](repeating: 0, count: 31) + [0x05]
        let signature = try ECDSASignature(raw: r + s)
        XCTAssertEqual(signature.der, [0x30, 0x26, 0x02, 0x21, 0x00] + r + [0x02, 0x01, 0x05])
        XCTAssertEqual(try ECDSASignature(der: signature.der), signature)
        XCTAssertEqual(try ECDSASignature(der: signature.der).raw, r + s)
        XCTAssertEqual(signature.r, r)
        XCTAssertEqual(signature.s, s)

        let key = try P256PrivateKey.generate()
        for _ in 0..<20 {
            let signed = try key.sign(message)
            XCTAssertEqual(try ECDSASignature(der: signed.der), signed)
            XCTAssertEqual(try ECDSASignature(raw: signed.raw).der, signed.der)
        }
        // P-384 width: 48-byte components, 96-byte raw.
        XCTAssertEqual(try ECDSASignature(der: signature.der, componentLength: 48).raw.count, 96)
        // A zero component is INTEGER 0; P-521-wide components with the high bit set need the long length form.
        XCTAssertEqual(try ECDSASignature(raw: [UInt8](repeating: 0, count: 32) + s).der, [0x30, 0x06, 0x02, 0x01, 0x00, 0x02, 0x01, 0x05])
        let wide = [UInt8](repeating: 0x80, count: 66)
        let wideDER = try ECDSASignature(raw: wide + wide).der
        XCTAssertEqual(wideDER, [0x30, 0x81, 0x8A] + [0x02, 0x43, 0x00] + wide + [0x02, 0x43, 0x00] + wide)
        XCTAssertEqual(try ECDSASignature(der: wideDER, componentLength: 66).raw, wide + wide)
    }

    func testNonCanonicalDERIsRejected() {
        let cases: [(String, [UInt8])] = [
            ("negative r", [0x30, 0x06, 0x02, 0x01, 0x80, 0x02, 0x01, 0x01]),
            ("non-minimal r", [0x30, 0x07, 0x02, 0x02, 0x00, 0x01, 0x02, 0x01, 0x01]),
            ("long-form short length", [0x30, 0x81, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01]),
            ("wrong sequence length", [0x30, 0x07, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01]),
            ("trailing byte", [0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01, 0x00]),
            ("empty integer", [0x30, 0x05, 0x02, 0x00, 0x02, 0x01, 0x01]),
            ("not a sequence", [0x31, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01]),
            ("r too long", [0x30, 0x25, 0x02, 0x21, 0x01] + [UInt8](repeating: 1, count: 32) + [0x02, 0x01, 0x01]),
        ]
        for (name, der) in cases {
            XCTAssertThrowsError(try ECDSASignature(der: der), name)
        }
        XCTAssertNoThrow(try ECDSASignature(der: [0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01]))
        XCTAssertThrowsError(try ECDSASignature(raw: []))
        XCTAssertThrowsError(try ECDSASignature(raw: [1, 2, 3]))
    }

    func testPKCS8RoundTripAndRedaction() throws {
        let key = try P256PrivateKey.generate()
        let pem = try key.pkcs8PEM()
        XCTAssertTrue(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        XCTAssertEqual(try P256PrivateKey(pem: pem).publicKey, key.publicKey)
        XCTAssertEqual(try P256PrivateKey(der: try key.pkcs8DER()).publicKey, key.publicKey)
        let body = try XCTUnwrap(pem.split(separator: "\n").dropFirst().first.map(String.init))
        XCTAssertTrue(key.description.contains("redacted"))
        for rendering in [key.description, String(reflecting: key), "\(key)", String(describing: Mirror(reflecting: key).children.map(\.value))] {
            XCTAssertFalse(rendering.contains(body), "key bytes leaked: \(rendering)")
        }
    }

    /// Apple's own keys and signatures (one test: it needs ../shared).
    func testApplesOwnKeysAndSignatures() throws {
        try appleTestSigningKeyMatchesItsPublishedPublicKey()
        try realAppleJWSSignatureAndChain()
        // A P-384 public key parses as P-384 and never verifies a P-256-sized signature.
        let g3Key = try Fixtures.appleRootG3().publicKey
        XCTAssertEqual(g3Key.type, .p384)
        XCTAssertFalse(g3Key.verify(rawSignature: Array(repeating: 1, count: 64), message: message))
        XCTAssertEqual(try Fixtures.appleIncRoot().publicKey.type, .rsa(bits: 2048))
    }

    private func appleTestSigningKeyMatchesItsPublishedPublicKey() throws {
        let key = try P256PrivateKey(pem: try Fixtures.text("apple-lib/certs/testSigningKey.p8"))
        let published = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErPJyxEu2/oKCrJaaTVTrq39DKJ2XcN6W+k8UvGf+Y/lDWNbFitQocabsDUvSN0edHH3UKP5QPTz4cOlyIPMrXQ=="
        XCTAssertEqual(Base64.encode(key.publicKey.spkiDER), published)
        XCTAssertEqual(try PublicKey(spkiDER: try XCTUnwrap(Base64.decode(published))), key.publicKey)
        let signature = try key.sign(message)
        XCTAssertTrue(try PublicKey(spkiDER: try XCTUnwrap(Base64.decode(published))).verify(signature: signature, message: message))
    }

    /// SOURCES.md §6: promotional-offer V1 signatures are DER ECDSA-SHA256 over the U+2063-joined
    /// payload; signed with the generated offer key, verified with its PEM public key.
    func testPromotionalOfferVectorsSignAndVerify() throws {
        let pki = try GeneratedPKI.shared()
        let publicKey = try PublicKey(pem: pki.offerPublicKeyPEM)
        let key = pki.offerKey
        XCTAssertEqual(publicKey, key.publicKey)
        let vectors = try OfferVector.all()
        XCTAssertGreaterThanOrEqual(vectors.count, 2)
        for vector in vectors {
            let payload = Array(vector.expected_payload.utf8)
            let der = try key.sign(payload).der
            XCTAssertEqual(der.first, 0x30)
            XCTAssertTrue((70...72).contains(der.count), "DER length \(der.count)")
            XCTAssertTrue(publicKey.verify(signature: der, message: payload))
        }
    }

    func testKeyParsingRejectsOtherKeysAndGarbage() throws {
        // The root's key is P-256 but it is a certificate, not a private key.
        let certificatePEM = try GeneratedPKI.shared().chain.root.certificate.pem
        XCTAssertThrowsError(try P256PrivateKey(pem: certificatePEM))
        XCTAssertThrowsError(try P256PrivateKey(pem: ""))
        XCTAssertThrowsError(try P256PrivateKey(der: []))
        XCTAssertThrowsError(try P256PrivateKey(der: Array(repeating: 0x30, count: 100)))
        do {
            _ = try P256PrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            XCTFail("garbage key parsed")
        } catch {
            XCTAssertFalse(error.openSSLErrors.isEmpty, "OpenSSL's error queue is carried: \(error)")
        }
    }

    /// A real App Store JWS (SOURCES.md §2): ES256 over "header.payload" with x5c[0]'s key,
    /// and its chain valid to Apple Root CA - G3 at signedDate, in strict mode.
    private func realAppleJWSSignatureAndChain() throws {
        let jws = try Fixtures.text("jws/apple-signed/sandbox-consumable-transaction.jws")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        XCTAssertEqual(parts.count, 3)
        let header = try JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(parts[0])))) as? [String: Any]
        XCTAssertEqual(header?["alg"] as? String, "ES256")
        let x5c = try XCTUnwrap(header?["x5c"] as? [String]).map { try X509Certificate(base64DER: $0) }
        XCTAssertEqual(x5c.count, 3)
        let signingInput = Array("\(parts[0]).\(parts[1])".utf8)
        let signature = try XCTUnwrap(Base64URL.decode(parts[2]))
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(x5c[0].publicKey.verify(rawSignature: signature, message: signingInput))
        XCTAssertFalse(x5c[0].publicKey.verify(rawSignature: signature, message: signingInput + [0x20]))
        XCTAssertFalse(x5c[1].publicKey.verify(rawSignature: signature, message: signingInput), "intermediate's key")

        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.appleRootG3()])
        let signedDate = Date(timeIntervalSince1970: 1_739_161_772.561)
        XCTAssertEqual(verifier.verify(chain: Array(x5c.prefix(2)), at: signedDate, strict: true), .valid(x5c[0].publicKey))
        XCTAssertFalse(verifier.verify(chain: Array(x5c.prefix(2)), at: Date(timeIntervalSince1970: 1_800_000_000)).isValid,
                       "leaf expired 2025-10-11")
        XCTAssertTrue(x5c[0].hasExtension(oid: "1.2.840.113635.100.6.11.1"))
        XCTAssertTrue(x5c[1].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
    }
}
