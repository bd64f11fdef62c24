import CLibPQ

/// A statement held for the connection's next round trip.
struct DeferredStatement {
    var text: String
    var binds: [PGValue] = []
    /// Transaction control (BEGIN, COMMIT) goes unprepared: there is nothing to plan.
    var prepares = true
    /// The transaction's BEGIN: while it waits, nothing of the transaction has reached the server.
    var opensTransaction = false
    /// Rows to COPY in (`text` is then the COPY statement): they cannot travel in a pipeline.
    var copy: PGCopyRows?
}

/// Deferred statements: the writes of a transaction whose results nobody reads (and its BEGIN) wait
/// on the client and travel with the next statement that must answer, or with the COMMIT, in one
/// libpq pipeline: one round trip instead of one each. A stage's batch sent 8–14 statements in
/// series, each a wake-up of PostgreSQL and of the stage; at a few events per batch those, not the
/// rows, were most of PostgreSQL's CPU per event.
///
/// Effects are unchanged: the statements run in order, in the same transaction, before anything
/// sent after them. Only where a failure surfaces moves: a deferred statement's error is thrown by
/// the call that sends it (the next `query`, `execute`, `executeScript` or the COMMIT), with that
/// statement's text, and the statements after it in the pipeline do not run.
extension PGConnection {
    /// Runs `sql` with the next round trip when inside a transaction, at once outside one (where
    /// nothing later would be sure to send it). For writes whose row count nobody reads, and locks
    /// (`SELECT … FOR UPDATE`) whose rows nobody reads: the next statement runs under them.
    public func executeDeferred(_ sql: SQL) throws {
        guard inTransaction else {
            try execute(sql)
            return
        }
        _ = try open()
        let (text, binds) = sql.render()
        deferred.append(DeferredStatement(text: text, binds: binds))
    }

    /// Copies `rows` in with `sql` (`COPY … FROM STDIN (FORMAT binary)`): with the next round trips
    /// inside a transaction, at once outside one. A COPY cannot be part of a libpq pipeline: what was
    /// deferred before it goes in one round trip, then the COPY in two of its own (its start, then its
    /// data and end), then the rest. For batches large enough that the rows' cost outweighs the round
    /// trips (`PGCopyRows`).
    public func copyDeferred(_ sql: SQL, rows: PGCopyRows) throws {
        guard rows.count > 0 else { return }
        _ = try open()
        let (text, binds) = sql.render()
        guard binds.isEmpty else { throw PGError(kind: .usage, message: "a COPY statement takes no parameters", statement: text) }
        let statement = DeferredStatement(text: text, prepares: false, copy: rows)
        guard inTransaction else { return try copyIn(statement) }
        deferred.append(statement)
    }

    /// Opens a transaction block whose `BEGIN` (`text`, with its options) is sent with the first
    /// statement of the transaction, not on a round trip of its own.
    public func beginDeferred(_ text: String) throws {
        _ = try open()
        deferred.append(DeferredStatement(text: text, prepares: false, opensTransaction: true))
    }

    /// Ends the transaction block with `text` (COMMIT or ROLLBACK) in the round trip that sends what is
    /// still deferred. A transaction whose BEGIN was never sent has nothing to end on the server;
    /// `discarding` drops the deferred statements instead of sending them (a rollback).
    public func endTransaction(_ text: String, discarding: Bool = false) throws {
        if deferred.first?.opensTransaction == true, discarding || deferred.count == 1 {
            deferred = []
            return
        }
        if discarding { deferred = [] }
        guard !deferred.isEmpty else { return try executeScript(text) }
        _ = try sendDeferred(then: [DeferredStatement(text: text, prepares: false)])
    }

    /// Sends what is deferred now, in one round trip (a stage before it publishes: a write that fails
    /// must fail before the batch's outputs leave).
    public func flushDeferred() throws {
        guard !deferred.isEmpty else { return }
        _ = try sendDeferred()
    }

    /// Runs these reads, which do not depend on each other, in one round trip (after what is deferred)
    /// and returns each one's rows, in order.
    public func queries(_ statements: [SQL]) throws -> [PGRows] {
        guard statements.count > 1 || !deferred.isEmpty else { return try statements.map { try query($0) } }
        return try sendDeferred(then: statements.map { sql in
            let (text, binds) = sql.render()
            return DeferredStatement(text: text, binds: binds)
        })
    }

    /// Sends the deferred statements, then `last`, as one pipeline; returns the rows of each of `last`.
    /// Throws the first failure, after reading every result so the connection is ready for the next
    /// statement (or for ROLLBACK, the transaction having failed).
    func sendDeferred(then last: [DeferredStatement] = []) throws -> [PGRows] {
        var statements = deferred + last
        deferred = []
        while let index = statements.firstIndex(where: { $0.copy != nil }) {
            if index > 0 { _ = try pipeline(Array(statements[..<index]), answering: 0) }
            try copyIn(statements[index])
            statements.removeFirst(index + 1)
        }
        return try pipeline(statements, answering: last.count)
    }

    /// Sends `statements` as one pipeline; returns the rows of the last `answering` of them.
    private func pipeline(_ statements: [DeferredStatement], answering: Int) throws -> [PGRows] {
        let handle = try open()
        guard !statements.isEmpty else { return [] }
        guard PQenterPipelineMode(handle) == 1 else { throw connectionFailure("could not enter pipeline mode") }
        var expected: [Expected] = []
        var sendError: (any Error)?
        for statement in statements {
            do {
                try send(statement, on: handle, expecting: &expected)
            } catch {
                sendError = error
                break
            }
        }
        let outcome = Result { try readResults(expected, on: handle).suffix(answering) }
        if PQexitPipelineMode(handle) != 1 {
            // Results we did not read would be taken for the next statement's: start afresh.
            let unread = connectionFailure("the pipeline's results were not all read")
            close()
            if case .failure(let error) = outcome { throw error }
            throw unread
        }
        if let sendError { throw sendError }
        return Array(try outcome.get())
    }

