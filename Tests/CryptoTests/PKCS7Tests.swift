import Crypto
import Foundation
import TestSupport
import XCTest

/// App receipts (PKCS#7 SignedData): Apple's real ones from SOURCES.md §3-5 (one test: it needs
/// ../shared), verified as `openssl cms -verify -purpose any -attime <creation date>` does:
/// signature over the content plus the signer chain to the configured root at the receipt's
/// creation date. The creation dates are copied from SOURCES.md (reading them from the payload
/// is the receipt parser's job). Parser robustness and concurrency run on a generated receipt.
final class PKCS7Tests: XCTestCase {
    private struct Receipt: Sendable {
        let name: String
        let created: String
        let xcode: Bool
        let load: @Sendable () throws -> [UInt8]
    }

    private static func file(_ path: String, created: String, xcode: Bool = false) -> Receipt {
        Receipt(name: path, created: created, xcode: xcode) { try Fixtures.base64File(path) }
    }

    private static func json(_ path: String, _ keys: [String], created: String) -> Receipt {
        Receipt(name: "\(path) \(keys.joined(separator: "."))", created: created, xcode: false) {
            let bytes = try Fixtures.bytes(path)  // outside XCTUnwrap: a skip thrown in its autoclosure is a failure
            var value: Any? = try JSONSerialization.jsonObject(with: Data(bytes))
            for key in keys { value = (value as? [String: Any])?[key] }
            return try XCTUnwrap(Base64.decode(try XCTUnwrap(value as? String, "\(path) lacks \(keys)")))
        }
    }

    private static let receipts: [Receipt] = [
        file("receipts/tpinappreceipt/receipt-production", created: "2024-02-23T17:27:16Z"),
        file("receipts/tpinappreceipt/receipt-sandbox-g5", created: "2025-12-26T18:39:47Z"),
        file("receipts/tpinappreceipt/receipt-sandbox-legacy", created: "2020-05-06T18:28:49Z"),
        file("receipts/tpinappreceipt/receipt-xcode", created: "2020-07-22T17:33:15Z", xcode: true),
        file("receipts/namecare-rust/xcode-app-receipt-legacy", created: "2025-04-30T02:30:31Z"),
        json("receipts/imdhemy-laravel/iOS-receipt.json", ["transactionReceipt"], created: "2020-11-08T16:00:57Z"),
        json("receipts/imdhemy-laravel/product-receipt.json", ["transactionReceipt"], created: "2020-11-29T19:21:44Z"),
        file("apple-lib/xcode/xcode-app-receipt-empty", created: "2023-10-19T01:18:54Z", xcode: true),
        file("apple-lib/xcode/xcode-app-receipt-with-transaction", created: "2023-10-19T01:45:40Z", xcode: true),
        json("verify-receipt/swifty/ReceiptResponseValidSubscription.json", ["latest_receipt"], created: "2019-08-15T21:06:52Z"),
        json("notifications-v1/imdhemy-laravel/appstore-server-notification.json", ["unified_receipt", "latest_receipt"],
             created: "2020-11-25T09:48:32Z"),
    ]

    private func stores() throws -> (apple: TrustStore, xcode: TrustStore) {
        (try TrustStore(roots: [try Fixtures.appleIncRoot()]), try TrustStore(roots: [try Fixtures.storeKitTestRoot()]))
    }

    func testApplesOwnReceipts() throws {
        try everyReceiptParsesAndVerifiesAtItsCreationDate()
        try everyReceiptFailsAgainstTheWrongRoot()
        try everyReceiptFailsWhenOneContentByteIsFlipped()
        try legacySHA1ReceiptIsValidOnlyAtItsCreationDate()
        try indefiniteLengthBERParses()
        try legacyTransactionReceiptSHA1Signature()
    }

