import Crypto
import Foundation
import XCTest

/// Contract: `PKCS7Signer` produces a DER PKCS#7 SignedData with the content attached and the
/// chain embedded, which `PKCS7SignedData` parses back to the same content and verifies
/// against the generated root (strict), and which fails against any other root or after a
/// single flipped bit. A key that does not match the signer certificate is refused up front.
final class PKCS7SignerTests: XCTestCase {
    private static let start = Date(timeIntervalSince1970: 1_700_000_000)
    private static let chain = Result {
        try TestCertificateChain.generate(notBefore: start, notAfter: start.addingTimeInterval(10 * 365 * 86_400))
    }

    private let payload: [UInt8] = [0x31, 0x08, 0x30, 0x06, 0x02, 0x01, 0x02, 0x04, 0x01, 0x41]  // SET { SEQ { 2, "A" } }
    private var inside: Date { Self.start.addingTimeInterval(86_400) }

    func testSignedDataParsesBackAndVerifiesStrictlyAgainstTheRoot() throws {
        let chain = try Self.chain.get()
        let der = try PKCS7Signer(chain: chain).sign(payload)
        XCTAssertEqual(der.first, 0x30)
        let signed = try PKCS7SignedData.parse(der: der)
        XCTAssertEqual(signed.content, payload)
        XCTAssertEqual(signed.certificates.count, 3)
        XCTAssertTrue(signed.certificates.contains(chain.intermediate.certificate))
        let result = signed.verify(roots: [chain.root.certificate], at: inside, strict: true)
        XCTAssertTrue(result.isValid, result.failureReason ?? "")
        XCTAssertEqual(result.verified, chain.leaf.certificate)
        // Receipts travel as base64 text.
        XCTAssertEqual(try PKCS7SignedData.parse(base64: Base64.encode(der)).content, payload)
    }

    func testOtherRootAndTamperingFail() throws {
        let chain = try Self.chain.get()
        let der = try PKCS7Signer(chain: chain).sign(payload)
        let other = try TestCertificateChain.generate(name: "Other", notBefore: Self.start, notAfter: inside.addingTimeInterval(86_400))
        XCTAssertFalse(try PKCS7SignedData.parse(der: der).verify(roots: [other.root.certificate], at: inside).isValid)
        // Flip a bit inside the embedded content: the signature no longer matches.
        let contentOffset = try XCTUnwrap(firstIndex(of: payload, in: der))
        let tampered = der.flippingBit(at: contentOffset + payload.count - 1)
        let parsed = try PKCS7SignedData.parse(der: tampered)
        XCTAssertNotEqual(parsed.content, payload)
        XCTAssertFalse(parsed.verify(roots: [chain.root.certificate], at: inside).isValid)
    }

    func testEmptyAndLargeContent() throws {
        let signer = try PKCS7Signer(chain: try Self.chain.get())
        let large = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        XCTAssertEqual(try PKCS7SignedData.parse(der: try signer.sign(large)).content, large)
        let twice = (try signer.sign(payload), try signer.sign(payload))
        XCTAssertEqual(try PKCS7SignedData.parse(der: twice.0).content, try PKCS7SignedData.parse(der: twice.1).content)
    }

    func testMismatchedKeyIsRefused() throws {
        let chain = try Self.chain.get()
        XCTAssertThrowsError(try PKCS7Signer(signer: chain.leaf.certificate, key: chain.intermediate.key, chain: [])) { error in
            XCTAssertTrue(String(describing: error).contains("does not belong"))
        }
    }

    private func firstIndex(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard needle.count <= haystack.count else { return nil }
        return (0...(haystack.count - needle.count)).first { Array(haystack[$0..<($0 + needle.count)]) == needle }
    }
}
