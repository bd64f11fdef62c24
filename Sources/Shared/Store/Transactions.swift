import Postgres
import Synchronization

/// Transaction isolation for `PGConnection.transaction`.
public enum PGIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

/// Savepoint names only need to be unique among those open on one connection.
private let savepointCounter = Atomic<Int>(0)

/// Transaction control. `transaction` wraps a body; `begin`/`commit`/`rollback` serve callers that
/// hold a transaction open across calls (a stage's batch, a replay).
extension PGConnection {
    /// The BEGIN travels with the transaction's first statement (`beginDeferred`).
    public func begin(isolation: PGIsolation? = nil) throws {
        try beginDeferred(isolation.map { "BEGIN ISOLATION LEVEL \($0.rawValue)" } ?? "BEGIN")
    }

    /// Refuses (and rolls back) a transaction in which a statement failed: PostgreSQL would
    /// otherwise turn the COMMIT into a silent ROLLBACK. Deferred writes go with the COMMIT; if one
    /// fails, the COMMIT does not run and the transaction is rolled back.
    public func commit() throws {
        if inFailedTransaction {
            try? rollback()
            throw PGError(kind: .usage, sqlState: "25P02",
                          message: "transaction aborted by an earlier failed statement; rolled back instead of committing")
        }
        do {
            try endTransaction("COMMIT")
        } catch {
            // A write that failed, or could not be sent: the transaction ends here either way.
            if !isBroken, inTransaction { try? rollback() }
            throw error
        }
    }

    /// Deferred writes are dropped unsent.
    public func rollback() throws { try endTransaction("ROLLBACK", discarding: true) }

    /// Runs `body` in a transaction: COMMIT when it returns, ROLLBACK when it throws (the error is
    /// rethrown). Nested calls become savepoints. If a statement failed inside the body and the body
    /// swallowed the error, the transaction is rolled back and this throws.
    @discardableResult
    public func transaction<T>(isolation: PGIsolation? = nil, _ body: (PGConnection) throws -> T) throws -> T {
        if inTransaction { return try savepoint(body) }
        try begin(isolation: isolation)
        do {
            let value = try body(self)
            try commit()
            return value
        } catch {
            if !isBroken, inTransaction { try? rollback() }
            throw error
        }
    }

    private func savepoint<T>(_ body: (PGConnection) throws -> T) throws -> T {
        let name = "storeledger_sp_\(savepointCounter.add(1, ordering: .relaxed).newValue)"
        try executeScript("SAVEPOINT \(name)")
        do {
            let value = try body(self)
            try executeScript("RELEASE SAVEPOINT \(name)")
            return value
        } catch {
            if !isBroken { try? executeScript("ROLLBACK TO SAVEPOINT \(name); RELEASE SAVEPOINT \(name)") }
            throw error
        }
    }
}
