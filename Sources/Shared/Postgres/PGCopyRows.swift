/// Rows for a `COPY table (columns) FROM STDIN (FORMAT binary)` statement, built in memory and sent
/// with it by `PGConnection.copyDeferred`. PostgreSQL inserts copied rows several at a time (one WAL
/// record and one buffer lock per page, not per row) and runs no executor per row: about half the
/// server's CPU of an `INSERT … SELECT FROM unnest(…)` of the same rows (issue 14). Unlike that insert, binary COPY
/// casts nothing: each field must be sent in its column's own type, so `appendInteger` is for
/// `integer` columns and refuses a value out of their range here, as the insert's cast would there.
///
///     var rows = PGCopyRows(columns: 2)
///     for event in events { rows.startRow(); rows.append(event.id); rows.append(event.atMs) }
///     try conn.copyDeferred(copyStatement, rows: rows)
public struct PGCopyRows: Sendable {
    /// Values per row: the statement's column list.
    public let columns: Int
    public private(set) var count = 0
    private var fields = PGBinaryFields(reservingCapacity: 4_096)

    public init(columns: Int) {
        self.columns = columns
        // The signature, no flags, no header extension.
        fields.bytes += Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00]
        fields.bigEndian(UInt32(0))
        fields.bigEndian(UInt32(0))
    }

    /// Begins the next row; append one value per column after it, in `columns`' order.
    public mutating func startRow() {
        fields.bigEndian(Int16(truncatingIfNeeded: columns))
        count += 1
    }

    public mutating func append(_ text: String?) {
        guard let text else { return fields.null() }
        fields.text(text)
    }

    public mutating func append(_ number: Int64?) {
        guard let number else { return fields.null() }
        fields.int8(number)
    }

    /// A value for an `integer` column.
    public mutating func appendInteger(_ number: Int?, column: String) throws {
        guard let number else { return fields.null() }
        guard let value = Int32(exactly: number) else {
            throw PGError(kind: .invalidParameter, sqlState: "22003", message: "\(column) = \(number) is out of range for type integer")
        }
        fields.int4(value)
    }

    public mutating func append(_ flag: Bool?) {
        guard let flag else { return fields.null() }
        fields.bool(flag)
    }

    public mutating func append(bytes: [UInt8]?) {
        guard let bytes else { return fields.null() }
        fields.bytea(bytes)
    }

    /// A JSON document for a `json` column (`jsonb: false`) or a `jsonb` one.
    public mutating func append(json: [UInt8]?, jsonb: Bool) {
        guard let json else { return fields.null() }
        fields.json(json, versioned: jsonb)
    }

    /// The whole stream: the header, the rows, the trailer.
    var data: [UInt8] {
        var data = fields.bytes
        withUnsafeBytes(of: Int16(-1).bigEndian) { data.append(contentsOf: $0) }
        return data
    }
}