    /// Runs one COPY … FROM STDIN: its start (the server answers that it is ready), the data, its end.
    /// A failure is thrown after the copy's results are read, so the connection is ready for ROLLBACK.
    private func copyIn(_ statement: DeferredStatement) throws {
        guard let copy = statement.copy else { return }
        let handle = try open()
        guard let start = PQexec(handle, statement.text) else { throw connectionFailure(statement.text) }
        guard PQresultStatus(start) == PGRES_COPY_IN else {
            _ = try rows(checking: start, statement: statement.text, binds: [])   // the server's refusal
            throw PGError(kind: .usage, message: "the server did not start the copy", statement: statement.text)
        }
        PQclear(start)
        let data = copy.data
        // In pieces of at most 1 MiB: libpq takes a length as a C int.
        let sent = data.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { bytes in
                var status: Int32 = 1
                for start in stride(from: 0, to: bytes.count, by: 1 << 20) where status == 1 {
                    status = PQputCopyData(handle, bytes.baseAddress! + start, Int32(min(1 << 20, bytes.count - start)))
                }
                return status
            }
        }
        // A copy whose data could not all be sent is ended with an error, so the server inserts nothing.
        guard PQputCopyEnd(handle, sent == 1 ? nil : "the copy's data could not be sent") == 1 else {
            throw connectionFailure(statement.text)
        }
        var failure: (any Error)?
        while let result = PQgetResult(handle) {
            do { _ = try rows(checking: result, statement: statement.text, binds: []) } catch {
                if failure == nil { failure = error }
            }
        }
        if let failure { throw failure }
        if sent != 1 { throw connectionFailure(statement.text) }
    }

    /// What one sent message answers with.
    enum Expected {
        case prepare(PreparedStatements.Key, statement: String)
        case run(key: PreparedStatements.Key?, statement: String, binds: [PGValue])

        var statement: String {
            switch self {
            case .prepare(_, let statement), .run(_, let statement, _): statement
            }
        }
    }

    private func send(_ statement: DeferredStatement, on handle: OpaquePointer, expecting expected: inout [Expected]) throws {
        try Parameters.with(statement.binds, statement: statement.text) { parameters in
            let key = PreparedStatements.Key(text: statement.text, types: parameters.types)
            guard statement.prepares, options.preparesStatements, let (name, isNew) = prepared.name(for: key) else {
                guard PQsendQueryParams(handle, statement.text, parameters.count, parameters.types, parameters.values,
                                        parameters.lengths, parameters.formats, 0) == 1 else { throw connectionFailure(statement.text) }
                return expected.append(.run(key: nil, statement: statement.text, binds: statement.binds))
            }
            if isNew {
                guard PQsendPrepare(handle, name, statement.text, parameters.count, parameters.types) == 1 else {
                    prepared.forget(key)
                    throw connectionFailure(statement.text)
                }
                expected.append(.prepare(key, statement: statement.text))
            }
            guard PQsendQueryPrepared(handle, name, parameters.count, parameters.values, parameters.lengths, parameters.formats, 0) == 1 else {
                throw connectionFailure(statement.text)
            }
            expected.append(.run(key: key, statement: statement.text, binds: statement.binds))
        }
    }

    /// Reads each message's results, then the pipeline's sync. After a failure the server skips the
    /// rest up to the sync (PGRES_PIPELINE_ABORTED): the first failure is the one thrown.
    private func readResults(_ expected: [Expected], on handle: OpaquePointer) throws -> [PGRows] {
        guard PQpipelineSync(handle) == 1 else { throw connectionFailure("could not send the pipeline's sync") }
        var failure: (any Error)?
        var answers: [PGRows] = []
        for message in expected {
            guard let result = nextResult(handle) else { throw connectionFailure(message.statement) }
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                continue
            }
            do {
                let statement = message.statement
                switch message {
                case .prepare:
                    _ = try rows(checking: result, statement: statement, binds: [])
                case .run(_, _, let binds):
                    answers.append(try rows(checking: result, statement: statement, binds: binds))
                }
            } catch let error as PGError {
                switch message {
                case .prepare(let key, _): prepared.forget(key)
                case .run(let key, _, _) where key != nil && PreparedStatements.invalidates(error): prepared.forgetAll()
                case .run: break
                }
                if failure == nil { failure = error }
            }
        }
        guard let sync = PQgetResult(handle) else { throw connectionFailure("no pipeline sync") }
        let status = PQresultStatus(sync)
        PQclear(sync)
        guard status == PGRES_PIPELINE_SYNC else { throw connectionFailure("expected the pipeline's sync") }
        if let failure { throw failure }
        return answers
    }

    /// One message's result; the NULL that ends it is read too (a message has one result here: the
    /// statements are single, and a COPY never travels in a pipeline).
    private func nextResult(_ handle: OpaquePointer) -> OpaquePointer? {
        guard let result = PQgetResult(handle) else { return nil }
        while let extra = PQgetResult(handle) { PQclear(extra) }
        return result
    }

    private func connectionFailure(_ statement: String) -> PGError {
        PGConnection.countError(.connection)
        return PGError(kind: .connection, message: lastErrorMessage(), statement: statement)
    }
}
