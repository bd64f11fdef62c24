import CLibPQ
import Foundation
import Runtime

/// One blocking libpq connection. Not thread-safe: use it from one thread at a time
/// (`PGPool` hands connections to threads). Every statement goes through `SQL`, so values
/// travel as bind parameters; results come back in text format. A statement text seen a second
/// time on a connection is prepared on the server and reused (`PreparedStatements`). Inside a
/// transaction, writes nobody reads the result of can wait for the next round trip
/// (`executeDeferred`, `PGConnection+Deferred.swift`).
///
/// Batches: bind one array per column and `unnest` them, one statement and one round trip
/// for a whole Kafka poll's worth of rows (PostgreSQL caps a statement at 65535 binds,
/// arrays count as one):
///
///     try conn.execute("""
///         INSERT INTO events (id, payload, at)
///         SELECT * FROM unnest(\(ids)::text[], \(payloads)::bigint[], \(dates)::timestamptz[])
///         ON CONFLICT (id) DO NOTHING
///         """)
public final class PGConnection {
    var handle: OpaquePointer?
    private let conninfo: String
    let options: PGOptions
    var prepared = PreparedStatements()
    /// Statements that go to the server with the next round trip (`PGConnection+Deferred`).
    var deferred: [DeferredStatement] = []

    /// Connects with a `postgres://user:pass@host:port/db?...` URL or a `key=value` conninfo
    /// string. Errors never repeat the URL (it may hold a password). `options` bound how long
    /// connecting and each statement may take (the process's Setting.pg* settings by default).
    public init(url: String, options: PGOptions = .process) throws {
        conninfo = url
        self.options = options
        handle = try PGConnection.connect(url, options)
    }

    deinit { close() }

    /// Closes the connection; later calls fail with `PGError.usage` until `reset()`.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        deferred = []
    }

    /// True when closed or libpq has seen the connection fail. libpq notices a dead socket
    /// only when a statement fails, so a broken connection shows after its first error.
    public var isBroken: Bool {
        guard let handle else { return true }
        return PQstatus(handle) != CONNECTION_OK
    }

    /// True inside `BEGIN` (also when the transaction has failed and awaits ROLLBACK, and when its
    /// BEGIN waits to be sent with the first statement).
    public var inTransaction: Bool {
        guard let handle else { return false }
        if !deferred.isEmpty { return true }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Reconnects with the original parameters (after a broken connection or `close()`).
    public func reset() throws {
        prepared.forgetAll()
        deferred = []
        if let handle {
            PQreset(handle)
            if PQstatus(handle) == CONNECTION_OK {
                try PGConnection.configureSession(handle, options)
                return
            }
            close()
        }
        handle = try PGConnection.connect(conninfo, options)
    }

    // MARK: Statements

    /// Runs one statement and returns its rows. From its second run on this connection (same text,
    /// same parameter types) it runs as a server-side prepared statement: parse and analysis are
    /// paid once; the plan is made on every run for the tables as they are, except in a keyed session,
    /// which keeps one generic index plan (`PGOptions.keyedAccess`).
    @discardableResult
    public func query(_ sql: SQL) throws -> PGRows {
        let handle = try open()
        let (text, binds) = sql.render()
        if !deferred.isEmpty { return try sendDeferred(then: [DeferredStatement(text: text, binds: binds)])[0] }
        return try Parameters.with(binds, statement: text) { parameters in
            let key = PreparedStatements.Key(text: text, types: parameters.types)
            guard options.preparesStatements, let (name, isNew) = prepared.name(for: key) else {
                return try rows(checking: PQexecParams(handle, text, parameters.count, parameters.types, parameters.values,
                                                       parameters.lengths, parameters.formats, 0), statement: text, binds: binds)
            }
            if isNew {
                do {
                    _ = try rows(checking: PQprepare(handle, name, text, parameters.count, parameters.types), statement: text, binds: binds)
                } catch {
                    prepared.forget(key)
                    throw error
                }
            }
            do {
                return try rows(checking: PQexecPrepared(handle, name, parameters.count, parameters.values,
                                                         parameters.lengths, parameters.formats, 0), statement: text, binds: binds)
            } catch let error as PGError where PreparedStatements.invalidates(error) {
                prepared.forgetAll()
                throw error
            }
        }
    }

    /// Runs one statement and returns the number of rows it inserted/updated/deleted.
    @discardableResult
    public func execute(_ sql: SQL) throws -> Int {
        try query(sql).rowsAffected
    }

    /// Runs a script of several `;`-separated statements with no parameters (simple query
    /// protocol). Meant for migrations and fixed commands, never for text built from data.
    public func executeScript(_ text: String) throws {
        try flushDeferred()
        let handle = try open()
        _ = try rows(checking: PQexec(handle, text), statement: PGConnection.summary(of: text), binds: [])
    }

    /// True when a statement failed inside the open transaction: it can only roll back (PostgreSQL
    /// would turn a COMMIT into a silent ROLLBACK).
    public var inFailedTransaction: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) == PQTRANS_INERROR
    }

    // MARK: Internals

    func open() throws -> OpaquePointer {
        guard let handle else { throw PGError(kind: .usage, message: "connection is closed; call reset() to reconnect") }
        return handle
    }

    /// Turns a libpq result into rows, or into a `PGError` (freeing the result).
    func rows(checking result: OpaquePointer?, statement: String, binds: [PGValue]) throws -> PGRows {
        guard let result else {
            PGConnection.countError(.connection)
            throw PGError(kind: .connection, message: lastErrorMessage(), statement: statement)
        }
        let status = PQresultStatus(result)
        if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY {
            let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
            return PGRows(result: PGResultHandle(result), rowsAffected: affected)
        }
        defer { PQclear(result) }
        func field(_ code: Int32) -> String? {
            PQresultErrorField(result, code).map { String(cString: $0) }
        }
        let sqlState = field(sl_pq_diag_sqlstate())
        let fallback = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
        let message = PGError.redact(field(sl_pq_diag_message_primary()) ?? fallback, binds: binds)
        // No SQLSTATE on a failed result means libpq itself failed (usually the socket).
        let kind: PGError.Kind = sqlState == nil && isBroken ? .connection : .server
        PGConnection.countError(kind)
        throw PGError(kind: kind, sqlState: sqlState,
                      message: message.isEmpty ? "statement failed (\(String(cString: PQresStatus(status))))" : message,
                      detail: field(sl_pq_diag_message_detail()), hint: field(sl_pq_diag_message_hint()),
                      constraint: field(sl_pq_diag_constraint_name()), statement: statement)
    }

    func lastErrorMessage() -> String {
        guard let handle, let text = PQerrorMessage(handle) else { return "no connection" }
        let message = String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
        return message.isEmpty ? "libpq returned no result" : message
    }

    /// Scripts can be long: errors show their first line only.
    private static func summary(of script: String) -> String {
        let firstLine = script.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
        return firstLine.count > 120 ? String(firstLine.prefix(120)) + "..." : firstLine
    }

    /// `storeledger_pg_errors_total{kind}`: statements the server refused (`server`) and connections
    /// that could not be opened or broke (`connection`). Both series exist from the first connection
    /// attempt, at 0, so a dashboard sees the family on every process that talks to PostgreSQL.
    static func countError(_ kind: PGError.Kind?) {
        for series in [PGError.Kind.connection, .server] {
            Metrics.shared.increment("storeledger_pg_errors_total", ["kind": series.rawValue], by: series == kind ? 1 : 0)
        }
    }

    private static func connect(_ conninfo: String, _ options: PGOptions) throws -> OpaquePointer {
        // The URL is expanded as `dbname` (expand_dbname=1); the keywords after it override its own.
        let pairs = [("dbname", conninfo)] + options.connectKeywords
        let made: OpaquePointer? = withCStrings(pairs.map(\.0)) { keywords in
            withCStrings(pairs.map(\.1)) { values in PQconnectdbParams(keywords, values, 1) }
        }
        guard let handle = made else {
            throw PGError(kind: .connection, message: "libpq could not allocate a connection")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            countError(.connection)
            let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(handle)
            throw PGError(kind: .connection, message: message.isEmpty ? "could not connect" : DatabaseURL.scrubbing(message, of: conninfo))
        }
        do {
            try configureSession(handle, options)
        } catch {
            PQfinish(handle)
            throw error
        }
        countError(nil)
        return handle
    }

    /// Routes server notices to the debug log instead of libpq's default stderr printing. (The
    /// output formats this module parses are fixed at connect time: `PGOptions.connectKeywords`.)
    private static func configureSession(_ handle: OpaquePointer, _ options: PGOptions) throws {
        PQsetNoticeProcessor(handle, { _, message in
            guard let message else { return }
            let text = String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
            Logger(component: "postgres").debug("pg_notice", ["message": .string(text)])
        }, nil)
    }
}

