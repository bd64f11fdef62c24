/// The primitives of the internal topic records' binary encoding (`TopicRecords`): LEB128 varints,
/// zigzag for signed numbers, length-prefixed UTF-8 strings, a presence byte before every optional.
/// The reader checks every length and count against the bytes that remain, so a corrupt or hostile
/// record is a thrown `TopicRecordError`, never a trap or an allocation larger than the record.
struct BinaryWriter {
    var bytes: [UInt8]

    init(capacity: Int = 512) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    mutating func varUInt(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    mutating func int64(_ value: Int64) { varUInt(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }
    mutating func int(_ value: Int) { int64(Int64(value)) }
    mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varUInt(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func count(_ value: Int) { varUInt(UInt64(value)) }

    /// 0 = nil, 1 = false, 2 = true: one byte for the many optional flags.
    mutating func optionalBool(_ value: Bool?) { bytes.append(value.map { $0 ? 2 : 1 } ?? 0) }

    mutating func optional<T>(_ value: T?, _ write: (inout BinaryWriter, T) -> Void) {
        guard let value else { return bytes.append(0) }
        bytes.append(1)
        write(&self, value)
    }

    mutating func optionalString(_ value: String?) { optional(value) { $0.string($1) } }
    mutating func optionalInt64(_ value: Int64?) { optional(value) { $0.int64($1) } }
    mutating func optionalInt(_ value: Int?) { optional(value) { $0.int($1) } }
}

/// Why a record is not a valid binary topic record; `offset` is where reading stopped.
public struct TopicRecordError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public var offset: Int
    public init(_ reason: String, at offset: Int) { self.reason = reason; self.offset = offset }
    public var description: String { "\(reason) at byte \(offset)" }
}

struct BinaryReader {
    let bytes: [UInt8]
    private(set) var index: Int
    /// Every count read: at most one element per remaining byte, and never more than this.
    static let maxCount = 100_000

    init(_ bytes: [UInt8], from index: Int = 0) {
        self.bytes = bytes
        self.index = index
    }

    var isAtEnd: Bool { index == bytes.count }
    var remaining: Int { bytes.count - index }

    func failure(_ reason: String) -> TopicRecordError { TopicRecordError(reason, at: index) }

    mutating func byte() throws -> UInt8 {
        guard index < bytes.count else { throw failure("truncated") }
        defer { index += 1 }
        return bytes[index]
    }

    mutating func varUInt() throws -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte()
            // The tenth byte may carry only the top bit of a UInt64.
            guard shift < 63 || next <= 1 else { throw failure("varint longer than 64 bits") }
            value |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return value }
            shift += 7
        }
    }

    mutating func int64() throws -> Int64 {
        let raw = try varUInt()
        return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }

    mutating func int() throws -> Int { Int(try int64()) }

    mutating func int32() throws -> Int32 {
        let value = try int64()
        guard let narrow = Int32(exactly: value) else { throw failure("\(value) is not a 32-bit number") }
        return narrow
    }

    mutating func bool() throws -> Bool {
        switch try byte() {
        case 0: return false
        case 1: return true
        case let other: throw failure("\(other) is not a boolean")
        }
    }

    /// A count of elements that each take at least one byte: more than the bytes left is corrupt.
    mutating func count() throws -> Int {
        let value = try varUInt()
        guard value <= UInt64(min(remaining, Self.maxCount)) else { throw failure("count \(value) exceeds the record") }
        return Int(value)
    }

    mutating func string() throws -> String {
        let length = try varUInt()
        guard length <= UInt64(remaining) else { throw failure("string of \(length) bytes exceeds the record") }
        let start = index, end = index + Int(length)
        // The generic `String(validating:)` over an ArraySlice was a tenth of the stages' decoding time:
        // plain ASCII (nearly every field) is valid UTF-8 as it is; anything else takes the full check.
        let text: String? = bytes.withUnsafeBufferPointer { buffer in
            let span = UnsafeBufferPointer(rebasing: buffer[start..<end])
            return PlainASCII.isASCII(span) ? String(decoding: span, as: UTF8.self) : String(validating: span, as: UTF8.self)
        }
        guard let text else { throw failure("invalid UTF-8") }
        index = end
        return text
    }

    mutating func optionalBool() throws -> Bool? {
        switch try byte() {
        case 0: return nil
        case 1: return false
        case 2: return true
        case let other: throw failure("\(other) is not an optional boolean")
        }
    }

    mutating func optional<T>(_ read: (inout BinaryReader) throws -> T) throws -> T? {
        switch try byte() {
        case 0: return nil
        case 1: return try read(&self)
        case let other: throw failure("\(other) is not a presence byte")
        }
    }

    mutating func optionalString() throws -> String? { try optional { try $0.string() } }
    mutating func optionalInt64() throws -> Int64? { try optional { try $0.int64() } }
    mutating func optionalInt() throws -> Int? { try optional { try $0.int() } }

    mutating func array<T>(_ read: (inout BinaryReader) throws -> T) throws -> [T] {
        let count = try count()
        var values: [T] = []
        values.reserveCapacity(count)
        for _ in 0..<count { values.append(try read(&self)) }
        return values
    }

    /// A string-backed enum, written as its raw value: renaming or reordering cases cannot change
    /// what an old record means.
    mutating func raw<T: RawRepresentable>(_ type: T.Type) throws -> T where T.RawValue == String {
        let text = try string()
        guard let value = T(rawValue: text) else { throw failure("unknown \(T.self) \"\(text.prefix(40))\"") }
        return value
    }
}
