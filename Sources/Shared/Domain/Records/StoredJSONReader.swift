#if canImport(Glibc)
import Glibc
#endif

/// Reads back the JSON documents StoreLedger stores and loads per event (`subscriptions.state`,
/// `purchases.state`, written by `StateJSON`) without Foundation: JSONDecoder spent ~120 µs on each
/// 3 kB state, more than the whole fold of the event that loaded it.
///
/// Strict by design: objects, arrays, strings, integers, booleans and null, with any whitespace
/// between them and members in the orders our rows have (rows written while the columns were jsonb
/// print as `{"a": 1}`, shorter names first). A fraction, an exponent, a lone surrogate, invalid
/// UTF-8, nesting deeper than `maxDepth`, members in another order, a missing member or a value of
/// another type makes the reader decline (`Decline`), and the caller hands the document to
/// JSONDecoder, which decides. A document the reader accepts reads as JSONDecoder reads it
/// (`StoredJSONReaderTests` compares the two).
public struct StoredJSONReader {
    /// Not read here: JSONDecoder decides.
    public struct Decline: Error {}

    static let maxDepth = 32

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The whole of `utf8` read by `read`, or nil when the reader declines or bytes are left over.
    public static func document<T>(_ utf8: UnsafeBufferPointer<UInt8>, _ read: (inout StoredJSONReader) throws -> T) -> T? {
        var reader = StoredJSONReader(utf8)
        guard let value = try? read(&reader) else { return nil }
        reader.skipWhitespace()
        return reader.index == utf8.count ? value : nil
    }

    // MARK: structure

    /// Calls `member` with each member's name; it reads the value, or skips it (`skipValue`).
    ///
    /// The names must come in one of the two orders StoreLedger's rows have: sorted (our writer) or by
    /// length, then bytes (jsonb's print, the rows written while the columns were jsonb). Strictly in
    /// order means no name twice, where JSONDecoder would keep the first and this reader the last.
    public mutating func object(_ member: (inout StoredJSONReader, MemberName) throws -> Void) throws {
        try open(UInt8(ascii: "{"))
        if try consume(UInt8(ascii: "}")) { return close() }
        var previous: MemberName?
        var sorted = true, byLength = true
        repeat {
            let name = try memberName()
            if let previous {
                let (less, shorter, longer) = previous.compared(to: name)
                sorted = sorted && less
                byLength = byLength && (shorter < longer || (shorter == longer && less))
                guard sorted || byLength else { throw Decline() }
            }
            previous = name
            try expect(UInt8(ascii: ":"))
            try member(&self, name)
        } while try separator(closing: UInt8(ascii: "}"))
        close()
    }

    /// A member's name as the document has it when it is plain ASCII without escapes (every name our
    /// rows hold but data keys with other characters): a `case "literal":` compares bytes and no
    /// String is made. Other names are decoded as `string()` decodes them. Valid only inside the
    /// `object` call that passed it.
    public struct MemberName {
        fileprivate let ascii: UnsafeBufferPointer<UInt8>?
        fileprivate let decoded: String?

        public var string: String { decoded ?? String(decoding: ascii!, as: UTF8.self) }

        public static func ~= (pattern: StaticString, name: MemberName) -> Bool {
            guard let ascii = name.ascii else { return pattern.withUTF8Buffer { String(decoding: $0, as: UTF8.self) } == name.decoded! }
            return pattern.utf8CodeUnitCount == ascii.count
                && (ascii.isEmpty || memcmp(pattern.utf8Start, ascii.baseAddress!, ascii.count) == 0)
        }

        /// Whether `self` sorts before `other` (as String's `<` orders them), and both lengths in UTF-8.
        fileprivate func compared(to other: MemberName) -> (less: Bool, count: Int, otherCount: Int) {
            guard let a = ascii, let b = other.ascii else {
                let (x, y) = (string, other.string)
                return (x < y, x.utf8.count, y.utf8.count)
            }
            let common = min(a.count, b.count)
            let order = common == 0 ? 0 : memcmp(a.baseAddress!, b.baseAddress!, common)
            return (order < 0 || (order == 0 && a.count < b.count), a.count, b.count)
        }
    }

