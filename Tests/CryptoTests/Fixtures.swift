import Crypto
import Foundation
import TestSupport
import XCTest

/// Apple's own bytes from ../shared/fixtures (see TestSupport.SharedFixtures); skips when absent.
enum Fixtures {
    static func bytes(_ path: String) throws -> [UInt8] { try SharedFixtures.bytes(path) }

    static func text(_ path: String) throws -> String {
        String(decoding: try bytes(path), as: UTF8.self)
    }

    /// A file holding base64 text (receipts, legacy transaction receipts).
    static func base64File(_ path: String) throws -> [UInt8] {
        let text = try text(path)  // outside XCTUnwrap: a skip thrown in its autoclosure is a failure
        return try XCTUnwrap(Base64.decode(text), "fixture \(path) is not base64")
    }

    static func certificate(_ path: String) throws -> X509Certificate {
        let data = try bytes(path)
        // The test PKI's .pem files open with `openssl x509 -text` output before the PEM block.
        let text = String(decoding: data, as: UTF8.self)
        return text.contains("-----BEGIN CERTIFICATE-----") ? try X509Certificate(pem: text) : try X509Certificate(der: data)
    }

    // Apple's test PKI (apple-lib/certs) and the real Apple certificates (certs/apple-real).
    static func testCA() throws -> X509Certificate { try certificate("apple-lib/certs/testCA.der") }
    static func testIntermediate() throws -> X509Certificate { try certificate("apple-lib/certs/testIntermediate.pem") }
    static func testLeaf() throws -> X509Certificate { try certificate("apple-lib/certs/testLeaf.pem") }
    static func appleRootG3() throws -> X509Certificate { try certificate("certs/apple-real/AppleRootCA-G3.cer") }
    static func appleWWDRG6() throws -> X509Certificate { try certificate("certs/apple-real/AppleWWDRCAG6.cer") }
    static func appleIncRoot() throws -> X509Certificate { try certificate("certs/apple-real/AppleIncRootCertificate.cer") }
    static func storeKitTestRoot() throws -> X509Certificate { try certificate("certs/xcode/StoreKitTestCertificate.cer") }

    /// The effective date of the origin chain tests (SOURCES.md §1), 2025-11-01.
    static let chainTestDate = Date(timeIntervalSince1970: 1_761_962_975)

    static func date(_ iso8601: String) -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: iso8601)!
    }
}

extension Array where Element == UInt8 {
    /// The bytes with one bit flipped at `index`.
    func flippingBit(at index: Int, bit: UInt8 = 0x01) -> [UInt8] {
        var copy = self
        copy[index] ^= bit
        return copy
    }
}
