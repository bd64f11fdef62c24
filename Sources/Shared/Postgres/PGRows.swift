import CLibPQ
import Foundation

/// Owns one libpq result and frees it once.
// @unchecked Sendable: a PGresult is never modified after libpq returns it and libpq documents
// it as safe to read from any thread; `handle` is a `let`, freed only in deinit.
final class PGResultHandle: @unchecked Sendable {
    let handle: OpaquePointer
    let columns: [String]
    let columnIndex: [String: Int]
    let rowCount: Int

    init(_ handle: OpaquePointer) {
        self.handle = handle
        let columnCount = Int(PQnfields(handle))
        columns = (0..<columnCount).map { String(cString: PQfname(handle, Int32($0))) }
        var index: [String: Int] = [:]
        // The first column of a name wins, as in `SELECT a.id, b.id`.
        for (position, name) in columns.enumerated() where index[name] == nil { index[name] = position }
        columnIndex = index
        rowCount = Int(PQntuples(handle))
    }

    deinit { PQclear(handle) }
}

/// The rows a query returned (text format), in order. Cheap to pass around: rows read the
/// underlying result lazily.
public struct PGRows: RandomAccessCollection, Sendable {
    let result: PGResultHandle
    /// Rows inserted/updated/deleted/selected, from the command tag (0 when it has none).
    public let rowsAffected: Int

    public var columns: [String] { result.columns }
    public var startIndex: Int { 0 }
    public var endIndex: Int { result.rowCount }
    public subscript(position: Int) -> PGRow { PGRow(result: result, row: position) }
}

/// One row. Columns are looked up by name (as the query labels them); accessors throw a
/// `PGError.decoding` naming the column for a missing column, NULL, a type mismatch or bad text.
///
///     let id = try row.int64("id")
///     let note = try row.decode("note", as: String?.self)   // nil for NULL
public struct PGRow: Sendable {
    let result: PGResultHandle
    let row: Int

    public func isNull(_ column: String) throws -> Bool { try cell(column).isNull }

    public func decode<Value: PGDecodable>(_ column: String, as type: Value.Type = Value.self) throws -> Value {
        try Value.pgDecode(cell(column))
    }

    public func string(_ column: String) throws -> String { try decode(column) }
    public func int64(_ column: String) throws -> Int64 { try decode(column) }
    public func int(_ column: String) throws -> Int { try decode(column) }
    public func int32(_ column: String) throws -> Int32 { try decode(column) }
    public func bool(_ column: String) throws -> Bool { try decode(column) }
    public func double(_ column: String) throws -> Double { try decode(column) }
    public func date(_ column: String) throws -> Date { try decode(column) }
    public func bytes(_ column: String) throws -> [UInt8] { try decode(column) }
    public func uuid(_ column: String) throws -> UUID { try decode(column) }

    public func cell(_ column: String) throws -> PGCell {
        guard let index = result.columnIndex[column] else {
            throw PGError(kind: .decoding, message: "no column \"\(column)\" in result (columns: \(result.columns.joined(separator: ", ")))")
        }
        return PGCell(result: result, row: row, column: index)
    }
}

/// One value of a row, as PostgreSQL's text output.
public struct PGCell: Sendable {
    let result: PGResultHandle
    let row: Int
    let column: Int

    public var columnName: String { result.columns[column] }
    public var isNull: Bool { PQgetisnull(result.handle, Int32(row), Int32(column)) == 1 }
    var typeOID: UInt32 { PQftype(result.handle, Int32(column)) }
    public var typeName: String { PGCell.typeNames[typeOID] ?? "type oid \(typeOID)" }

    /// The value's text output ("" for NULL).
    public var text: String { String(cString: PQgetvalue(result.handle, Int32(row), Int32(column))) }

    /// The raw text bytes, without copying into a String (valid while the result lives).
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        let length = Int(PQgetlength(result.handle, Int32(row), Int32(column)))
        let raw = UnsafeRawPointer(PQgetvalue(result.handle, Int32(row), Int32(column))!)
        return try body(UnsafeBufferPointer(start: raw.assumingMemoryBound(to: UInt8.self), count: length))
    }

    func failure(_ problem: String) -> PGError {
        PGError(kind: .decoding, message: "column \"\(columnName)\" (\(typeName)): \(problem)")
    }

    /// Throws unless the value is non-NULL and of one of the given types.
    func require(_ wanted: String, oids: Set<UInt32>) throws {
        if isNull { throw failure("is NULL; read it as an Optional to accept NULL") }
        guard oids.contains(typeOID) else { throw failure("cannot be read as \(wanted)") }
    }

    static let typeNames: [UInt32: String] = [
        16: "boolean", 17: "bytea", 18: "char", 19: "name", 20: "bigint", 21: "smallint", 23: "integer",
        25: "text", 26: "oid", 114: "json", 700: "real", 701: "double precision", 1042: "character",
        1043: "character varying", 1082: "date", 1114: "timestamp", 1184: "timestamp with time zone",
        1700: "numeric", 2950: "uuid", 3802: "jsonb", 1000: "boolean[]", 1007: "integer[]",
        1009: "text[]", 1016: "bigint[]",
    ]
}

