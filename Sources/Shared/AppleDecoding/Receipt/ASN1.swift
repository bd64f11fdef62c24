/// A small, defensive BER/DER reader for the receipt payload (an ASN.1 SET of attributes).
/// Receipts arrive as DER or as BER with indefinite lengths (Xcode and older device receipts), so
/// both are read. Every length is checked against the bytes that remain and nesting is bounded,
/// so hostile input yields an error, never a crash or a runaway recursion.
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
        let before = bytes
        var element = try readElement(depth: depth)
        element.encoded = before[before.startIndex..<bytes.startIndex]
        return element
    }

    private mutating func readElement(depth: Int) throws(ASN1Error) -> ASN1Element {
        guard depth <= Self.maxDepth else { throw ASN1Error("ASN.1 nesting deeper than \(Self.maxDepth)") }
        guard let first = bytes.first else { throw ASN1Error("truncated ASN.1: missing identifier") }
        var index = bytes.startIndex + 1
        let tagClass = first >> 6
        let constructed = first & 0x20 != 0
        var tagNumber = UInt(first & 0x1F)
        if tagNumber == 0x1F {  // high-tag-number form
            tagNumber = 0
            var count = 0
            while true {
                guard index < bytes.endIndex else { throw ASN1Error("truncated ASN.1 tag") }
                let byte = bytes[index]
                index += 1
                count += 1
                guard count <= 4 else { throw ASN1Error("ASN.1 tag number too large") }
                tagNumber = tagNumber << 7 | UInt(byte & 0x7F)
                if byte & 0x80 == 0 { break }
            }
        }
        guard index < bytes.endIndex else { throw ASN1Error("truncated ASN.1: missing length") }
        let lengthByte = bytes[index]
        index += 1
        if lengthByte == 0x80 {
            // Indefinite length: constructed only; children run until an end-of-contents 00 00.
            guard constructed else { throw ASN1Error("indefinite length on a primitive ASN.1 element") }
            let original = bytes
            var inner = ASN1Reader(bytes[index...])
            let contentStart = index
            while true {
                guard inner.bytes.count >= 2 else { throw ASN1Error("indefinite-length ASN.1 element has no end marker") }
                if inner.bytes.first == 0, inner.bytes[inner.bytes.startIndex + 1] == 0 { break }
                _ = try inner.next(depth: depth + 1)
            }
            let contentEnd = inner.bytes.startIndex
            bytes = bytes[(contentEnd + 2)...]
            return ASN1Element(tagClass: tagClass, constructed: true, tagNumber: tagNumber, content: original[contentStart..<contentEnd])
        }
        var length = 0
        if lengthByte & 0x80 == 0 {
            length = Int(lengthByte)
        } else {
            let count = Int(lengthByte & 0x7F)
            guard count <= 4 else { throw ASN1Error("ASN.1 length field of \(count) bytes is too large") }
            guard bytes.endIndex - index >= count else { throw ASN1Error("truncated ASN.1 length") }
            for _ in 0..<count {
                length = length << 8 | Int(bytes[index])
                index += 1
            }
        }
        guard bytes.endIndex - index >= length else {
            throw ASN1Error("ASN.1 element claims \(length) bytes, only \(bytes.endIndex - index) remain")
        }
        let content = bytes[index..<(index + length)]
        bytes = bytes[(index + length)...]
        return ASN1Element(tagClass: tagClass, constructed: constructed, tagNumber: tagNumber, content: content)
    }
}

extension ASN1Element {
    /// A non-negative INTEGER that fits in Int64 (receipt types, quantities, web order line items).
    func integerValue() throws(ASN1Error) -> Int64 {
        guard isUniversal(Self.integer), !constructed, !content.isEmpty, content.count <= 9 else {
            throw ASN1Error("expected an ASN.1 INTEGER of at most 8 bytes")
        }
        if content.first! & 0x80 != 0 { throw ASN1Error("negative ASN.1 INTEGER") }
        var value: UInt64 = 0
        for byte in content { value = value << 8 | UInt64(byte) }
        guard value <= UInt64(Int64.max) else { throw ASN1Error("ASN.1 INTEGER too large") }
        return Int64(value)
    }

    /// UTF8String / IA5String (and, leniently, other primitive string types) as text.
    func stringValue() throws(ASN1Error) -> String {
        guard tagClass == 0, !constructed else { throw ASN1Error("expected a primitive ASN.1 string") }
        switch tagNumber {
        case Self.utf8String, Self.ia5String, 19 /* PrintableString */, 26 /* VisibleString */:
            guard let text = String(validating: content, as: UTF8.self) else { throw ASN1Error("ASN.1 string is not valid UTF-8") }
            return text
        default:
            throw ASN1Error("expected an ASN.1 string, got universal tag \(tagNumber)")
        }
    }
}
