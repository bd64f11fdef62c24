import Crypto
import Foundation
import XCTest

/// X.509 parsing and chain verification against OpenSSL, with the facts and origin
/// assertions of SOURCES.md §1 (Apple's test PKI and the real Apple certificates).
final class CertificateTests: XCTestCase {
    private let leafOID = "1.2.840.113635.100.6.11.1"
    private let intermediateOID = "1.2.840.113635.100.6.2.1"

    func testRealAppleCertificateFacts() throws {
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

    func testAppleTestPKIFacts() throws {
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

    // MARK: Chains (SOURCES.md §1, effective date 1761962975, online checks off)

    func testValidTestChainPassesWithoutStrictAndReturnsLeafKey() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let leaf = try Fixtures.testLeaf()
        let result = verifier.verify(chain: [leaf, try Fixtures.testIntermediate()], at: Fixtures.chainTestDate, strict: false)
        XCTAssertEqual(result, .valid(leaf.publicKey))
    }

    /// Apple's test certificates have no key identifiers, so RFC 5280 strict mode rejects them
    /// (Apple's python library turns strict off for them); real Apple chains pass strict.
    func testTestChainFailsStrictMode() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let result = verifier.verify(chain: [try Fixtures.testLeaf(), try Fixtures.testIntermediate()], at: Fixtures.chainTestDate, strict: true)
        XCTAssertFalse(result.isValid)
        XCTAssertTrue(result.failureReason?.contains("Key Identifier") == true, result.failureReason ?? "")
    }

    func testInvalidOIDChainsPassX509ButLackAppleOIDs() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let badIntermediate = try Fixtures.certificate("apple-lib/certs/testInvalidOIDIntermediate.pem")
        let itsLeaf = try Fixtures.certificate("apple-lib/certs/testInvalidIntermediateLeaf.pem")
        XCTAssertTrue(verifier.verify(chain: [itsLeaf, badIntermediate], at: Fixtures.chainTestDate, strict: false).isValid)
        XCTAssertFalse(badIntermediate.hasExtension(oid: intermediateOID), "the OID check is what must reject it")
        XCTAssertTrue(badIntermediate.hasExtension(oid: "1.2.840.113635.100.6.2.2"))

