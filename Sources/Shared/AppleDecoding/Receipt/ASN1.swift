/// A small, defensive BER/DER reader for the receipt payload (an ASN.1 SET of attributes) and the
/// PKCS#7 envelope. Receipts arrive as DER or as BER with indefinite lengths (Xcode and older
/// device receipts), so both are read. Every length is checked against the bytes that remain and
/// nesting is bounded, so hostile input yields an error, never a crash or a runaway recursion.
///
/// `ASN1Cursor` reads positions in one borrowed buffer (`ASN1Span`: trivial values, nothing
/// retained or copied per element); `ASN1Reader` hands the same elements out as slices.
struct ASN1Element {
    /// Identifier octet's class bits (0 universal, 1 application, 2 context, 3 private).
    let tagClass: UInt8
    let constructed: Bool
    let tagNumber: UInt
    /// The content octets. For an indefinite-length element, the children without the end marker.
    let content: ArraySlice<UInt8>
    /// Identifier, length and content octets as they appear in the input (what a signature covers).
    var encoded: ArraySlice<UInt8> = []

    static let integer: UInt = 2, octetString: UInt = 4, utf8String: UInt = 12, sequence: UInt = 16,
               set: UInt = 17, ia5String: UInt = 22

    func isUniversal(_ number: UInt) -> Bool { tagClass == 0 && tagNumber == number }
}

struct ASN1Error: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Where one element lies in the buffer its cursor reads.
struct ASN1Span {
    let tagClass: UInt8
    let constructed: Bool
    let tagNumber: UInt
    /// The content octets. For an indefinite-length element, the children without the end marker.
    let content: Range<Int>
    /// Identifier, length and content octets (and an end marker) as they appear in the input.
    let encoded: Range<Int>

    func isUniversal(_ number: UInt) -> Bool { tagClass == 0 && tagNumber == number }
}

