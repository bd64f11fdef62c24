import Postgres

/// A row type written in bulk (postgres-nio's PostgresCodable idea, our own small version): it
/// declares its columns once, each with its PostgreSQL type and how a row yields the value. The
/// statement's column list, the record set's definition and every column's array are all generated
/// from that one list, so a value cannot land in another column.
protocol BulkRow {
    static var columns: [BulkColumn<Self>] { get }
}

/// One column of a `BulkRow`: its name in the table, its array's element type, and the row's value,
/// written into a column's array or into a binary COPY row (in the column's own type).
struct BulkColumn<Row>: Sendable {
    let name: String
    let element: PGBinaryArray.Element
    let write: @Sendable (Row, inout PGBinaryArray) -> Void
    let copy: @Sendable (Row, inout PGCopyRows) throws -> Void

    static func text(_ name: String, _ value: @escaping @Sendable (Row) -> String?) -> Self {
        Self(name: name, element: .text, write: { $1.append(value($0)) }, copy: { $1.append(value($0)) })
    }

    static func bigint(_ name: String, _ value: @escaping @Sendable (Row) -> Int64?) -> Self {
        Self(name: name, element: .int8, write: { $1.append(value($0)) }, copy: { $1.append(value($0)) })
    }

    /// Sent as bigint in an array: PostgreSQL refuses a value out of `integer`'s range when it is
    /// assigned to the column (22003); a COPY sends it as an integer and refuses it here alike.
    /// Clamp first where that is wanted.
    static func integer(_ name: String, _ value: @escaping @Sendable (Row) -> Int?) -> Self {
        Self(name: name, element: .int8, write: { $1.append(value($0).map(Int64.init)) },
             copy: { try $1.appendInteger(value($0), column: name) })
    }

    static func boolean(_ name: String, _ value: @escaping @Sendable (Row) -> Bool) -> Self {
        Self(name: name, element: .bool, write: { $1.append(value($0)) }, copy: { $1.append(value($0)) })
    }

    static func bytea(_ name: String, _ value: @escaping @Sendable (Row) -> [UInt8]?) -> Self {
        Self(name: name, element: .bytea, write: { $1.append(bytes: value($0)) }, copy: { $1.append(bytes: value($0)) })
    }

    /// A document that is already JSON, into a `jsonb` column: copied, not re-encoded; the server parses
    /// it into a tree (the ledger's and the views' documents, which SQL compares, groups and edits).
    static func jsonb(_ name: String, _ value: @escaping @Sendable (Row) -> [UInt8]) -> Self {
        Self(name: name, element: .jsonb, write: { $1.append(json: value($0)) }, copy: { $1.append(json: value($0), jsonb: true) })
    }

    /// The same into a `json` column (a state, purchase or grant, written and read back whole): stored
    /// as the bytes given, after the server's check.
    static func json(_ name: String, _ value: @escaping @Sendable (Row) -> [UInt8]) -> Self {
        Self(name: name, element: .json, write: { $1.append(json: value($0)) }, copy: { $1.append(json: value($0), jsonb: false) })
    }
}

/// A batch of rows as one binary array parameter per column, `unnest`ed together: one round trip,
/// and nothing is escaped here or parsed there but the JSON columns' own documents (issue 14: a
/// single `jsonb_to_recordset` document cost PostgreSQL a parse of the whole batch, then a lookup
/// and a conversion per field). The record set's fields are named by position (`c0`, `c1`...).
struct BulkRows<Row: BulkRow> {
    private var arrays: [PGBinaryArray]
    private(set) var count = 0

