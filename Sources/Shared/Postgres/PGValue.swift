import Foundation

/// A PostgreSQL data type as seen by this adapter: its name (for messages) and its type OID.
public struct PGDataType: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    let oid: UInt32

    init(_ name: String, _ oid: UInt32) {
        self.name = name
        self.oid = oid
    }

    public var description: String { name }

    // OIDs are fixed in PostgreSQL's catalog (src/include/catalog/pg_type.dat).
    public static let bool = PGDataType("boolean", 16)
    public static let bytea = PGDataType("bytea", 17)
    public static let int8 = PGDataType("bigint", 20)
    public static let int2 = PGDataType("smallint", 21)
    public static let int4 = PGDataType("integer", 23)
    public static let text = PGDataType("text", 25)
    public static let json = PGDataType("json", 114)
    public static let float8 = PGDataType("double precision", 701)
    public static let timestamptz = PGDataType("timestamp with time zone", 1184)
    public static let uuid = PGDataType("uuid", 2950)
    public static let jsonb = PGDataType("jsonb", 3802)
    public static let boolArray = PGDataType("boolean[]", 1000)
    public static let int4Array = PGDataType("integer[]", 1007)
    public static let textArray = PGDataType("text[]", 1009)
    public static let byteaArray = PGDataType("bytea[]", 1001)
    public static let int8Array = PGDataType("bigint[]", 1016)
    public static let float8Array = PGDataType("double precision[]", 1022)
    public static let timestamptzArray = PGDataType("timestamp with time zone[]", 1185)
    public static let uuidArray = PGDataType("uuid[]", 2951)
    public static let jsonbArray = PGDataType("jsonb[]", 3807)
    public static let jsonArray = PGDataType("json[]", 199)
}

/// One encoded bind parameter. Its description names the type only: values never reach logs
/// or error messages through this adapter.
public struct PGValue: Sendable, CustomStringConvertible {
    enum Payload: Sendable {
        case null
        case text(String)
        case binary([UInt8])
    }

    public let type: PGDataType
    let payload: Payload

    init(_ type: PGDataType, _ payload: Payload) {
        self.type = type
        self.payload = payload
    }

    public var isNull: Bool {
        if case .null = payload { return true }
        return false
    }

    public var description: String { isNull ? "NULL::\(type)" : "<\(type) value>" }
}

/// A Swift value that can be a bind parameter. Conformances here cover String, the integers,
/// Bool, Double, Date (timestamptz), UUID, [UInt8]/Data (bytea), PGJSON (jsonb), arrays
/// (`text[]`, `bigint[]`, ... for `unnest` batches) and Optional of each (NULL).
/// Your own types can conform by returning one of those: `var pgValue: PGValue { id.pgValue }`.
public protocol PGBindable: Sendable {
    /// The type sent with the value, and with NULL when an Optional of it is nil.
    static var pgDataType: PGDataType { get }
    var pgValue: PGValue { get }
}

extension Optional: PGBindable where Wrapped: PGBindable {
    public static var pgDataType: PGDataType { Wrapped.pgDataType }
    public var pgValue: PGValue {
        switch self {
        case .some(let value): return value.pgValue
        case .none: return PGValue(Wrapped.pgDataType, .null)
        }
    }
}

extension String: PGBindable {
    public static var pgDataType: PGDataType { .text }
    public var pgValue: PGValue { PGValue(.text, .text(self)) }
}

extension Int: PGBindable {
    public static var pgDataType: PGDataType { .int8 }
    public var pgValue: PGValue { PGValue(.int8, .text(String(self))) }
}

extension Int64: PGBindable {
    public static var pgDataType: PGDataType { .int8 }
    public var pgValue: PGValue { PGValue(.int8, .text(String(self))) }
}

extension Int32: PGBindable {
    public static var pgDataType: PGDataType { .int4 }
    public var pgValue: PGValue { PGValue(.int4, .text(String(self))) }
}

extension Int16: PGBindable {
    public static var pgDataType: PGDataType { .int2 }
    public var pgValue: PGValue { PGValue(.int2, .text(String(self))) }
}

extension Bool: PGBindable {
    public static var pgDataType: PGDataType { .bool }
    public var pgValue: PGValue { PGValue(.bool, .text(self ? "t" : "f")) }
}

extension Double: PGBindable {
    public static var pgDataType: PGDataType { .float8 }
    public var pgValue: PGValue { PGValue(.float8, .text(pgText)) }

    /// Swift prints "inf"/"nan"; spell them as PostgreSQL documents them.
    var pgText: String {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return description
    }
}

extension Date: PGBindable {
    public static var pgDataType: PGDataType { .timestamptz }
    /// Sent as UTC ISO text rounded to the microsecond (timestamptz's precision).
    public var pgValue: PGValue { PGValue(.timestamptz, .text(PGTimestamp.format(self))) }
}

extension UUID: PGBindable {
    public static var pgDataType: PGDataType { .uuid }
    public var pgValue: PGValue { PGValue(.uuid, .text(uuidString.lowercased())) }
}