    private func everyReceiptParsesAndVerifiesAtItsCreationDate() throws {
        let (apple, xcode) = try stores()
        for receipt in Self.receipts {
            let signed = try PKCS7SignedData.parse(der: try receipt.load())
            // The payload is the receipt's ASN.1 SET of attributes.
            XCTAssertEqual(signed.content.first, 0x31, receipt.name)
            XCTAssertGreaterThan(signed.content.count, 100, receipt.name)
            XCTAssertFalse(signed.certificates.isEmpty, receipt.name)
            let result = signed.verify(trustStore: receipt.xcode ? xcode : apple, at: Fixtures.date(receipt.created), strict: true)
            XCTAssertTrue(result.isValid, "\(receipt.name): \(result.failureReason ?? "")")
            XCTAssertTrue(signed.verify(trustStore: receipt.xcode ? xcode : apple, at: Fixtures.date(receipt.created), strict: false).isValid)
            if receipt.xcode {
                XCTAssertEqual(result.verified, try Fixtures.storeKitTestRoot(), "Xcode receipts are signed by the StoreKit cert itself")
            } else {
                XCTAssertTrue(result.verified?.subjectSummary.contains("Receipt Signing") == true, receipt.name)
            }
        }
    }

    private func everyReceiptFailsAgainstTheWrongRoot() throws {
        let (apple, xcode) = try stores()
        for receipt in Self.receipts {
            let signed = try PKCS7SignedData.parse(der: try receipt.load())
            let result = signed.verify(trustStore: receipt.xcode ? apple : xcode, at: Fixtures.date(receipt.created))
            XCTAssertFalse(result.isValid, receipt.name)
            XCTAssertTrue(result.failureReason?.contains("Verify error") == true, "\(receipt.name): \(result.failureReason ?? "")")
        }
    }

    private func everyReceiptFailsWhenOneContentByteIsFlipped() throws {
        let (apple, xcode) = try stores()
        for receipt in Self.receipts {
            let der = try receipt.load()
            let original = try PKCS7SignedData.parse(der: der)
            let offset = try XCTUnwrap(Self.offset(of: original.content, in: der), receipt.name)
            let tampered = try PKCS7SignedData.parse(der: der.flippingBit(at: offset))
            XCTAssertNotEqual(tampered.content, original.content, receipt.name)
            let result = tampered.verify(trustStore: receipt.xcode ? xcode : apple, at: Fixtures.date(receipt.created))
            XCTAssertFalse(result.isValid, receipt.name)
            XCTAssertNotNil(result.failureReason, receipt.name)
        }
    }

    /// Old receipts chain through WWDR G1, which expired on 2023-02-07: valid only at their date.
    private func legacySHA1ReceiptIsValidOnlyAtItsCreationDate() throws {
        let signed = try PKCS7SignedData.parse(der: try Fixtures.base64File("receipts/tpinappreceipt/receipt-sandbox-legacy"))
        let roots = [try Fixtures.appleIncRoot()]
        XCTAssertTrue(signed.verify(roots: roots, at: Fixtures.date("2020-05-06T18:28:49Z")).isValid)
        let now = signed.verify(roots: roots, at: Fixtures.date("2026-01-01T00:00:00Z"))
        XCTAssertTrue(now.failureReason?.contains("certificate has expired") == true, now.failureReason ?? "")
        XCTAssertEqual(signed.certificates.count, 3)
    }

    /// BER indefinite-length (Xcode) and DER receipts give the same kind of object.
    private func indefiniteLengthBERParses() throws {
        let ber = try Fixtures.base64File("receipts/tpinappreceipt/receipt-xcode")
        XCTAssertEqual(Array(ber.prefix(2)), [0x30, 0x80], "fixture is BER indefinite-length")
        let signed = try PKCS7SignedData.parse(der: ber)
        XCTAssertEqual(signed.certificates.map(\.subjectSummary), [try Fixtures.storeKitTestRoot().subjectSummary])
        let base64 = try Fixtures.text("receipts/tpinappreceipt/receipt-xcode")
        XCTAssertEqual(try PKCS7SignedData.parse(base64: base64).content, signed.content)
    }

    /// A receipt signed by the generated chain over an Apple-shaped payload: a SET of attribute
    /// SEQUENCEs { type INTEGER, version INTEGER, value OCTET STRING }.
    private func generatedReceipt() throws -> [UInt8] {
        func tlv(_ tag: UInt8, _ value: [UInt8]) -> [UInt8] {
            precondition(value.count < 0x1_0000)
            let length: [UInt8] = value.count < 0x80 ? [UInt8(value.count)]
                : value.count < 0x100 ? [0x81, UInt8(value.count)] : [0x82, UInt8(value.count >> 8), UInt8(value.count & 0xFF)]
            return [tag] + length + value
        }
        let attributes = (1...12).flatMap { type in
            tlv(0x30, tlv(0x02, [UInt8(type)]) + tlv(0x02, [1]) + tlv(0x04, tlv(0x0C, Array("attribute \(type) value".utf8))))
        }
        return try GeneratedPKI.shared().signReceipt(tlv(0x31, attributes))
    }

