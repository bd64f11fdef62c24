import Dispatch
import Runtime
import Synchronization

/// A small blocking connection pool for threads (e.g. the HTTP server's pool threads).
/// Connections open lazily, up to `size`; a borrower blocks until one is free. A connection
/// that broke is reconnected on its next checkout; one returned inside a transaction (the
/// body escaped mid-transaction) is closed, which rolls it back, and replaced on next checkout.
/// While the server is unreachable, connection attempts are spaced by a capped exponential
/// backoff shared by all slots: a borrower inside the wait fails at once with
/// `PGError.connection` (an HTTP thread answers 503 instead of each one waiting out
/// `connect_timeout` against a server that just refused the previous attempt).
/// Blocks the calling thread: call it from threads, not from async tasks.
public final class PGPool: Sendable {
    public let size: Int
    private let url: String
    /// One permit per slot: whoever holds a permit is guaranteed a slot in `slots`.
    private let permits: DispatchSemaphore
    /// Free slots; nil is a slot whose connection is not open (yet, or any more).
    private let slots: Mutex<[PooledConnection?]>
    private let options: PGOptions
    private let backoff = Mutex(ReconnectBackoff())
    private let clock: @Sendable () -> Int64

    public init(url: String, size: Int, options: PGOptions = .process, clock: @escaping @Sendable () -> Int64 = currentTimeMs) {
        self.size = max(1, size)
        self.url = url
        self.options = options
        self.clock = clock
        permits = DispatchSemaphore(value: self.size)
        slots = Mutex([PooledConnection?](repeating: nil, count: self.size))
    }

    /// Lends a connection to `body` on this thread and takes it back afterwards.
    /// Errors are `body`'s own or a `PGError.connection` when no connection can be opened.
    public func withConnection<T>(_ body: (PGConnection) throws -> T) throws -> T {
        let asked = DispatchTime.now().uptimeNanoseconds
        permits.wait()
        // How long a borrower waited for a free slot (not for connecting): a pool too small shows here.
        Metrics.shared.observe("storeledger_pg_pool_wait_seconds", [:], Double(DispatchTime.now().uptimeNanoseconds - asked) / 1e9,
                               buckets: PGPool.waitBuckets)
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

    /// 100 µs to 10 s: an uncontended pool answers in microseconds.
    static let waitBuckets: [Double] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]

    /// Number of slots with an open connection that are free right now (for metrics/tests).
    public var idleConnections: Int {
        slots.withLock { free in free.reduce(0) { $0 + ($1 == nil ? 0 : 1) } }
    }

    private func ready(_ slot: PooledConnection?) throws -> PooledConnection {
        if let slot, !slot.connection.isBroken { return slot }
        let now = clock()
        if let wait = backoff.withLock({ $0.remainingWait(nowMs: now) }) {
            throw PGError(kind: .connection, message: "PostgreSQL unreachable; next connection attempt in \(wait) ms")
        }
        do {
            let pooled: PooledConnection
            if let slot {
                try slot.connection.reset()
                pooled = slot
            } else {
                pooled = PooledConnection(try PGConnection(url: url, options: options))
            }
            backoff.withLock { $0.succeeded() }
            return pooled
        } catch {
            let failedAt = clock()
            backoff.withLock { $0.failed(nowMs: failedAt) }
            throw error
        }
    }

    private func giveBack(_ pooled: PooledConnection) {
        let connection = pooled.connection
        // Left mid-transaction (a body escaped after BEGIN): dropped, and the server rolls back.
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

/// When to try connecting again after failures: 100 ms doubling to 5 s (pure; the pool keeps one).
struct ReconnectBackoff: Sendable, Equatable {
    static let baseMs: Int64 = 100
    static let capMs: Int64 = 5_000
    private(set) var failures = 0
    private(set) var nextAttemptMs: Int64?

    /// Milliseconds until the next attempt is allowed, or nil when one may go now.
    func remainingWait(nowMs: Int64) -> Int64? {
        guard let next = nextAttemptMs, nowMs < next else { return nil }
        return next - nowMs
    }

    mutating func failed(nowMs: Int64) {
        failures += 1
        let shift = min(failures - 1, 20)
        nextAttemptMs = nowMs + min(ReconnectBackoff.capMs, ReconnectBackoff.baseMs << shift)
    }

    mutating func succeeded() {
        failures = 0
        nextAttemptMs = nil
    }
}
