@testable import AppleDecoding
import XCTest

/// The index cursor under the receipt reader: length forms, high tag numbers, indefinite lengths,
/// truncation and nesting limits, and the slice reader handing out the same elements.
final class ASN1CursorTests: XCTestCase {
    /// Identifier, DER length (short or long form) and content.
    private func tlv(_ identifier: UInt8, _ content: [UInt8]) -> [UInt8] {
        let count = content.count
        var length: [UInt8]
        switch count {
        case ..<0x80: length = [UInt8(count)]
        case ..<0x100: length = [0x81, UInt8(count)]
        default: length = [0x82, UInt8(count >> 8), UInt8(count & 0xFF)]
        }
        return [identifier] + length + content
    }

    private func spans(_ bytes: [UInt8], depth: Int = 0) throws(ASN1Error) -> [ASN1Span] {
        let read: Result<[ASN1Span], ASN1Error> = bytes.withUnsafeBufferPointer { buffer in
            var cursor = ASN1Cursor(buffer, 0..<buffer.count)
            var result: [ASN1Span] = []
            do throws(ASN1Error) {
                while !cursor.isAtEnd { result.append(try cursor.next(depth: depth)) }
                return .success(result)
            } catch {
                return .failure(error)
            }
        }
        return try read.get()
    }

    private func error(_ bytes: [UInt8], depth: Int = 0) -> String? {
        do { _ = try spans(bytes, depth: depth); return nil } catch { return error.description }
    }

    func testShortAndLongDefiniteLengths() throws {
        let short = tlv(0x04, [1, 2, 3]), long1 = tlv(0x04, Array(repeating: 7, count: 200)), long2 = tlv(0x04, Array(repeating: 9, count: 300))
        let input = short + long1 + long2
        let read = try spans(input)
        XCTAssertEqual(read.map(\.content), [2..<5, 8..<208, 212..<512])
        XCTAssertEqual(read.map(\.encoded), [0..<5, 5..<208, 208..<512])
        XCTAssertTrue(read.allSatisfy { $0.isUniversal(ASN1Element.octetString) && !$0.constructed })
        // The slice reader hands out the same elements, as slices of the input.
        let elements = try ASN1Reader.elements(input[...])
        XCTAssertEqual(elements.map { Array($0.content) }, [[1, 2, 3], Array(repeating: 7, count: 200), Array(repeating: 9, count: 300)])
        XCTAssertEqual(elements.map { Array($0.encoded) }, [short, long1, long2])
        // A non-minimal long form is read as BER allows: 0x81 0x03 is three bytes.
        XCTAssertEqual(try spans([0x04, 0x81, 0x03, 1, 2, 3]).first?.content, 3..<6)
    }

    func testLengthsThatDoNotFitAreErrors() {
        XCTAssertEqual(error([0x04, 0x85, 0, 0, 0, 0, 1, 0]), "ASN.1 length field of 5 bytes is too large")
        XCTAssertEqual(error([0x04, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]), "ASN.1 element claims 4294967295 bytes, only 0 remain")
        XCTAssertEqual(error([0x04, 0x82, 0x01]), "truncated ASN.1 length")
        XCTAssertEqual(error([0x04, 0x05, 1, 2]), "ASN.1 element claims 5 bytes, only 2 remain")
        XCTAssertEqual(error([0x04]), "truncated ASN.1: missing length")
        XCTAssertEqual(error([0x30, 0x03, 0x02, 0x01]), "ASN.1 element claims 3 bytes, only 2 remain")
    }

    func testHighTagNumbers() throws {
        // [APPLICATION 129] in the high-tag-number form (two subsequent octets), and the limits.
        let read = try spans([0x5F, 0x81, 0x01, 0x01, 0xAA])
        XCTAssertEqual(read.first?.tagClass, 1)
        XCTAssertEqual(read.first?.tagNumber, 129)
        XCTAssertEqual(read.first?.content, 4..<5)
        XCTAssertEqual(error([0x1F, 0x81, 0x81, 0x81, 0x81, 0x01, 0x00]), "ASN.1 tag number too large")
        XCTAssertEqual(error([0x1F, 0x81]), "truncated ASN.1 tag")
    }

    func testIndefiniteLengths() throws {
        let child = tlv(0x02, [5])
        let nested: [UInt8] = [0x30, 0x80] + child + [0x31, 0x80] + child + [0, 0] + [0, 0]
        let read = try spans(nested + child)
        XCTAssertEqual(read.count, 2)
        XCTAssertTrue(read[0].constructed)
        XCTAssertEqual(read[0].content, 2..<(nested.count - 2), "the children without the end marker")
        XCTAssertEqual(read[0].encoded, 0..<nested.count, "the end marker included")
        XCTAssertEqual(read[1].encoded, nested.count..<(nested.count + child.count))
        let element = try XCTUnwrap(ASN1Reader.elements(nested[...]).first)
        XCTAssertEqual(try ASN1Reader.children(of: element).map { Array($0.encoded) }, [child, [0x31, 0x80] + child + [0, 0]])
        XCTAssertEqual(error([0x04, 0x80, 0x01, 0x00, 0x00]), "indefinite length on a primitive ASN.1 element")
        XCTAssertEqual(error([0x30, 0x80] + child), "indefinite-length ASN.1 element has no end marker")
        XCTAssertEqual(error([0x30, 0x80] + child + [0]), "indefinite-length ASN.1 element has no end marker")
        XCTAssertEqual(error([0x30, 0x80, 0x02, 0x05, 0, 0]), "ASN.1 element claims 5 bytes, only 2 remain")
    }

