import Crypto
import Foundation
import TestSupport
import XCTest

/// X.509 parsing and chain verification against OpenSSL: the facts and origin assertions of
/// SOURCES.md §1 on Apple's own certificates (from ../shared, skipped when absent), and chain
/// behaviour on StoreLedger's generated Apple-shaped chain.
final class CertificateTests: XCTestCase {
    private let leafOID = "1.2.840.113635.100.6.11.1"
    private let intermediateOID = "1.2.840.113635.100.6.2.1"

    private func realAppleCertificateFacts() throws {
        let root = try Fixtures.appleIncRoot()
        XCTAssertEqual(root.sha256FingerprintHex, "B0B1730ECBC7FF4505142C49F1295E6EDA6BCAED7E2C68C5BE91B5A11001F024")
        XCTAssertEqual(root.serialHex, "02")
        XCTAssertEqual(root.subjectSummary, "C = US, O = Apple Inc., OU = Apple Certification Authority, CN = Apple Root CA")
        XCTAssertEqual(root.notBefore, Fixtures.date("2006-04-25T21:40:36Z"))
        XCTAssertEqual(root.notAfter, Fixtures.date("2035-02-09T21:40:36Z"))
        XCTAssertTrue(root.isCA)
        XCTAssertTrue(root.isSelfIssued)

        let g3 = try Fixtures.appleRootG3()
        XCTAssertEqual(g3.sha256FingerprintHex, "63343ABFB89A6A03EBB57E9B3F5FA7BE7C4F5C756F3017B3A8C488C3653E9179")
        XCTAssertEqual(g3.serialHex, "2DC5FC88D2C54B95")
        XCTAssertEqual(g3.publicKey.type, .p384)

        let g6 = try Fixtures.appleWWDRG6()
        XCTAssertEqual(g6.sha256FingerprintHex, "BDD4ED6E74691F0C2BFD01BE0296197AF1379E0418E2D300EFA9C3BEF642CA30")
        XCTAssertTrue(g6.serialHex.hasPrefix("22C1A147") && g6.serialHex.hasSuffix("6CD7"), g6.serialHex)
        XCTAssertTrue(g6.isCA)
        XCTAssertTrue(g6.hasExtension(oid: intermediateOID))
        XCTAssertFalse(g6.hasExtension(oid: leafOID))

        let leaf = try Fixtures.certificate("certs/apple-real/ProdECCReceiptSigning-2025-leaf.der")
        XCTAssertTrue(leaf.serialHex.hasPrefix("47C287CD") && leaf.serialHex.hasSuffix("7DB7"), leaf.serialHex)
        XCTAssertTrue(leaf.subjectSummary.contains("CN = Prod ECC Mac App Store and iTunes Store Receipt Signing"), leaf.subjectSummary)
        XCTAssertEqual(leaf.issuerSummary, g6.subjectSummary)
        XCTAssertFalse(leaf.isCA)
        XCTAssertTrue(leaf.hasExtension(oid: leafOID))
        XCTAssertEqual(leaf.publicKey.type, .p256)

        let storeKit = try Fixtures.storeKitTestRoot()
        XCTAssertTrue(storeKit.sha256FingerprintHex.hasPrefix("FF0BA36E") && storeKit.sha256FingerprintHex.hasSuffix("C864FE"))
        XCTAssertEqual(storeKit.notBefore, Fixtures.date("2020-04-01T17:52:35Z"))
    }

    private func appleTestPKIFacts() throws {
        let ca = try Fixtures.testCA()
        XCTAssertEqual(ca, try Fixtures.certificate("apple-lib/certs/testCA.pem"), "DER and PEM are the same certificate")
        XCTAssertEqual(ca.serialHex, "B51CE402E21F9A5B")
        XCTAssertEqual(ca.subjectSummary, "C = US, ST = California, L = Cupertino")
        XCTAssertTrue(ca.isCA)
        let serials = try ["testIntermediate", "testLeaf", "testInvalidOIDIntermediate", "testInvalidIntermediateLeaf", "testInvalidOIDLeaf"]
            .map { try Fixtures.certificate("apple-lib/certs/\($0).pem").serialHex }
        XCTAssertEqual(serials, ["0B", "0C", "0D", "0E", "0F"])
        let leafKey = Base64.encode(try Fixtures.testLeaf().publicKey.spkiDER)
        XCTAssertTrue(leafKey.hasPrefix("MFkw") && leafKey.hasSuffix("CPIhrA=="), leafKey)
        XCTAssertTrue(try Fixtures.testIntermediate().hasExtension(oid: intermediateOID))
        XCTAssertTrue(try Fixtures.testLeaf().hasExtension(oid: leafOID))
        XCTAssertFalse(try Fixtures.testLeaf().hasExtension(oid: "not an oid"))
        XCTAssertFalse(try Fixtures.testLeaf().hasExtension(oid: "commonName"), "names are not OIDs (no_name = 1)")
    }