    init(_ rows: some Sequence<Row>) {
        let columns = Row.columns
        arrays = columns.map { PGBinaryArray($0.element) }
        for row in rows {
            for index in columns.indices { columns[index].write(row, &arrays[index]) }
            count += 1
        }
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

    /// `unnest($1::text[], $2::bigint[], ...) AS alias(c0, c1, ...)`: rows in the order they were given.
    func recordset(_ alias: String) -> SQL {
        var sql: SQL = "unnest("
        for (index, array) in arrays.enumerated() {
            sql += index == 0 ? "\(array)::\(unsafeSQL: array.element.sqlName)" : ", \(array)::\(unsafeSQL: array.element.sqlName)"
        }
        let names = arrays.indices.map { "c\($0)" }.joined(separator: ", ")
        return sql + ") AS \(unsafeSQL: alias)(\(unsafeSQL: names))"
    }
}

/// The keys the stages insert plainly because their batch read found no row: a unique violation on one
/// of these means another transaction wrote the key meanwhile, and the batch's retry reads it. Any other
/// unique violation (the ledger's change identity above all) is a refusal that no retry changes.
public enum RacedKeys {
    public static let constraints: Set<String> = [
        "purchases_pkey", "transaction_aliases_pkey", "seen_events_pkey", "subscriptions_pkey", "grants_pkey",
    ]
}

/// A row that knows whether its key is in its table: the stage read (and, for states, locked) every row
/// its batch changes, in the batch's transaction.
protocol StoredRow: BulkRow {
    var isStored: Bool { get }
}

extension BulkRows {
    /// Batches of at least this many rows are inserted with COPY, smaller ones with one
    /// `INSERT … SELECT FROM unnest(…)` in the pipeline. COPY halves the server's CPU per row but costs
    /// two round trips of its own and ends the pipeline before it: at 1,000 events/s a stage's batches
    /// hold ~20 rows, where the round trips would cost more than the rows save (issue 14).
    static var copyThreshold: Int { 100 }

    /// Inserts `rows` into `table`, deferred: with COPY when there are `copyThreshold` or more, else
    /// with one insert. Plain inserts either way: a key already there fails (23505).
    static func insert(_ rows: [Row], into table: String, on db: PGConnection) throws {
        guard !rows.isEmpty else { return }
        guard rows.count < copyThreshold else {
            var copy = PGCopyRows(columns: Row.columns.count)
            for row in rows {
                copy.startRow()
                for column in Row.columns { try column.copy(row, &copy) }
            }
            return try db.copyDeferred("COPY \(unsafeSQL: table) (\(fragment: columnList)) FROM STDIN (FORMAT binary)", rows: copy)
        }
        try db.executeDeferred("""
            INSERT INTO \(unsafeSQL: table) (\(fragment: columnList))
            SELECT \(fragment: fields("t")) FROM \(fragment: BulkRows(rows).recordset("t"))
            """)
    }
}

extension BulkRows where Row: StoredRow {
    /// Writes `rows` into `table`, deferred: the new keys with a plain insert (`insert`, COPY for large
    /// batches), the stored ones with one upsert on `key`, stamping `updated_at`. An upsert of a new row
    /// probes each unique index once more and logs a confirmation (~1.6 times an insert's cost, issue 14),
    /// so new rows skip it; for a stored row it costs what an update does, and a row the stage believes
    /// stored but that is missing (removed by hand, a partial restore) is written again, not lost. A new
    /// key another transaction inserted meanwhile fails the insert with a unique violation, which the
    /// stage retries (`RacedKeys`).
    static func write(_ rows: [Row], into table: String, key: [String], on db: PGConnection) throws {
        try insert(rows.filter { !$0.isStored }, into: table, on: db)
        let stored = rows.filter(\.isStored)
        guard !stored.isEmpty else { return }
        try db.executeDeferred("""
            INSERT INTO \(unsafeSQL: table) (\(fragment: columnList))
            SELECT \(fragment: fields("t")) FROM \(fragment: BulkRows(stored).recordset("t"))
            ON CONFLICT (\(unsafeSQL: key.joined(separator: ", "))) DO UPDATE SET \(fragment: updateList(excluding: Set(key))), updated_at = now()
            """)
    }
}
