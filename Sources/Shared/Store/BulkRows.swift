import Domain
import Postgres

/// A row type written in bulk (postgres-nio's PostgresCodable idea, our own small version): it
/// declares its columns once, each with its PostgreSQL type and how a row yields the value. The
/// statement's column list, the record set's definition and every row's JSON are all generated from
/// that one list, so a value cannot land in another column.
protocol BulkRow {
    static var columns: [BulkColumn<Self>] { get }
}

/// One column of a `BulkRow`: its name in the table, its type, and the row's value as JSON.
struct BulkColumn<Row>: Sendable {
    let name: String
    let type: String
    let write: @Sendable (Row, inout JSONWriter) -> Void

    static func text(_ name: String, _ value: @escaping @Sendable (Row) -> String?) -> Self {
        Self(name: name, type: "text") { row, out in out.string(value(row)) }
    }

    static func bigint(_ name: String, _ value: @escaping @Sendable (Row) -> Int64?) -> Self {
        Self(name: name, type: "bigint") { row, out in out.int(value(row)) }
    }

    /// PostgreSQL refuses a value out of `integer`'s range (22003): clamp first where that is wanted.
    static func integer(_ name: String, _ value: @escaping @Sendable (Row) -> Int?) -> Self {
        Self(name: name, type: "integer") { row, out in out.int(value(row).map(Int64.init)) }
    }

    static func boolean(_ name: String, _ value: @escaping @Sendable (Row) -> Bool) -> Self {
        Self(name: name, type: "boolean") { row, out in out.bool(value(row)) }
    }

    /// A document that is already JSON (an encoded state, cause or view): spliced, not re-encoded.
    static func jsonb(_ name: String, _ value: @escaping @Sendable (Row) -> [UInt8]) -> Self {
        Self(name: name, type: "jsonb") { row, out in out.raw(value(row)) }
    }
}

/// A batch of rows as one `jsonb_to_recordset` parameter: one round trip, PostgreSQL parses the
/// batch once, and large documents are neither re-encoded nor escaped into array literals. Keys are
/// short and generated (`c0`, `c1`...) from the column's position in the declaration.
struct BulkRows<Row: BulkRow> {
    private var writer: JSONWriter
    private(set) var count = 0

    init(_ rows: some Sequence<Row>, capacity: Int = 0) {
        writer = JSONWriter(capacity: capacity)
        writer.bytes.append(UInt8(ascii: "["))
        let columns = Row.columns
        // `"c0":`, `,"c1":`...: made once per batch, not per row.
        let keys = columns.indices.map { Array(($0 == 0 ? "\"c0\":" : ",\"c\($0)\":").utf8) }
        for row in rows {
            if count > 0 { writer.bytes.append(UInt8(ascii: ",")) }
            writer.bytes.append(UInt8(ascii: "{"))
            for (index, column) in columns.enumerated() {
                writer.bytes.append(contentsOf: keys[index])
                column.write(row, &writer)
            }
            writer.bytes.append(UInt8(ascii: "}"))
            count += 1
        }
        writer.bytes.append(UInt8(ascii: "]"))
    }

    var isEmpty: Bool { count == 0 }

    /// `name, name, ...`: the table's columns, in declaration order.
    static var columnList: SQL { SQL(unsafeSQL: Row.columns.map(\.name).joined(separator: ", ")) }

    /// `alias.c0, alias.c1, ...`: the record set's fields, in the same order as `columnList`.
    static func fields(_ alias: String) -> SQL {
        SQL(unsafeSQL: Row.columns.indices.map { "\(alias).c\($0)" }.joined(separator: ", "))
    }

    /// The record set's field holding column `name` (for joins and ordering).
    static func field(_ name: String, _ alias: String) -> SQL {
        guard let index = Row.columns.firstIndex(where: { $0.name == name }) else {
            preconditionFailure("\(Row.self) has no column \(name)")
        }
        return SQL(unsafeSQL: "\(alias).c\(index)")
    }

    /// `col = EXCLUDED.col, ...` for every column but the conflict target's.
    static func updateList(excluding key: Set<String>) -> SQL {
        SQL(unsafeSQL: Row.columns.map(\.name).filter { !key.contains($0) }.map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", "))
    }

    /// `jsonb_to_recordset($n) AS alias(c0 type, c1 type, ...)`.
    func recordset(_ alias: String) -> SQL {
        let definition = Row.columns.enumerated().map { "c\($0.offset) \($0.element.type)" }.joined(separator: ", ")
        return "jsonb_to_recordset(\(PGJSON(String(decoding: writer.bytes, as: UTF8.self)))) AS \(unsafeSQL: alias)(\(unsafeSQL: definition))"
    }
}

/// Appends JSON values to a byte buffer: strings escaped by runs, numbers, booleans, raw documents.
struct JSONWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    mutating func string(_ value: String?) {
        guard var value else { return bytes.append(contentsOf: Array("null".utf8)) }
        bytes.append(UInt8(ascii: "\""))
        value.withUTF8 { utf8 in
            // Copy runs of plain bytes at once; escape only quotes, backslashes and control bytes.
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                runStart = index + 1
                switch byte {
                case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
                case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                              hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func int(_ value: Int64?) {
        bytes.append(contentsOf: Array((value.map { String($0) } ?? "null").utf8))
    }

    mutating func bool(_ value: Bool) {
        bytes.append(contentsOf: Array((value ? "true" : "false").utf8))
    }

    /// A value that is already JSON.
    mutating func raw(_ json: [UInt8]) {
        bytes.append(contentsOf: json)
    }
}

/// `[Interval]` as `Interval`'s Codable form (`{"endMs":…,"startMs":…}`, no `endMs` when open-ended),
/// written directly: the ledger needs two per entry.
public func intervalsJSON(_ intervals: [Interval]) -> [UInt8] {
    var text = "["
    for (index, interval) in intervals.enumerated() {
        if index > 0 { text += "," }
        if let end = interval.endMs {
            text += "{\"endMs\":\(end),\"startMs\":\(interval.startMs)}"
        } else {
            text += "{\"startMs\":\(interval.startMs)}"
        }
    }
    return Array((text + "]").utf8)
}