    public mutating func array(_ element: (inout StoredJSONReader) throws -> Void) throws {
        try open(UInt8(ascii: "["))
        if try consume(UInt8(ascii: "]")) { return close() }
        repeat { try element(&self) } while try separator(closing: UInt8(ascii: "]"))
        close()
    }

    /// An object of `T` by member name (a Swift dictionary, as JSONDecoder makes one).
    public mutating func dictionary<T>(_ value: (inout StoredJSONReader) throws -> T) throws -> [String: T] {
        var result: [String: T] = [:]
        try object { reader, name in result[name.string] = try value(&reader) }
        return result
    }

    public mutating func list<T>(_ element: (inout StoredJSONReader) throws -> T) throws -> [T] {
        var result: [T] = []
        try array { result.append(try element(&$0)) }
        return result
    }

    /// nil for `null`, as `decodeIfPresent` reads it; otherwise the value.
    public mutating func optional<T>(_ value: (inout StoredJSONReader) throws -> T) throws -> T? {
        skipWhitespace()
        if index + 4 <= bytes.count, bytes[index] == UInt8(ascii: "n") {
            try literal("null")
            return nil
        }
        return try value(&self)
    }

    /// Any value, read and dropped (a member this reader does not know: JSONDecoder ignores those too).
    public mutating func skipValue() throws {
        skipWhitespace()
        guard index < bytes.count else { throw Decline() }
        switch bytes[index] {
        case UInt8(ascii: "{"): try object { reader, _ in try reader.skipValue() }
        case UInt8(ascii: "["): try array { try $0.skipValue() }
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: _ = try int64()
        }
    }

    // MARK: scalars