/// Reads elements one after another from `bytes[position..<end]`; the buffer must outlive it.
struct ASN1Cursor {
    let bytes: UnsafeBufferPointer<UInt8>
    private(set) var position: Int
    let end: Int

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        self.bytes = bytes
        self.position = range.lowerBound
        self.end = range.upperBound
    }

    var isAtEnd: Bool { position >= end }

    mutating func next(depth: Int = 0) throws(ASN1Error) -> ASN1Span {
        guard depth <= ASN1Reader.maxDepth else { throw ASN1Error("ASN.1 nesting deeper than \(ASN1Reader.maxDepth)") }
        guard position < end else { throw ASN1Error("truncated ASN.1: missing identifier") }
        let start = position
        let first = bytes[start]
        var index = start + 1
        let tagClass = first >> 6
        let constructed = first & 0x20 != 0
        var tagNumber = UInt(first & 0x1F)
        if tagNumber == 0x1F {  // high-tag-number form
            tagNumber = 0
            var count = 0
            while true {
                guard index < end else { throw ASN1Error("truncated ASN.1 tag") }
                let byte = bytes[index]
                index += 1
                count += 1
                guard count <= 4 else { throw ASN1Error("ASN.1 tag number too large") }
                tagNumber = tagNumber << 7 | UInt(byte & 0x7F)
                if byte & 0x80 == 0 { break }
            }
        }
        guard index < end else { throw ASN1Error("truncated ASN.1: missing length") }
        let lengthByte = bytes[index]
        index += 1
        if lengthByte == 0x80 {
            // Indefinite length: constructed only; children run until an end-of-contents 00 00.
            guard constructed else { throw ASN1Error("indefinite length on a primitive ASN.1 element") }
            var inner = ASN1Cursor(bytes, index..<end)
            while true {
                guard inner.end - inner.position >= 2 else { throw ASN1Error("indefinite-length ASN.1 element has no end marker") }
                if bytes[inner.position] == 0, bytes[inner.position + 1] == 0 { break }
                _ = try inner.next(depth: depth + 1)
            }
            position = inner.position + 2
            return ASN1Span(tagClass: tagClass, constructed: true, tagNumber: tagNumber,
                            content: index..<inner.position, encoded: start..<position)
        }
        var length = 0
        if lengthByte & 0x80 == 0 {
            length = Int(lengthByte)
        } else {
            let count = Int(lengthByte & 0x7F)
            guard count <= 4 else { throw ASN1Error("ASN.1 length field of \(count) bytes is too large") }
            guard end - index >= count else { throw ASN1Error("truncated ASN.1 length") }
            for _ in 0..<count {
                length = length << 8 | Int(bytes[index])
                index += 1
            }
        }
        guard end - index >= length else {
            throw ASN1Error("ASN.1 element claims \(length) bytes, only \(end - index) remain")
        }
        position = index + length
        return ASN1Span(tagClass: tagClass, constructed: constructed, tagNumber: tagNumber,
                        content: index..<position, encoded: start..<position)
    }

    /// A non-negative INTEGER that fits in Int64 (receipt types, quantities, web order line items).
    func integerValue(_ span: ASN1Span) throws(ASN1Error) -> Int64 {
        guard span.isUniversal(ASN1Element.integer), !span.constructed, !span.content.isEmpty, span.content.count <= 9 else {
            throw ASN1Error("expected an ASN.1 INTEGER of at most 8 bytes")
        }
        if bytes[span.content.lowerBound] & 0x80 != 0 { throw ASN1Error("negative ASN.1 INTEGER") }
        var value: UInt64 = 0
        for index in span.content { value = value << 8 | UInt64(bytes[index]) }
        guard value <= UInt64(Int64.max) else { throw ASN1Error("ASN.1 INTEGER too large") }
        return Int64(value)
    }

    /// UTF8String / IA5String (and, leniently, other primitive string types) as text.
    func stringValue(_ span: ASN1Span) throws(ASN1Error) -> String {
        guard span.tagClass == 0, !span.constructed else { throw ASN1Error("expected a primitive ASN.1 string") }
        switch span.tagNumber {
        case ASN1Element.utf8String, ASN1Element.ia5String, 19 /* PrintableString */, 26 /* VisibleString */:
            guard let text = String(validating: UnsafeBufferPointer(rebasing: bytes[span.content]), as: UTF8.self) else {
                throw ASN1Error("ASN.1 string is not valid UTF-8")
            }
            return text
        default:
            throw ASN1Error("expected an ASN.1 string, got universal tag \(span.tagNumber)")
        }
    }

    func copy(_ range: Range<Int>) -> [UInt8] { Array(UnsafeBufferPointer(rebasing: bytes[range])) }
}

/// The same elements as `ASN1Cursor`, as slices of the input (for code that keeps them).
struct ASN1Reader {
    static let maxDepth = 24

    private(set) var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    var isAtEnd: Bool { bytes.isEmpty }

    /// Reads every element until the end of the input.
    static func elements(_ bytes: ArraySlice<UInt8>, depth: Int = 0) throws(ASN1Error) -> [ASN1Element] {
        var reader = ASN1Reader(bytes)
        var result: [ASN1Element] = []
        while !reader.isAtEnd { result.append(try reader.next(depth: depth)) }
        return result
    }

    /// The children of a constructed element.
    static func children(of element: ASN1Element, depth: Int = 0) throws(ASN1Error) -> [ASN1Element] {
        guard element.constructed else { throw ASN1Error("expected a constructed element") }
        return try elements(element.content, depth: depth + 1)
    }

    mutating func next(depth: Int = 0) throws(ASN1Error) -> ASN1Element {
        let read: Result<(span: ASN1Span, end: Int), ASN1Error> = bytes.withUnsafeBufferPointer { buffer in
            var cursor = ASN1Cursor(buffer, 0..<buffer.count)
            do throws(ASN1Error) {
                return .success((try cursor.next(depth: depth), cursor.position))
            } catch {
                return .failure(error)
            }
        }
        let (span, end) = try read.get()
        let base = bytes.startIndex
        func slice(_ range: Range<Int>) -> ArraySlice<UInt8> { bytes[(base + range.lowerBound)..<(base + range.upperBound)] }
        let element = ASN1Element(tagClass: span.tagClass, constructed: span.constructed, tagNumber: span.tagNumber,
                                  content: slice(span.content), encoded: slice(span.encoded))
        bytes = bytes[(base + end)...]
        return element
    }
}