    /// Apple's own certificates (one test: it needs ../shared): their published facts, and the
    /// chain verdicts of SOURCES.md §1 (effective date 1761962975, online checks off). Apple's test
    /// certificates have no key identifiers, so RFC 5280 strict mode rejects them (Apple's python
    /// library turns strict off for them); the cache keeps the two verdicts apart.
    func testApplesOwnCertificates() throws {
        try realAppleCertificateFacts()
        try appleTestPKIFacts()
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let leaf = try Fixtures.testLeaf()
        let chain = [leaf, try Fixtures.testIntermediate()]
        XCTAssertEqual(verifier.verify(chain: chain, at: Fixtures.chainTestDate, strict: false), .valid(leaf.publicKey))
        let strict = verifier.verify(chain: chain, at: Fixtures.chainTestDate, strict: true)
        XCTAssertFalse(strict.isValid, "strict is part of the cache key")
        XCTAssertTrue(strict.failureReason?.contains("Key Identifier") == true, strict.failureReason ?? "")

        // Apple's invalid-OID certificates pass plain X.509: the OID check is what must reject them.
        let badIntermediate = try Fixtures.certificate("apple-lib/certs/testInvalidOIDIntermediate.pem")
        let itsLeaf = try Fixtures.certificate("apple-lib/certs/testInvalidIntermediateLeaf.pem")
        XCTAssertTrue(verifier.verify(chain: [itsLeaf, badIntermediate], at: Fixtures.chainTestDate, strict: false).isValid)
        XCTAssertTrue(badIntermediate.hasExtension(oid: "1.2.840.113635.100.6.2.2"))
        let badLeaf = try Fixtures.certificate("apple-lib/certs/testInvalidOIDLeaf.pem")
        XCTAssertTrue(verifier.verify(chain: [badLeaf, chain[1]], at: Fixtures.chainTestDate, strict: false).isValid)
        XCTAssertTrue(badLeaf.hasExtension(oid: "1.2.840.113635.100.6.11.2"))

        // Apple's mock JWS (SOURCES.md §2): its x5c[2] is a different certificate with the test
        // CA's name and key; the chain anchors on the configured testCA, not on x5c[2].
        let jws = try Fixtures.text("apple-lib/mock_signed_data/testNotification").trimmingCharacters(in: .whitespacesAndNewlines)
        let encodedHeader = try XCTUnwrap(Base64URL.decode(jws.split(separator: ".")[0]))
        let header = try JSONSerialization.jsonObject(with: Data(encodedHeader)) as? [String: Any]
        let x5c = try XCTUnwrap(header?["x5c"] as? [String]).map { try X509Certificate(base64DER: $0) }
        XCTAssertEqual(x5c.count, 3)
        XCTAssertNotEqual(x5c[2], try Fixtures.testCA())
        XCTAssertEqual(x5c[2].publicKey, try Fixtures.testCA().publicKey)
        XCTAssertTrue(verifier.verify(chain: Array(x5c.prefix(2)), at: Date(timeIntervalSince1970: 1_681_314_324), strict: false).isValid)
        let parts = jws.split(separator: ".")
        XCTAssertTrue(x5c[0].publicKey.verify(rawSignature: try XCTUnwrap(Base64URL.decode(parts[2])),
                                              message: Array("\(parts[0]).\(parts[1])".utf8)))

        // A real Apple chain passes strict against Apple Root CA - G3; the test chain does not.
        let real = try CertificateChainVerifier(trustedRoots: [try Fixtures.appleRootG3()])
        let prodLeaf = try Fixtures.certificate("certs/apple-real/ProdECCReceiptSigning-2025-leaf.der")
        XCTAssertEqual(real.verify(chain: [prodLeaf, try Fixtures.appleWWDRG6()], at: Fixtures.chainTestDate, strict: true),
                       .valid(prodLeaf.publicKey))
        XCTAssertFalse(real.verify(chain: chain, at: Fixtures.chainTestDate, strict: false).isValid)
    }

