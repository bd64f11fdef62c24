import Domain
import Foundation

/// A fast reader for the JSON objects Apple sends (JWS headers and payloads, upload bodies) that
/// yields the very values `JSONSerialization` yields (NSNumber as it makes them, NSNull, Swift
/// strings, arrays and dictionaries), without its per-character string scan and the NSDictionary
/// round trip. It reads only a plain subset: ASCII strings with the short escapes, integers of
/// at most 18 digits, literals, at most `maxDepth` levels, no repeated key. Anything else (an
/// error included) returns nil and the caller asks `JSONSerialization`, so every verdict on odd
/// or malformed input stays JSONSerialization's.
enum JSONObjectReader {
    static let maxDepth = 32
    /// 18 digits always fit in Int64; longer integers go to JSONSerialization's own rules.
    static let maxIntegerDigits = 18

    static func object(_ bytes: UnsafeBufferPointer<UInt8>) -> [String: Any]? {
        guard let base = bytes.baseAddress else { return nil }
        var cursor = JSONCursor(base: base, end: bytes.count)
        cursor.skipWhitespace()
        guard cursor.peek == UInt8(ascii: "{"), let object = cursor.object(depth: 1) else { return nil }
        cursor.skipWhitespace()
        return cursor.index == cursor.end ? object : nil
    }

    /// `JSONSerialization` for what the fast reader leaves out; nil unless the bytes are an object.
    static func objectOrFallback(_ bytes: [UInt8]) -> [String: Any]? {
        guard !bytes.isEmpty else { return nil }
        if let object = bytes.withUnsafeBufferPointer(object) { return object }
        return (try? JSONSerialization.jsonObject(with: Data(bytes), options: [])) as? [String: Any]
    }
}

/// A position in JSON bytes, with the plain subset's pieces (shared with `PayloadFields`, which
/// reads the same subset without building Foundation values).
struct JSONCursor {
    let base: UnsafePointer<UInt8>
    let end: Int
    var index = 0

    init(base: UnsafePointer<UInt8>, end: Int) {
        self.base = base
        self.end = end
    }

    var peek: UInt8? { index < end ? base[index] : nil }

    mutating func skipWhitespace() {
        while index < end {
            switch base[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// At `{`.
    mutating func object(depth: Int) -> [String: Any]? {
        guard depth <= JSONObjectReader.maxDepth else { return nil }
        index += 1
        skipWhitespace()
        if peek == UInt8(ascii: "}") { index += 1; return [:] }
        // Apple's objects hold 5–25 keys: room for 12 up front saves most of the regrowth (a rehash each).
        var result: [String: Any] = Dictionary(minimumCapacity: 12)
        while true {
            skipWhitespace()
            guard peek == UInt8(ascii: "\""), let key = string() else { return nil }
            skipWhitespace()
            guard peek == UInt8(ascii: ":") else { return nil }
            index += 1
            skipWhitespace()
            guard let value = value(depth: depth), result.updateValue(value, forKey: key) == nil else { return nil }
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return result
            default: return nil
            }
        }
    }

    /// At `[`.
    mutating func array(depth: Int) -> [Any]? {
        guard depth <= JSONObjectReader.maxDepth else { return nil }
        index += 1
        var result: [Any] = []
        skipWhitespace()
        if peek == UInt8(ascii: "]") { index += 1; return result }
        while true {
            skipWhitespace()
            guard let value = value(depth: depth) else { return nil }
            result.append(value)
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return result
            default: return nil
            }
        }
    }

    mutating func value(depth: Int) -> Any? {
        guard let byte = peek else { return nil }
        switch byte {
        case UInt8(ascii: "\""): return string()
        case UInt8(ascii: "{"): return object(depth: depth + 1)
        case UInt8(ascii: "["): return array(depth: depth + 1)
        case UInt8(ascii: "t"): return literal("true") ? NSNumber(value: true) : nil
        case UInt8(ascii: "f"): return literal("false") ? NSNumber(value: false) : nil
        case UInt8(ascii: "n"): return literal("null") ? NSNull() : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return integer()
        default: return nil
        }
    }

    mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard end - index >= count, memcmp(base + index, word.utf8Start, count) == 0 else { return false }
        index += count
        return true
    }

    /// `-?(0|[1-9][0-9]*)` with at most 18 digits, as JSONSerialization builds it: UInt64 when
    /// not negative, Int64 otherwise. Fractions and exponents are left to JSONSerialization.
    mutating func integer() -> NSNumber? {
        guard let (value, negative) = integerValue() else { return nil }
        return negative ? NSNumber(value: value) : NSNumber(value: UInt64(value))
    }

    /// The integer `integer()` reads, as a signed value (and whether it had a `-`: "-0" is 0 either way).
    mutating func integerValue() -> (value: Int64, negative: Bool)? {
        let negative = base[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let digitsStart = index
        var value: Int64 = 0
        while index < end, base[index] >= UInt8(ascii: "0"), base[index] <= UInt8(ascii: "9") {
            guard index - digitsStart < JSONObjectReader.maxIntegerDigits else { return nil }
            value = value * 10 + Int64(base[index] - UInt8(ascii: "0"))
            index += 1
        }
        let digits = index - digitsStart
        guard digits > 0, !(digits > 1 && base[digitsStart] == UInt8(ascii: "0")) else { return nil }
        if index < end, base[index] == UInt8(ascii: ".") || base[index] | 0x20 == UInt8(ascii: "e") { return nil }
        return (negative ? -value : value, negative)
    }

    /// At `"`: printable ASCII and the escapes `\" \\ \/ \b \f \n \r \t` (not `\u`).
    mutating func string() -> String? {
        index += 1
        let start = index
        skipPlainASCII()
        while index < end {
            let byte = base[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(start: base + start, count: index - start), as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { return escapedString(from: start) }
            guard byte >= 0x20, byte < 0x80 else { return nil }
            index += 1
        }
        return nil
    }

    /// At `"`: the checks of `string()` without building the text (a value nobody reads).
    mutating func skipString() -> Bool {
        index += 1
        while index < end {
            skipPlainASCII()
            guard index < end else { return false }
            let byte = base[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return true
            case UInt8(ascii: "\\"):
                guard index < end else { return false }
                switch base[index] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"): index += 1
                default: return false
                }
            default:
                guard byte >= 0x20, byte < 0x80 else { return false }
            }
        }
        return false
    }

    /// Skips 8 bytes at a time while none of them is `"`, `\`, a control character or non-ASCII
    /// (the receipt and nested-JWS strings run to thousands of such bytes).
    mutating func skipPlainASCII() {
        index = PlainASCII.wordsEnd(base, from: index, end: end)
    }

    private mutating func escapedString(from start: Int) -> String? {
        var bytes = Array(UnsafeBufferPointer(start: base + start, count: index - start))
        while index < end {
            let runStart = index
            skipPlainASCII()
            if index > runStart { bytes.append(contentsOf: UnsafeBufferPointer(start: base + runStart, count: index - runStart)) }
            guard index < end else { return nil }
            let byte = base[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: bytes, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < end else { return nil }
                guard let escaped = JSONEscape.shortEscaped(base[index]) else { return nil }
                index += 1
                bytes.append(escaped)
            default:
                guard byte >= 0x20, byte < 0x80 else { return nil }
                bytes.append(byte)
            }
        }
        return nil
    }
}