extension Data: PGBindable {
    public static var pgDataType: PGDataType { .bytea }
    /// bytea travels in binary format: no escaping, zero bytes intact.
    public var pgValue: PGValue { PGValue(.bytea, .binary([UInt8](self))) }
}

/// A JSON document bound as `jsonb`. The text must be valid JSON; the server checks it.
public struct PGJSON: PGBindable, Hashable {
    public let json: String
    public init(_ json: String) { self.json = json }
    public static var pgDataType: PGDataType { .jsonb }
    public var pgValue: PGValue { PGValue(.jsonb, .text(json)) }
}

// MARK: - Arrays

/// An element type for array parameters. `[UInt8]` is the exception: it binds as bytea.
public protocol PGArrayElement: Sendable {
    static var pgArrayDataType: PGDataType { get }
    static func pgArrayValue(_ elements: [Self]) -> PGValue
}

/// A non-null array element with a text form inside an array literal.
public protocol PGArrayScalar: PGArrayElement, PGBindable {
    var pgArrayElementText: String { get }
}

extension PGArrayScalar {
    public static func pgArrayValue(_ elements: [Self]) -> PGValue {
        PGValue(pgArrayDataType, .text(PGArrayLiteral.encode(elements.map { $0.pgArrayElementText })))
    }
}

extension Optional: PGArrayElement where Wrapped: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { Wrapped.pgArrayDataType }
    public static func pgArrayValue(_ elements: [Self]) -> PGValue {
        PGValue(pgArrayDataType, .text(PGArrayLiteral.encode(elements.map { $0?.pgArrayElementText })))
    }
}

extension UInt8: PGArrayElement {
    public static var pgArrayDataType: PGDataType { .bytea }
    /// `[UInt8]` is a byte string: bytea in binary format, zero bytes intact.
    public static func pgArrayValue(_ elements: [UInt8]) -> PGValue { PGValue(.bytea, .binary(elements)) }
}

extension Array: PGBindable where Element: PGArrayElement {
    public static var pgDataType: PGDataType { Element.pgArrayDataType }
    public var pgValue: PGValue { Element.pgArrayValue(self) }
}

// Text and bigint arrays, the lists batches send most (keys, ids, event keys), bind in the binary
// format: no literal to quote and escape here, none to parse there (issue 14).
extension String: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .textArray }
    public var pgArrayElementText: String { self }
    public static func pgArrayValue(_ elements: [String]) -> PGValue {
        var array = PGBinaryArray(.text)
        for element in elements { array.append(element) }
        return array.pgValue
    }
}

extension Int: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .int8Array }
    public var pgArrayElementText: String { String(self) }
    public static func pgArrayValue(_ elements: [Int]) -> PGValue { Int64.pgArrayValue(elements.map(Int64.init)) }
}

extension Int64: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .int8Array }
    public var pgArrayElementText: String { String(self) }
    public static func pgArrayValue(_ elements: [Int64]) -> PGValue {
        var array = PGBinaryArray(.int8)
        for element in elements { array.append(element) }
        return array.pgValue
    }
}

extension Int32: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .int4Array }
    public var pgArrayElementText: String { String(self) }
}

extension Bool: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .boolArray }
    public var pgArrayElementText: String { self ? "t" : "f" }
}

extension Double: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .float8Array }
    public var pgArrayElementText: String { pgText }
}

extension Date: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .timestamptzArray }
    public var pgArrayElementText: String { PGTimestamp.format(self) }
}

extension UUID: PGArrayScalar {
    public static var pgArrayDataType: PGDataType { .uuidArray }
    public var pgArrayElementText: String { uuidString.lowercased() }
}

/// PostgreSQL's array literal syntax, e.g. `{"a","b \"quoted\"",NULL}`.
enum PGArrayLiteral {
    /// Every element is double-quoted (so `NULL`, commas, braces and spaces stay data) with
    /// backslash and double quote backslash-escaped; nil becomes the bare NULL keyword.
    static func encode(_ elements: [String?]) -> String {
        var literal = "{"
        literal.reserveCapacity(elements.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (index, element) in elements.enumerated() {
            if index > 0 { literal += "," }
            guard let element else {
                literal += "NULL"
                continue
            }
            literal += "\""
            // By byte, not by Character: a quote followed by a combining mark is one Character but
            // still a quote to PostgreSQL, and grapheme breaking was most of this function's time.
            let special = { (byte: UInt8) in byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
            if element.utf8.contains(where: special) {
                var escaped: [UInt8] = []
                escaped.reserveCapacity(element.utf8.count + 8)
                for byte in element.utf8 {
                    if special(byte) { escaped.append(UInt8(ascii: "\\")) }
                    escaped.append(byte)
                }
                literal += String(decoding: escaped, as: UTF8.self)
            } else {
                literal += element
            }
            literal += "\""
        }
        return literal + "}"
    }
}