    public mutating func bool() throws -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw Decline() }
        if bytes[index] == UInt8(ascii: "t") {
            try literal("true")
            return true
        }
        try literal("false")
        return false
    }

    /// An integer in JSON's grammar (no leading zeros) that fits 64 bits; a fraction or exponent declines.
    public mutating func int64() throws -> Int64 {
        skipWhitespace()
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let start = index
        var value: Int64 = 0   // accumulated negative, so that Int64.min fits
        while index < bytes.count, bytes[index] &- UInt8(ascii: "0") < 10 {
            let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
            let (next, overflow2) = shifted.subtractingReportingOverflow(Int64(bytes[index] &- UInt8(ascii: "0")))
            guard !overflow, !overflow2 else { throw Decline() }
            value = next
            index += 1
        }
        let digits = index - start
        guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0") else { throw Decline() }
        if index < bytes.count {
            let next = bytes[index]
            guard next != UInt8(ascii: "."), next != UInt8(ascii: "e"), next != UInt8(ascii: "E") else { throw Decline() }
        }
        if negative { return value }
        guard value != Int64.min else { throw Decline() }
        return -value
    }

    public mutating func int() throws -> Int { Int(try int64()) }

    public mutating func int32() throws -> Int32 {
        guard let value = Int32(exactly: try int64()) else { throw Decline() }
        return value
    }

    /// A string; escapes decoded as JSON defines them, the result valid UTF-8 or a decline.
    public mutating func string() throws -> String {
        try expect(UInt8(ascii: "\""))
        let start = index
        if skipPlainASCII() { return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index - 1]), as: UTF8.self) }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return try Self.validated(UnsafeBufferPointer(rebasing: bytes[start..<index - 1]))
            }
            if byte == UInt8(ascii: "\\") { return try escapedString(from: start) }
            guard byte >= 0x20 else { throw Decline() }
            index += 1
        }
        throw Decline()
    }

    /// A member's name: the document's bytes while they are plain ASCII up to the closing quote,
    /// else (an escape, a non-ASCII byte) the name decoded by `string()` from its opening quote.
    private mutating func memberName() throws -> StoredJSONReader.MemberName {
        try expect(UInt8(ascii: "\""))
        let start = index
        if skipPlainASCII() { return MemberName(ascii: UnsafeBufferPointer(rebasing: bytes[start..<index - 1]), decoded: nil) }
        index = start - 1
        return MemberName(ascii: nil, decoded: try string())
    }

    /// From just after an opening quote, past plain ASCII text: true with the closing quote consumed,
    /// false at the first escape, control or non-ASCII byte (or the end), which the caller decodes.
    private mutating func skipPlainASCII() -> Bool {
        if let base = bytes.baseAddress { index = PlainASCII.wordsEnd(base, from: index, end: bytes.count) }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return true
            }
            if byte == UInt8(ascii: "\\") || byte >= 0x80 || byte < 0x20 { return false }
            index += 1
        }
        return false
    }

    /// A `RawRepresentable` string (an enum): a raw value it does not know declines, as JSONDecoder throws.
    public mutating func raw<T: RawRepresentable>(_ type: T.Type) throws -> T where T.RawValue == String {
        guard let value = T(rawValue: try string()) else { throw Decline() }
        return value
    }

    // MARK: pieces

    private mutating func escapedString(from start: Int) throws -> String {
        var utf8 = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return try utf8.withUnsafeBufferPointer { try Self.validated($0) }
            case UInt8(ascii: "\\"): try appendEscape(to: &utf8)
            case ..<0x20: throw Decline()
            default: utf8.append(byte)
            }
        }
        throw Decline()
    }

    private mutating func appendEscape(to utf8: inout [UInt8]) throws {
        guard index < bytes.count else { throw Decline() }
        let letter = bytes[index]
        index += 1
        if let byte = JSONEscape.shortEscaped(letter) { return utf8.append(byte) }
        guard letter == UInt8(ascii: "u") else { throw Decline() }
        var scalar = UInt32(try hex4())
        if (0xD800..<0xDC00).contains(scalar) {
            // A high surrogate needs its low half next; anything else declines.
            try expectRaw(UInt8(ascii: "\\"))
            try expectRaw(UInt8(ascii: "u"))
            let low = UInt32(try hex4())
            guard (0xDC00..<0xE000).contains(low) else { throw Decline() }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        }
        guard let unicode = Unicode.Scalar(scalar) else { throw Decline() }
        utf8.append(contentsOf: UTF8.encode(unicode)!)
    }

    private mutating func hex4() throws -> UInt16 {
        guard index + 4 <= bytes.count else { throw Decline() }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw Decline()
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    /// ASCII (nearly every id and key) is valid as it stands; `String(validating:)` is a generic call that
    /// looked up its type metadata on every string.
    private static func validated(_ utf8: UnsafeBufferPointer<UInt8>) throws -> String {
        if PlainASCII.isASCII(utf8) { return String(decoding: utf8, as: UTF8.self) }
        guard let text = String(validating: utf8, as: UTF8.self) else { throw Decline() }
        return text
    }

    private mutating func literal(_ word: StaticString) throws {
        skipWhitespace()
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw Decline() }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { throw Decline() }
        index += count
    }

    private mutating func open(_ bracket: UInt8) throws {
        guard depth < Self.maxDepth else { throw Decline() }
        try expect(bracket)
        depth += 1
    }

    private mutating func close() { depth -= 1 }

    /// After a member or element: true at a comma, false at the closing bracket.
    private mutating func separator(closing: UInt8) throws -> Bool {
        if try consume(UInt8(ascii: ",")) { return true }
        try expect(closing)
        return false
    }

    private mutating func consume(_ byte: UInt8) throws -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw Decline() }
        guard bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func expect(_ byte: UInt8) throws {
        guard try consume(byte) else { throw Decline() }
    }

    /// `byte` right here, no whitespace before it (inside a string).
    private mutating func expectRaw(_ byte: UInt8) throws {
        guard index < bytes.count, bytes[index] == byte else { throw Decline() }
        index += 1
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }
}

/// JSON's two-character escapes, as every byte-level reader decodes them.
public enum JSONEscape {
    /// The byte `\<letter>` stands for, or nil when `letter` starts no short escape (`u` included).
    @inlinable
    public static func shortEscaped(_ letter: UInt8) -> UInt8? {
        switch letter {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return letter
        case UInt8(ascii: "b"): return 0x08
        case UInt8(ascii: "f"): return 0x0C
        case UInt8(ascii: "n"): return 0x0A
        case UInt8(ascii: "r"): return 0x0D
        case UInt8(ascii: "t"): return 0x09
        default: return nil
        }
    }
}
