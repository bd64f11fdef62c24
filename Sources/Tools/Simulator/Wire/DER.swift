/// A minimal DER writer and reader for what the simulator puts on the wire as Apple does: the
/// app receipt payload (a SET of `SEQUENCE { type, version, OCTET STRING value }` attributes).
/// Written independently of AppleDecoding's reader, so a receipt round trip tests both.
enum DER {
    static let integerTag: UInt8 = 0x02, octetStringTag: UInt8 = 0x04, utf8StringTag: UInt8 = 0x0C,
               ia5StringTag: UInt8 = 0x16, sequenceTag: UInt8 = 0x30, setTag: UInt8 = 0x31

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }

    static func length(_ count: Int) -> [UInt8] {
        guard count >= 0x80 else { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var rest = count
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    /// Minimal two's complement.
    static func integer(_ value: Int64) -> [UInt8] {
        var bytes = withUnsafeBytes(of: value.bigEndian) { Array($0) }
        while bytes.count > 1, (bytes[0] == 0x00 && bytes[1] & 0x80 == 0) || (bytes[0] == 0xFF && bytes[1] & 0x80 != 0) {
            bytes.removeFirst()
        }
        return tlv(integerTag, bytes)
    }

    static func utf8String(_ text: String) -> [UInt8] { tlv(utf8StringTag, Array(text.utf8)) }
    static func ia5String(_ text: String) -> [UInt8] { tlv(ia5StringTag, Array(text.utf8)) }
    static func octetString(_ bytes: [UInt8]) -> [UInt8] { tlv(octetStringTag, bytes) }
    static func sequence(_ elements: [[UInt8]]) -> [UInt8] { tlv(sequenceTag, elements.flatMap { $0 }) }

    /// DER `SET OF`: elements sorted by their encodings (X.690 §11.6).
    static func setOf(_ elements: [[UInt8]]) -> [UInt8] {
        tlv(setTag, elements.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 })
    }

    /// One element read back: tag and content.
    struct Element {
        let tag: UInt8
        let content: ArraySlice<UInt8>
    }

    /// Reads consecutive definite-length elements; nil on anything malformed.
    static func elements(_ bytes: ArraySlice<UInt8>) -> [Element]? {
        var result: [Element] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let tag = bytes[index]
            index += 1
            guard index < bytes.endIndex else { return nil }
            var count = Int(bytes[index])
            index += 1
            if count & 0x80 != 0 {
                let octets = count & 0x7F
                guard octets > 0, octets <= 4, index + octets <= bytes.endIndex else { return nil }
                count = 0
                for _ in 0..<octets {
                    count = count << 8 | Int(bytes[index])
                    index += 1
                }
            }
            guard count <= bytes.endIndex - index else { return nil }
            result.append(Element(tag: tag, content: bytes[index..<(index + count)]))
            index += count
        }
        return result
    }

    static func integerValue(_ content: ArraySlice<UInt8>) -> Int64? {
        guard !content.isEmpty, content.count <= 8 else { return nil }
        var value: Int64 = content.first! & 0x80 != 0 ? -1 : 0
        for byte in content { value = value << 8 | Int64(byte) }
        return value
    }
}
