import Crypto
import Foundation
import TestSupport
import XCTest

/// `TrustStore.buildPath`: the verified chain as OpenSSL built it, with its validity window, on
/// StoreLedger's generated Apple-shaped chain (TestSupport.GeneratedPKI).
final class CertificatePathTests: XCTestCase {
    private let inside = Date(timeIntervalSince1970: 1_761_962_975)

    func testBuiltPathEndsAtTheConfiguredRoot() throws {
        let chain = try GeneratedPKI.shared().chain
        let store = try TrustStore(roots: [chain.root.certificate])
        let built = store.buildPath(leaf: chain.leaf.certificate, untrusted: [chain.intermediate.certificate], at: inside, strict: true)
        let path = try XCTUnwrap(built.verified)
        XCTAssertEqual(path.certificates, chain.certificates)
        XCTAssertTrue(path.certificates[0].hasExtension(oid: TestCertificateChain.leafMarkerOID))
        XCTAssertTrue(path.certificates[1].hasExtension(oid: TestCertificateChain.intermediateMarkerOID))
        XCTAssertLessThanOrEqual(path.validFrom, inside)
        XCTAssertGreaterThan(path.validUntil, inside)
        XCTAssertEqual(path.validUntil, path.certificates.map(\.notAfter).min())
    }

    func testExpiryWrongRootAndMissingIntermediateFail() throws {
        let chain = try GeneratedPKI.shared().chain
        let store = try TrustStore(roots: [chain.root.certificate])
        let leaf = chain.leaf.certificate, intermediate = chain.intermediate.certificate
        XCTAssertFalse(store.buildPath(leaf: leaf, untrusted: [intermediate], at: Date(timeIntervalSince1970: 2_280_946_846), strict: false).isValid)
        let other = try TestCertificateChain.generate(name: "Another App Store", notBefore: GeneratedPKI.notBefore, notAfter: GeneratedPKI.notAfter)
        let otherStore = try TrustStore(roots: [other.root.certificate])
        XCTAssertFalse(otherStore.buildPath(leaf: leaf, untrusted: [intermediate], at: inside, strict: false).isValid)
        // Without the intermediate there is no path.
        XCTAssertFalse(store.buildPath(leaf: leaf, untrusted: [], at: inside, strict: false).isValid)
    }
}