/// A Swift type a column value can be read as.
public protocol PGDecodable {
    static func pgDecode(_ cell: PGCell) throws -> Self
}

extension Optional: PGDecodable where Wrapped: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Wrapped? {
        cell.isNull ? nil : try Wrapped.pgDecode(cell)
    }
}

extension String: PGDecodable {
    /// Any column reads as its text output (numeric, uuid, json, enums...).
    public static func pgDecode(_ cell: PGCell) throws -> String {
        if cell.isNull { throw cell.failure("is NULL; read it as an Optional to accept NULL") }
        return cell.text
    }
}

private let integerOIDs: Set<UInt32> = [20, 21, 23, 26]

extension Int64: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Int64 {
        try cell.require("an integer", oids: integerOIDs)
        guard let value = cell.withBytes(parseInteger) else { throw cell.failure("unparsable integer") }
        return value
    }

    /// Decimal digits with an optional minus sign, overflow-checked.
    static func parseInteger(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        var index = 0
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { index = 1 }
        guard index < bytes.count else { return nil }
        var value: Int64 = 0
        while index < bytes.count {
            let digit = Int64(bytes[index]) - 0x30
            guard (0...9).contains(digit) else { return nil }
            let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
            // Accumulate negatively so Int64.min parses.
            let (next, overflow2) = shifted.subtractingReportingOverflow(digit)
            guard !overflow1, !overflow2 else { return nil }
            value = next
            index += 1
        }
        if negative { return value }
        return value == .min ? nil : -value
    }
}

extension Int: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Int { Int(try Int64.pgDecode(cell)) }
}

extension Int32: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Int32 {
        guard let value = Int32(exactly: try Int64.pgDecode(cell)) else { throw cell.failure("out of Int32 range") }
        return value
    }
}

extension Bool: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Bool {
        try cell.require("a boolean", oids: [16])
        return cell.text == "t"
    }
}

extension Double: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Double {
        try cell.require("a double", oids: [700, 701, 1700, 20, 21, 23])
        // Swift's parser accepts PostgreSQL's "Infinity", "-Infinity" and "NaN".
        guard let value = Double(cell.text) else { throw cell.failure("unparsable number") }
        return value
    }
}

extension Date: PGDecodable {
    /// timestamptz (any offset); timestamp without time zone is read as UTC.
    public static func pgDecode(_ cell: PGCell) throws -> Date {
        try cell.require("a timestamp", oids: [1184, 1114])
        guard let date = PGTimestamp.parse(cell.text) else { throw cell.failure("unparsable timestamp") }
        return date
    }
}

extension UUID: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> UUID {
        try cell.require("a UUID", oids: [2950, 25, 1043])
        guard let uuid = UUID(uuidString: cell.text) else { throw cell.failure("not a UUID") }
        return uuid
    }
}

extension Array: PGDecodable where Element == UInt8 {
    /// bytea in hex output (`\x0a0b...`); sessions set `bytea_output = hex`.
    public static func pgDecode(_ cell: PGCell) throws -> [UInt8] {
        try cell.require("bytes", oids: [17])
        guard let bytes = cell.withBytes(decodeHex) else { throw cell.failure("unparsable bytea hex output") }
        return bytes
    }

    static func decodeHex(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard text.count >= 2, text[0] == UInt8(ascii: "\\"), text[1] == UInt8(ascii: "x"), text.count % 2 == 0 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity((text.count - 2) / 2)
        var index = 2
        while index < text.count {
            guard let high = hexValue(text[index]), let low = hexValue(text[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: return byte - 0x30
        case 0x61...0x66: return byte - 0x61 + 10
        case 0x41...0x46: return byte - 0x41 + 10
        default: return nil
        }
    }
}

extension Data: PGDecodable {
    public static func pgDecode(_ cell: PGCell) throws -> Data { Data(try [UInt8].pgDecode(cell)) }
}