        let badLeaf = try Fixtures.certificate("apple-lib/certs/testInvalidOIDLeaf.pem")
        XCTAssertTrue(verifier.verify(chain: [badLeaf, try Fixtures.testIntermediate()], at: Fixtures.chainTestDate, strict: false).isValid)
        XCTAssertFalse(badLeaf.hasExtension(oid: leafOID))
        XCTAssertTrue(badLeaf.hasExtension(oid: "1.2.840.113635.100.6.11.2"))
    }

    func testChainIsCheckedAtTheGivenTime() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let chain = [try Fixtures.testLeaf(), try Fixtures.testIntermediate()]
        let expired = verifier.verify(chain: chain, at: Date(timeIntervalSince1970: 2_280_946_846), strict: false)
        XCTAssertEqual(expired.failureReason?.hasPrefix("certificate has expired"), true, expired.failureReason ?? "")
        let early = verifier.verify(chain: chain, at: Fixtures.date("2022-06-01T00:00:00Z"), strict: false)
        XCTAssertEqual(early.failureReason?.hasPrefix("certificate is not yet valid"), true, early.failureReason ?? "")
    }

    func testRealAppleChainPassesStrictAndTestChainFailsAgainstRealRoot() throws {
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.appleRootG3()])
        let leaf = try Fixtures.certificate("certs/apple-real/ProdECCReceiptSigning-2025-leaf.der")
        XCTAssertEqual(verifier.verify(chain: [leaf, try Fixtures.appleWWDRG6()], at: Fixtures.chainTestDate, strict: true),
                       .valid(leaf.publicKey))
        let testChain = verifier.verify(chain: [try Fixtures.testLeaf(), try Fixtures.testIntermediate()], at: Fixtures.chainTestDate, strict: false)
        XCTAssertFalse(testChain.isValid)
    }

    /// Only configured roots are anchors: a root carried in the chain is never trusted, and a
    /// trusted intermediate is not an anchor (X509_V_FLAG_PARTIAL_CHAIN stays off).
    func testOnlyConfiguredSelfSignedRootsAnchorAChain() throws {
        let withOwnRoot = [try Fixtures.testLeaf(), try Fixtures.testIntermediate(), try Fixtures.testCA()]
        let realRoot = try CertificateChainVerifier(trustedRoots: [try Fixtures.appleRootG3()])
        let result = realRoot.verify(chain: withOwnRoot, at: Fixtures.chainTestDate, strict: false)
        XCTAssertEqual(result.failureReason?.hasPrefix("self-signed certificate in certificate chain"), true, result.failureReason ?? "")

        let intermediateAsRoot = try CertificateChainVerifier(trustedRoots: [try Fixtures.testIntermediate()])
        XCTAssertFalse(intermediateAsRoot.verify(chain: [try Fixtures.testLeaf()], at: Fixtures.chainTestDate, strict: false).isValid)

        let testRoot = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        XCTAssertTrue(testRoot.verify(chain: withOwnRoot, at: Fixtures.chainTestDate, strict: false).isValid)
        XCTAssertEqual(testRoot.verify(chain: [], at: Fixtures.chainTestDate), .invalid(reason: "empty certificate chain"))
        XCTAssertThrowsError(try TrustStore(roots: []))
    }

    /// Apple's mock JWS (SOURCES.md §2): its x5c[2] is a different certificate with the test
    /// CA's name and key; the chain anchors on the configured testCA, not on x5c[2].
    func testMockJWSChainAnchorsOnConfiguredRoot() throws {
        let jws = try Fixtures.text("apple-lib/mock_signed_data/testNotification").trimmingCharacters(in: .whitespacesAndNewlines)
        let header = try JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(jws.split(separator: ".")[0])))) as? [String: Any]
        let x5c = try XCTUnwrap(header?["x5c"] as? [String]).map { try X509Certificate(base64DER: $0) }
        XCTAssertEqual(x5c.count, 3)
        XCTAssertNotEqual(x5c[2], try Fixtures.testCA())
        XCTAssertEqual(x5c[2].publicKey, try Fixtures.testCA().publicKey)
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.testCA()])
        let signedDate = Date(timeIntervalSince1970: 1_681_314_324)
        XCTAssertTrue(verifier.verify(chain: Array(x5c.prefix(2)), at: signedDate, strict: false).isValid)
        let parts = jws.split(separator: ".")
        XCTAssertTrue(x5c[0].publicKey.verify(rawSignature: try XCTUnwrap(Base64URL.decode(parts[2])),
                                              message: Array("\(parts[0]).\(parts[1])".utf8)))
    }

    /// The verified-chain cache must answer exactly as OpenSSL does, at the edges of the
    /// validity window (notBefore <= t < notAfter) and per strict flag.
    func testCachedVerificationMatchesOpenSSLAtWindowEdges() throws {
        let chain = [try Fixtures.testLeaf(), try Fixtures.testIntermediate()]
        let root = try Fixtures.testCA()
        let cached = try CertificateChainVerifier(trustedRoots: [root])
        let uncached = try CertificateChainVerifier(trustedRoots: [root], cacheCapacity: 0)
        XCTAssertTrue(cached.verify(chain: chain, at: Fixtures.chainTestDate, strict: false).isValid)  // warms the cache
        let all = chain + [root]
        let lower = try XCTUnwrap(all.map(\.notBefore).max())
        let upper = try XCTUnwrap(all.map(\.notAfter).min())
        let edges: [(Date, Bool)] = [(lower.addingTimeInterval(-1), false), (lower, true),
                                     (upper.addingTimeInterval(-1), true), (upper, false), (Fixtures.chainTestDate, true)]
        for (date, expected) in edges {
            XCTAssertEqual(uncached.verify(chain: chain, at: date, strict: false).isValid, expected, "OpenSSL at \(date)")
            XCTAssertEqual(cached.verify(chain: chain, at: date, strict: false).isValid, expected, "cache at \(date)")
            XCTAssertEqual(cached.verify(derChain: chain.map(\.der), at: date, strict: false).isValid, expected, "DER at \(date)")
        }
        XCTAssertFalse(cached.verify(chain: chain, at: Fixtures.chainTestDate, strict: true).isValid, "strict is part of the key")
        XCTAssertFalse(cached.verify(chain: [chain[0]], at: Fixtures.chainTestDate, strict: false).isValid, "leaf alone")
        let garbage = cached.verify(derChain: [Array("abc".utf8), chain[1].der], at: Fixtures.chainTestDate, strict: false)
        XCTAssertTrue(garbage.failureReason?.hasPrefix("certificate 0 is not valid X.509") == true, garbage.failureReason ?? "")
    }

    func testPEMBundleAndGarbageCertificates() throws {
        let bundle = try Fixtures.text("apple-lib/certs/testLeaf.pem") + "\n" + (try Fixtures.text("apple-lib/certs/testIntermediate.pem"))
        XCTAssertEqual(try X509Certificate.certificates(pem: bundle).map(\.serialHex), ["0C", "0B"])
        XCTAssertEqual(try X509Certificate.certificates(pem: "no certificates here"), [])

        XCTAssertThrowsError(try X509Certificate(base64DER: "abc"))
        XCTAssertThrowsError(try X509Certificate(base64DER: Base64.encode(Array("abc".utf8))))
        XCTAssertThrowsError(try X509Certificate(der: []))
        XCTAssertThrowsError(try X509Certificate(pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
        let der = try Fixtures.appleWWDRG6().der
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
        // No cache: every verification goes through OpenSSL concurrently.
        let verifier = try CertificateChainVerifier(trustedRoots: [try Fixtures.appleRootG3(), try Fixtures.testCA()], cacheCapacity: 0)
        let real = [try Fixtures.certificate("certs/apple-real/ProdECCReceiptSigning-2025-leaf.der"), try Fixtures.appleWWDRG6()]
        let test = [try Fixtures.testLeaf(), try Fixtures.testIntermediate()]
        let date = Fixtures.chainTestDate
        let outcomes = await withTaskGroup(of: [Bool].self) { group in
            for worker in 0..<4 {
                group.addTask {
                    (0..<50).map { index in
                        let chain = (worker + index) % 2 == 0 ? real : test
                        return verifier.verify(chain: chain, at: date, strict: chain == real).isValid
                    }
                }
            }
            return await group.reduce(into: [Bool]()) { $0 += $1 }
        }
        XCTAssertEqual(outcomes.count, 200)
        XCTAssertTrue(outcomes.allSatisfy { $0 })
    }
}
