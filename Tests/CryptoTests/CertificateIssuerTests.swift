import Crypto
import Foundation
import XCTest

/// Contract: `TestCertificateChain.generate` issues root → intermediate → leaf with P-256 keys,
/// shaped like Apple's (marker OIDs on intermediate and leaf, CA flags, key identifiers), so the
/// chain verifies with `CertificateChainVerifier` in strict mode against its own root, and only
/// within its validity window and only against that root. Certificates and keys survive a PEM
/// round trip (the simulator persists its PKI as files the workers are pointed at).
final class CertificateIssuerTests: XCTestCase {
    private static let start = Date(timeIntervalSince1970: 1_700_000_000)
    private static let end = Date(timeIntervalSince1970: 2_000_000_000)
    private static let chain = Result { try TestCertificateChain.generate(notBefore: start, notAfter: end) }

    private func chain() throws -> TestCertificateChain { try Self.chain.get() }

    func testChainHasApplesShape() throws {
        let chain = try chain()
        XCTAssertTrue(chain.root.certificate.isCA)
        XCTAssertTrue(chain.root.certificate.isSelfIssued)
        XCTAssertTrue(chain.intermediate.certificate.isCA)
        XCTAssertFalse(chain.leaf.certificate.isCA)
        XCTAssertTrue(chain.intermediate.certificate.hasExtension(oid: TestCertificateChain.intermediateMarkerOID))
        XCTAssertFalse(chain.intermediate.certificate.hasExtension(oid: TestCertificateChain.leafMarkerOID))
        XCTAssertTrue(chain.leaf.certificate.hasExtension(oid: TestCertificateChain.leafMarkerOID))
        XCTAssertEqual(chain.leaf.certificate.issuerSummary, chain.intermediate.certificate.subjectSummary)
        XCTAssertEqual(chain.intermediate.certificate.issuerSummary, chain.root.certificate.subjectSummary)
        XCTAssertEqual(chain.leaf.certificate.publicKey, chain.leaf.key.publicKey)
        XCTAssertEqual(chain.leaf.certificate.publicKey.type, .p256)
        XCTAssertEqual(chain.leaf.certificate.notBefore, Self.start)
        XCTAssertEqual(chain.leaf.certificate.notAfter, Self.end)
        XCTAssertEqual(chain.x5c.count, 3)
        XCTAssertEqual(try X509Certificate(base64DER: chain.x5c[0]), chain.leaf.certificate)
    }

    func testChainVerifiesStrictlyAgainstItsRootInsideItsValidity() throws {
        let chain = try chain()
        let verifier = try CertificateChainVerifier(trustedRoots: [chain.root.certificate])
        let path = [chain.leaf.certificate, chain.intermediate.certificate]
        let inside = Self.start.addingTimeInterval(86_400)
        let strict = verifier.verify(chain: path, at: inside, strict: true)
        XCTAssertTrue(strict.isValid, strict.failureReason ?? "")
        XCTAssertEqual(strict.verified, chain.leaf.key.publicKey)
        XCTAssertTrue(verifier.verify(chain: path, at: inside, strict: false).isValid)
        XCTAssertFalse(verifier.verify(chain: path, at: Self.start.addingTimeInterval(-86_400)).isValid, "not yet valid")
        XCTAssertFalse(verifier.verify(chain: path, at: Self.end.addingTimeInterval(86_400)).isValid, "expired")
        XCTAssertFalse(verifier.verify(chain: [chain.leaf.certificate], at: inside).isValid, "intermediate missing")
    }

    func testAnotherRootIsNotTrusted() throws {
        let chain = try chain()
        let other = try TestCertificateChain.generate(name: "Other", notBefore: Self.start, notAfter: Self.end)
        let verifier = try CertificateChainVerifier(trustedRoots: [other.root.certificate])
        XCTAssertFalse(verifier.verify(chain: [chain.leaf.certificate, chain.intermediate.certificate],
                                       at: Self.start.addingTimeInterval(60)).isValid)
        // Same subject names, different keys: still refused (trust is the key, not the name).
        let twin = try TestCertificateChain.generate(notBefore: Self.start, notAfter: Self.end)
        let twinVerifier = try CertificateChainVerifier(trustedRoots: [twin.root.certificate])
        XCTAssertFalse(twinVerifier.verify(chain: [chain.leaf.certificate, chain.intermediate.certificate],
                                           at: Self.start.addingTimeInterval(60)).isValid)
    }

    func testPEMRoundTripOfCertificatesAndKeys() throws {
        let chain = try chain()
        let bundle = chain.certificates.map(\.pem).joined()
        XCTAssertEqual(try X509Certificate.certificates(pem: bundle), chain.certificates)
        let key = try P256PrivateKey(pem: try chain.leaf.key.pkcs8PEM())
        XCTAssertEqual(key.publicKey, chain.leaf.certificate.publicKey)
        let message = Array("signed by the reloaded key".utf8)
        XCTAssertTrue(chain.leaf.certificate.publicKey.verify(signature: try key.sign(message), message: message))
    }

    func testLeafKeySignsJWSThatTheLeafCertificateVerifies() throws {
        let chain = try chain()
        let jws = try JWSSigner.signES256(header: ["x5c": chain.x5c], payload: ["hello": "world"], key: chain.leaf.key)
        let parts = jws.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        let signature = try XCTUnwrap(Base64URL.decode(parts[2]))
        XCTAssertTrue(chain.leaf.certificate.publicKey.verify(rawSignature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)))
        XCTAssertFalse(chain.intermediate.certificate.publicKey.verify(rawSignature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)))
    }
}