    func testNestingIsBounded() {
        func nested(_ levels: Int) -> [UInt8] {
            Array(repeating: [0x30, 0x80], count: levels).flatMap { $0 } + Array(repeating: [0, 0], count: levels).flatMap { $0 }
        }
        XCTAssertNil(error(nested(ASN1Reader.maxDepth + 1)))
        XCTAssertEqual(error(nested(ASN1Reader.maxDepth + 2)), "ASN.1 nesting deeper than \(ASN1Reader.maxDepth)")
        XCTAssertEqual(error([0x02, 0x01, 0x00], depth: ASN1Reader.maxDepth + 1), "ASN.1 nesting deeper than \(ASN1Reader.maxDepth)")
    }

    func testEveryTruncationIsAnErrorNeverATrap() {
        let input = tlv(0x31, tlv(0x30, tlv(0x02, [0x11]) + tlv(0x02, [1]) + tlv(0x04, tlv(0x0C, Array("com.example".utf8)))))
        for cut in 1..<input.count { XCTAssertNotNil(error(Array(input.prefix(cut))), "cut at \(cut)") }
        XCTAssertNil(error(input))
    }

    // MARK: - The receipt payload read through the cursor

    private func attribute(_ type: UInt8, _ value: [UInt8]) -> [UInt8] {
        tlv(0x30, tlv(0x02, [type]) + tlv(0x02, [1]) + tlv(0x04, value))
    }

    private var attributes: [UInt8] {
        attribute(2, tlv(0x0C, Array("com.example".utf8))) + attribute(3, tlv(0x0C, Array("1.0".utf8)))
            + attribute(12, tlv(0x16, Array("2023-10-19T01:18:54Z".utf8))) + attribute(99, [0xFF])  // unknown: skipped unread
    }

    func testPayloadInDERAndInIndefiniteLengthBERReadsTheSame() throws {
        let der = try ReceiptPayloadParser.parse(tlv(0x31, attributes))
        XCTAssertEqual(der.bundleId, "com.example")
        XCTAssertEqual(der.bundleIdDER, tlv(0x0C, Array("com.example".utf8)))
        XCTAssertEqual(der.appVersion, "1.0")
        XCTAssertEqual(der.creationDateMs, 1_697_678_334_000)
        XCTAssertEqual(try ReceiptPayloadParser.parse([0x31, 0x80] + attributes + [0, 0]), der)
        // What follows the SET was never read, and still is not.
        XCTAssertEqual(try ReceiptPayloadParser.parse(tlv(0x31, attributes) + [0xDE, 0xAD]), der)
    }

    func testPayloadShapeErrors() {
        func refusal(_ payload: [UInt8]) -> String? {
            do { _ = try ReceiptPayloadParser.parse(payload); return nil } catch { return error.description }
        }
        XCTAssertEqual(refusal(tlv(0x30, attributes)), "receipt payload is not an ASN.1 SET")
        XCTAssertEqual(refusal(tlv(0x31, attributes + tlv(0x02, [1]))), "receipt attribute is not a SEQUENCE")
        XCTAssertEqual(refusal(tlv(0x31, tlv(0x30, tlv(0x02, [2]) + tlv(0x02, [1]) + tlv(0x0C, [0x41])))),
                       "receipt attribute is not (type, version, OCTET STRING value)")
        XCTAssertEqual(refusal(tlv(0x31, attribute(2, tlv(0x02, [1])))), "expected an ASN.1 string, got universal tag 2")
        XCTAssertEqual(refusal(tlv(0x31, attribute(2, tlv(0x0C, [0xC3])))), "ASN.1 string is not valid UTF-8")
        XCTAssertEqual(refusal(tlv(0x31, attribute(3, tlv(0x0C, [0x41])))), "receipt payload has no bundle id (attribute 2)")
        XCTAssertEqual(refusal(tlv(0x31, attributes + attribute(17, tlv(0x31, attribute(0x10, tlv(0x02, [0x01])))))),
                       "in-app purchase receipt has neither a transaction id nor a product id")
        // A malformed later attribute refuses the payload before an earlier one's value is read.
        XCTAssertEqual(refusal(tlv(0x31, attribute(2, tlv(0x02, [1])) + [0x30, 0x05, 0x02])), "ASN.1 element claims 5 bytes, only 1 remain")
    }
}