    // MARK: Chains, on StoreLedger's generated Apple-shaped chain (TestSupport.GeneratedPKI)

    private var pki: GeneratedPKI { get throws { try GeneratedPKI.shared() } }
    private var path: [X509Certificate] { get throws { let chain = try pki.chain; return [chain.leaf.certificate, chain.intermediate.certificate] } }
    private var root: X509Certificate { get throws { try pki.chain.root.certificate } }
    private let inside = Date(timeIntervalSince1970: 1_761_962_975)

    func testValidChainPassesStrictAndReturnsLeafKey() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try root])
        let path = try path
        XCTAssertEqual(verifier.verify(chain: path, at: inside, strict: true), .valid(path[0].publicKey))
        XCTAssertEqual(verifier.verify(chain: path, at: inside, strict: false), .valid(path[0].publicKey))
    }

    func testWrongMarkerChainsPassX509ButLackAppleOIDs() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try root])
        let (wrongIntermediate, wrongLeaf) = try pki.wrongMarkerChains()
        let badIntermediate = wrongIntermediate.intermediate.certificate
        XCTAssertTrue(verifier.verify(chain: [wrongIntermediate.leaf.certificate, badIntermediate], at: inside, strict: true).isValid)
        XCTAssertFalse(badIntermediate.hasExtension(oid: intermediateOID), "the OID check is what must reject it")
        XCTAssertTrue(badIntermediate.hasExtension(oid: "1.2.840.113635.100.6.2.2"))

        let badLeaf = wrongLeaf.leaf.certificate
        XCTAssertTrue(verifier.verify(chain: [badLeaf, try path[1]], at: inside, strict: true).isValid)
        XCTAssertFalse(badLeaf.hasExtension(oid: leafOID))
        XCTAssertTrue(badLeaf.hasExtension(oid: "1.2.840.113635.100.6.11.2"))
    }

    func testChainIsCheckedAtTheGivenTime() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try root])
        let expired = verifier.verify(chain: try path, at: Date(timeIntervalSince1970: 2_280_946_846), strict: false)
        XCTAssertEqual(expired.failureReason?.hasPrefix("certificate has expired"), true, expired.failureReason ?? "")
        let early = verifier.verify(chain: try path, at: Fixtures.date("2019-06-01T00:00:00Z"), strict: false)
        XCTAssertEqual(early.failureReason?.hasPrefix("certificate is not yet valid"), true, early.failureReason ?? "")
    }

    /// Only configured roots are anchors: a root carried in the chain is never trusted, and a
    /// trusted intermediate is not an anchor (X509_V_FLAG_PARTIAL_CHAIN stays off).
    func testOnlyConfiguredSelfSignedRootsAnchorAChain() throws {
        let withOwnRoot = try path + [try root]
        let other = try TestCertificateChain.generate(name: "Another App Store", notBefore: GeneratedPKI.notBefore,
                                                      notAfter: GeneratedPKI.notAfter)
        let otherRoot = try CertificateChainVerifier(trustedRoots: [other.root.certificate])
        let result = otherRoot.verify(chain: withOwnRoot, at: inside, strict: false)
        XCTAssertEqual(result.failureReason?.hasPrefix("self-signed certificate in certificate chain"), true, result.failureReason ?? "")

        let intermediateAsRoot = try CertificateChainVerifier(trustedRoots: [try path[1]])
        XCTAssertFalse(intermediateAsRoot.verify(chain: [try path[0]], at: inside, strict: false).isValid)

        let ownRoot = try CertificateChainVerifier(trustedRoots: [try root])
        XCTAssertTrue(ownRoot.verify(chain: withOwnRoot, at: inside, strict: true).isValid)
        XCTAssertEqual(ownRoot.verify(chain: [], at: inside), .invalid(reason: "empty certificate chain"))
        XCTAssertThrowsError(try TrustStore(roots: []))
    }

    /// The verified-chain cache must answer exactly as OpenSSL does, at the edges of the
    /// validity window (notBefore <= t < notAfter).
    func testCachedVerificationMatchesOpenSSLAtWindowEdges() throws {
        let chain = try path
        let root = try root
        let cached = try CertificateChainVerifier(trustedRoots: [root])
        let uncached = try CertificateChainVerifier(trustedRoots: [root], cacheCapacity: 0)
        XCTAssertTrue(cached.verify(chain: chain, at: inside, strict: true).isValid)  // warms the cache
        let all = chain + [root]
        let lower = try XCTUnwrap(all.map(\.notBefore).max())
        let upper = try XCTUnwrap(all.map(\.notAfter).min())
        let edges: [(Date, Bool)] = [(lower.addingTimeInterval(-1), false), (lower, true),
                                     (upper.addingTimeInterval(-1), true), (upper, false), (inside, true)]
        for (date, expected) in edges {
            for strict in [false, true] {
                XCTAssertEqual(uncached.verify(chain: chain, at: date, strict: strict).isValid, expected, "OpenSSL at \(date)")
                XCTAssertEqual(cached.verify(chain: chain, at: date, strict: strict).isValid, expected, "cache at \(date)")
                XCTAssertEqual(cached.verify(derChain: chain.map(\.der), at: date, strict: strict).isValid, expected, "DER at \(date)")
            }
        }
        XCTAssertFalse(cached.verify(chain: [chain[0]], at: inside, strict: false).isValid, "leaf alone")
        let garbage = cached.verify(derChain: [Array("abc".utf8), chain[1].der], at: inside, strict: false)
        XCTAssertTrue(garbage.failureReason?.hasPrefix("certificate 0 is not valid X.509") == true, garbage.failureReason ?? "")
    }

    func testPEMBundleAndGarbageCertificates() throws {
        let chain = try pki.chain
        let bundle = chain.leaf.certificate.pem + "\n" + chain.intermediate.certificate.pem
        XCTAssertEqual(try X509Certificate.certificates(pem: bundle), [chain.leaf.certificate, chain.intermediate.certificate])
        XCTAssertEqual(try X509Certificate.certificates(pem: "no certificates here"), [])

        XCTAssertThrowsError(try X509Certificate(base64DER: "abc"))
        XCTAssertThrowsError(try X509Certificate(base64DER: Base64.encode(Array("abc".utf8))))
        XCTAssertThrowsError(try X509Certificate(der: []))
        XCTAssertThrowsError(try X509Certificate(pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
        let der = chain.intermediate.certificate.der
        XCTAssertThrowsError(try X509Certificate(der: der + [0]), "trailing byte")
        for length in stride(from: 0, to: der.count, by: 7) {
            XCTAssertThrowsError(try X509Certificate(der: Array(der.prefix(length))), "truncated at \(length)")
        }
        do {
            _ = try X509Certificate(der: Array(der.prefix(100)))
        } catch {
            XCTAssertTrue(error.description.hasPrefix("parse X.509 certificate DER: "), error.description)
            XCTAssertFalse(error.openSSLErrors.isEmpty)
        }
    }

    func testConcurrentVerificationsShareOneVerifier() async throws {
        // No cache: every verification goes through OpenSSL concurrently, over two roots.
        let other = try TestCertificateChain.generate(name: "Another App Store", notBefore: GeneratedPKI.notBefore,
                                                      notAfter: GeneratedPKI.notAfter)
        let verifier = try CertificateChainVerifier(trustedRoots: [other.root.certificate, try root], cacheCapacity: 0)
        let first = try path
        let second = [other.leaf.certificate, other.intermediate.certificate]
        let date = inside
        let outcomes = await withTaskGroup(of: [Bool].self) { group in
            for worker in 0..<4 {
                group.addTask {
                    (0..<50).map { index in
                        let chain = (worker + index) % 2 == 0 ? first : second
                        return verifier.verify(chain: chain, at: date, strict: chain == first).isValid
                    }
                }
            }
            return await group.reduce(into: [Bool]()) { $0 += $1 }
        }
        XCTAssertEqual(outcomes.count, 200)
        XCTAssertTrue(outcomes.allSatisfy { $0 })
        XCTAssertFalse(verifier.verify(chain: [second[0], first[1]], at: date).isValid, "a leaf under another intermediate")
    }
}
