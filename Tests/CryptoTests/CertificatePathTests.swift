import Crypto
import Foundation
import XCTest

/// `TrustStore.buildPath`: the verified chain as OpenSSL built it, with its validity window.
final class CertificatePathTests: XCTestCase {
    func testBuiltPathOfApplesTestChainEndsAtTheConfiguredRoot() throws {
        let store = try TrustStore(roots: [try Fixtures.testCA()])
        let path = try XCTUnwrap(store.buildPath(leaf: try Fixtures.testLeaf(), untrusted: [try Fixtures.testIntermediate()],
                                                 at: Fixtures.chainTestDate, strict: false).verified)
        XCTAssertEqual(path.certificates.map(\.serialHex), ["0C", "0B", "B51CE402E21F9A5B"])
        XCTAssertTrue(path.certificates[0].hasExtension(oid: "1.2.840.113635.100.6.11.1"))
        XCTAssertTrue(path.certificates[1].hasExtension(oid: "1.2.840.113635.100.6.2.1"))
        XCTAssertLessThanOrEqual(path.validFrom, Fixtures.chainTestDate)
        XCTAssertGreaterThan(path.validUntil, Fixtures.chainTestDate)
        XCTAssertEqual(path.validUntil, path.certificates.map(\.notAfter).min())
    }

    func testStrictModeExpiryAndWrongRootFail() throws {
        let store = try TrustStore(roots: [try Fixtures.testCA()])
        XCTAssertFalse(store.buildPath(leaf: try Fixtures.testLeaf(), untrusted: [try Fixtures.testIntermediate()],
                                       at: Fixtures.chainTestDate, strict: true).isValid)
        XCTAssertFalse(store.buildPath(leaf: try Fixtures.testLeaf(), untrusted: [try Fixtures.testIntermediate()],
                                       at: Date(timeIntervalSince1970: 2_280_946_846), strict: false).isValid)
        let real = try TrustStore(roots: [try Fixtures.appleRootG3()])
        XCTAssertFalse(real.buildPath(leaf: try Fixtures.testLeaf(), untrusted: [try Fixtures.testIntermediate()],
                                      at: Fixtures.chainTestDate, strict: false).isValid)
        // Without the intermediate there is no path.
        XCTAssertFalse(store.buildPath(leaf: try Fixtures.testLeaf(), untrusted: [], at: Fixtures.chainTestDate, strict: false).isValid)
    }
}