/// A NULL-terminated C string array alive for the duration of `body`.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    let pointers = copies.map { UnsafePointer($0) } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Bind parameters laid out for libpq: one contiguous buffer, pointers into it.
struct Parameters {
    let count: Int32
    let types: [UInt32]
    let values: [UnsafePointer<CChar>?]
    let lengths: [Int32]
    let formats: [Int32]

    /// Encodes `binds` (text: NUL-terminated UTF-8; bytea: binary) and runs `body` while
    /// the buffer is alive.
    static func with<R>(_ binds: [PGValue], statement: String, _ body: (Parameters) throws -> R) throws -> R {
        var buffer: [UInt8] = []
        var offsets: [Int?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        offsets.reserveCapacity(binds.count)
        for (index, bind) in binds.enumerated() {
            switch bind.payload {
            case .null:
                offsets.append(nil)
                lengths.append(0)
                formats.append(0)
            case .text(let text):
                let start = buffer.count
                buffer.append(contentsOf: text.utf8)
                if buffer[start...].contains(0) {
                    throw PGError(kind: .invalidParameter, sqlState: "22021",
                                  message: "bind $\(index + 1) (\(bind.type)) contains a NUL byte, which PostgreSQL text cannot hold",
                                  statement: statement)
                }
                buffer.append(0)
                offsets.append(start)
                lengths.append(Int32(buffer.count - start - 1))
                formats.append(0)
            case .binary(let bytes):
                guard bytes.count < Int(Int32.max) else {
                    throw PGError(kind: .invalidParameter, message: "bind $\(index + 1) is too large", statement: statement)
                }
                offsets.append(buffer.count)
                buffer.append(contentsOf: bytes)
                lengths.append(Int32(bytes.count))
                formats.append(1)
            }
        }
        buffer.append(0)  // never empty, so the base address exists
        return try buffer.withUnsafeBufferPointer { raw in
            try raw.withMemoryRebound(to: CChar.self) { base in
                let values = offsets.map { offset in offset.map { UnsafePointer(base.baseAddress! + $0) } }
                return try body(Parameters(count: Int32(binds.count), types: binds.map(\.type.oid),
                                           values: values, lengths: lengths, formats: formats))
            }
        }
    }
}
