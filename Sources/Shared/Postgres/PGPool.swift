import Dispatch
import Synchronization

/// A small blocking connection pool for threads (e.g. the HTTP server's pool threads).
/// Connections open lazily, up to `size`; a borrower blocks until one is free. A connection
/// that broke is reconnected on its next checkout; one returned inside a transaction (the
/// body escaped mid-BEGIN) is rolled back, or dropped if that fails.
/// Blocks the calling thread: call it from threads, not from async tasks.
public final class PGPool: Sendable {
    public let size: Int
    private let url: String
    /// One permit per slot: whoever holds a permit is guaranteed a slot in `slots`.
    private let permits: DispatchSemaphore
    /// Free slots; nil is a slot whose connection is not open (yet, or any more).
    private let slots: Mutex<[PooledConnection?]>

    public init(url: String, size: Int) {
        self.size = max(1, size)
        self.url = url
        permits = DispatchSemaphore(value: self.size)
        slots = Mutex([PooledConnection?](repeating: nil, count: self.size))
    }

    /// Lends a connection to `body` on this thread and takes it back afterwards.
    /// Errors are `body`'s own or a `PGError.connection` when no connection can be opened.
    public func withConnection<T>(_ body: (PGConnection) throws -> T) throws -> T {
        permits.wait()
        defer { permits.signal() }
        let slot = slots.withLock { free in free.popLast() ?? nil }
        let pooled: PooledConnection
        do {
            pooled = try ready(slot)
        } catch {
            slots.withLock { $0.append(nil) }
            throw error
        }
        defer { giveBack(pooled) }
        return try body(pooled.connection)
    }

    /// Number of slots with an open connection that are free right now (for metrics/tests).
    public var idleConnections: Int {
        slots.withLock { free in free.reduce(0) { $0 + ($1 == nil ? 0 : 1) } }
    }

    private func ready(_ slot: PooledConnection?) throws -> PooledConnection {
        guard let slot else { return PooledConnection(try PGConnection(url: url)) }
        if slot.connection.isBroken { try slot.connection.reset() }
        return slot
    }

    private func giveBack(_ pooled: PooledConnection) {
        let connection = pooled.connection
        if !connection.isBroken, connection.inTransaction { try? connection.executeScript("ROLLBACK") }
        let keep = !connection.isBroken && !connection.inTransaction
        if !keep { connection.close() }
        slots.withLock { $0.append(keep ? pooled : nil) }
    }
}

/// A pooled connection in transit between the pool's lock and one borrower.
// @unchecked Sendable: a PooledConnection is only ever reachable from the `slots` array
// (touched under its Mutex) or from the single borrower that popped it; never both.
final class PooledConnection: @unchecked Sendable {
    let connection: PGConnection
    init(_ connection: PGConnection) { self.connection = connection }
}