    func testGarbageReceiptsAreErrors() throws {
        let der = try generatedReceipt()
        XCTAssertNoThrow(try PKCS7SignedData.parse(der: der))
        var inputs: [[UInt8]] = [[], [0x30], [0x30, 0x80], [0x30, 0x80, 0x00, 0x00], der + [0x00]]
        inputs += stride(from: 1, to: der.count, by: 97).map { Array(der.prefix($0)) }
        inputs += try (0..<50).map { _ in try SecureRandom.bytes(count: 200) }
        // A valid certificate is DER but not PKCS#7.
        inputs.append(try GeneratedPKI.shared().chain.root.certificate.der)
        for input in inputs {
            XCTAssertThrowsError(try PKCS7SignedData.parse(der: input), "\(input.count) bytes")
        }
        XCTAssertThrowsError(try PKCS7SignedData.parse(base64: "not base64!"))
    }

    func testConcurrentVerificationOfOneReceipt() async throws {
        let signed = try PKCS7SignedData.parse(der: try generatedReceipt())
        let store = try TrustStore(roots: [try GeneratedPKI.shared().chain.root.certificate])
        let date = Fixtures.date("2025-12-26T18:39:47Z")
        XCTAssertEqual(signed.content.first, 0x31)
        let valid = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 { group.addTask { signed.verify(trustStore: store, at: date).isValid } }
            return await group.reduce(true) { $0 && $1 }
        }
        XCTAssertTrue(valid)
    }

    /// iOS 6 transaction receipts (SOURCES.md §3, last row): signature blob = version 0x02 ‖
    /// RSA signature ‖ UInt32 BE certificate length ‖ certificate DER; RSA PKCS#1 v1.5 SHA-1 over
    /// 0x02 ‖ purchase-info bytes, with the embedded PurchaseReceiptCertificate's key.
    private func legacyTransactionReceiptSHA1Signature() throws {
        let text = String(decoding: try Fixtures.base64File("receipts/itunes-iap/raw_receipt_legacy.b64"), as: UTF8.self)
        func field(_ name: String) throws -> [UInt8] {
            let start = try XCTUnwrap(text.range(of: "\"\(name)\" = \""))
            let end = try XCTUnwrap(text.range(of: "\";", range: start.upperBound..<text.endIndex))
            return try XCTUnwrap(Base64.decode(text[start.upperBound..<end.lowerBound]))
        }
        let blob = try field("signature")
        let purchaseInfo = try field("purchase-info")
        XCTAssertEqual(blob.first, 0x02)
        let signature = Array(blob[1..<129])
        let certificateLength = blob[129..<133].reduce(0) { $0 << 8 | Int($1) }
        let certificate = try X509Certificate(der: Array(blob[133..<133 + certificateLength]))
        XCTAssertTrue(certificate.subjectSummary.contains("PurchaseReceiptCertificate"), certificate.subjectSummary)
        XCTAssertEqual(certificate.publicKey.type, .rsa(bits: 1024))
        let signed = [0x02] + purchaseInfo
        XCTAssertTrue(certificate.publicKey.verify(signature: signature, message: signed, digest: .sha1))
        XCTAssertFalse(certificate.publicKey.verify(signature: signature, message: signed, digest: .sha256))
        XCTAssertFalse(certificate.publicKey.verify(signature: signature, message: purchaseInfo, digest: .sha1))
        XCTAssertFalse(certificate.publicKey.verify(signature: signature.flippingBit(at: 60), message: signed, digest: .sha1))
    }

    /// The position in `der` of a stretch of `content` (BER content may be split into chunks).
    private static func offset(of content: [UInt8], in der: [UInt8]) -> Int? {
        for start in stride(from: content.count / 2, to: content.count - 32, by: 64) {
            let window = Array(content[start..<start + 32])
            if let found = find(window, in: der) { return found + 16 }
        }
        return nil
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard needle.count <= haystack.count else { return nil }
        for index in 0...(haystack.count - needle.count) where haystack[index] == needle[0] {
            if haystack[index..<index + needle.count].elementsEqual(needle) { return index }
        }
        return nil
    }
}
