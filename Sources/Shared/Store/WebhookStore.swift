import Domain
import Foundation
import Postgres

/// The webhook tables (migration 6): per endpoint a cursor over the relay order, a delivery row per
/// event, and the log of every attempt. Every statement names its endpoint, the tables' partition key.
public struct WebhookStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// Takes this endpoint's deliverer lock if free (true); it lasts as long as this connection, so a
    /// deliverer that dies or loses PostgreSQL hands the endpoint to a standby. Two workers sending the
    /// same due rows would each POST them. The key is a 64-bit hash of the endpoint's id: two
    /// endpoints sharing one would leave the second without a deliverer.
    public func tryTakeDelivererLock(endpoint: String) throws -> Bool {
        try db.query("SELECT pg_try_advisory_lock(hashtextextended('storeledger-webhook:' || \(endpoint), 0)) AS held").first?.bool("held") == true
    }

    /// Where a new endpoint's deliveries start: with the events ordered from now on (the default: an
    /// endpoint added after months must not be sent every event ever written, oldest first), or
    /// with the whole outbox.
    public enum Start: String, Sendable, Decodable {
        case now, beginning
    }

    /// Takes the outbox rows ordered since the endpoint's cursor as pending deliveries and moves the
    /// cursor, in one transaction. `relay_seq` is assigned by the single active relay, one transaction
    /// after another, so the cursor never skips a row that commits later. `start` matters only the
    /// first time an endpoint is seen, when its cursor is made.
    @discardableResult
    public func enqueue(endpoint: String, start: Start = .now, limit: Int = 500) throws -> Int {
        try db.transaction { db in
            let first: SQL = start == .beginning ? "0" : "(SELECT coalesce(max(relay_seq), 0) FROM membership_outbox WHERE relay_seq IS NOT NULL)"
            try db.execute("INSERT INTO webhook_cursors (endpoint_id, last_seq) VALUES (\(endpoint), \(fragment: first)) ON CONFLICT DO NOTHING")
            let last = try db.query("SELECT last_seq FROM webhook_cursors WHERE endpoint_id = \(endpoint) FOR UPDATE").first!.int64("last_seq")
            let taken = try db.query("""
                INSERT INTO webhook_deliveries (endpoint_id, entry_id, relay_seq, event_key, event_type, status)
                SELECT \(endpoint), entry_id, relay_seq, event_key, event_type, 'pending' FROM membership_outbox
                WHERE relay_seq > \(last) ORDER BY relay_seq LIMIT \(limit)
                ON CONFLICT DO NOTHING RETURNING relay_seq
                """)
            guard let top = try taken.map({ try $0.int64("relay_seq") }).max() else { return 0 }
            try db.execute("UPDATE webhook_cursors SET last_seq = \(top), updated_at = now() WHERE endpoint_id = \(endpoint)")
            return taken.count
        }
    }

    public struct Due: Sendable {
        public var entryId: Int64
        public var eventKey: String
        public var eventType: String
        public var attempts: Int
        /// Attempts since the retry window opened (`first_attempt_at`): a resend opens a new window,
        /// and the backoff starts again from its first step.
        public var windowAttempts: Int
        public var firstAttemptMs: Int64?
        public var payload: Result<[UInt8], OutboxEventUnreadable>

        /// What follows a failed attempt made from `startedMs` to `endedMs`: the backoff counts this
        /// retry window's attempts only (a resend starts again at the first step), the window from
        /// its first attempt.
        public func afterFailure(_ policy: WebhookRetryPolicy, startedMs: Int64, endedMs: Int64) -> WebhookRetryPolicy.Decision {
            policy.afterFailure(attempts: windowAttempts + 1, firstAttemptMs: firstAttemptMs ?? startedMs, nowMs: endedMs)
        }
    }

    /// The oldest pending delivery of each user (per-user order: a later event waits for the earlier
    /// one), those due now, oldest first. The events are read for those only, not for every pending
    /// delivery of a long backlog.
    public func due(endpoint: String, nowMs: Int64, limit: Int = 50) throws -> [Due] {
        try db.query("""
            SELECT h.entry_id, h.event_key, h.event_type, h.attempts, h.first_ms, \(fragment: OutboxEvents.columns),
                   (SELECT count(*) FROM webhook_attempts a WHERE a.endpoint_id = \(endpoint) AND a.entry_id = h.entry_id
                        AND a.attempted_at >= h.first_attempt_at) AS window_attempts
            FROM (
                SELECT * FROM (
                    SELECT DISTINCT ON (event_key) entry_id, event_key, event_type, attempts, relay_seq, next_attempt_at, first_attempt_at,
                           (extract(epoch FROM first_attempt_at) * 1000)::bigint AS first_ms
                    FROM webhook_deliveries WHERE endpoint_id = \(endpoint) AND status = 'pending'
                    ORDER BY event_key, relay_seq) oldest
                WHERE oldest.next_attempt_at <= to_timestamp(\(nowMs)::double precision / 1000)
                ORDER BY oldest.relay_seq LIMIT \(limit)) h
            JOIN membership_outbox o ON o.event_key = h.event_key AND o.entry_id = h.entry_id
            \(fragment: OutboxEvents.ledgerJoin)
            ORDER BY h.relay_seq
            """).map { row in
            Due(entryId: try row.int64("entry_id"), eventKey: try row.string("event_key"), eventType: try row.string("event_type"),
                attempts: try row.int("attempts"), windowAttempts: try row.int("window_attempts"),
                firstAttemptMs: try row.decode("first_ms", as: Int64?.self),
                payload: try OutboxEvents.payload(row))
        }
    }

    public enum Outcome: Sendable {
        case delivered(status: Int)
        case failed(status: Int?, error: String, next: WebhookRetryPolicy.Decision)
    }

    /// Logs one attempt and moves the delivery on (delivered, retry at, or given up), together.
    public func record(endpoint: String, entryId: Int64, attempt: Int, atMs: Int64, durationMs: Int, outcome: Outcome) throws {
        try db.transaction { db in
            let at: SQL = "to_timestamp(\(atMs)::double precision / 1000)"
            switch outcome {
            case .delivered(let status):
                try db.execute("""
                    INSERT INTO webhook_attempts (endpoint_id, entry_id, attempt, attempted_at, http_status, duration_ms)
                    VALUES (\(endpoint), \(entryId), \(attempt), \(fragment: at), \(status), \(durationMs))
                    """)
                try db.execute("""
                    UPDATE webhook_deliveries SET status = 'delivered', attempts = \(attempt), last_status = \(status), last_error = NULL,
                        first_attempt_at = coalesce(first_attempt_at, \(fragment: at)), last_attempt_at = \(fragment: at),
                        delivered_at = \(fragment: at)
                    WHERE endpoint_id = \(endpoint) AND entry_id = \(entryId)
                    """)
            case .failed(let status, let error, let next):
                try db.execute("""
                    INSERT INTO webhook_attempts (endpoint_id, entry_id, attempt, attempted_at, http_status, error, duration_ms)
                    VALUES (\(endpoint), \(entryId), \(attempt), \(fragment: at), \(status), \(error), \(durationMs))
                    """)
                let (state, nextMs): (String, Int64) = switch next {
                case .retry(let atMs): ("pending", atMs)
                case .giveUp: ("gave_up", atMs)
                }
                try db.execute("""
                    UPDATE webhook_deliveries SET status = \(state), attempts = \(attempt), last_status = \(status), last_error = \(error),
                        first_attempt_at = coalesce(first_attempt_at, \(fragment: at)), last_attempt_at = \(fragment: at),
                        next_attempt_at = to_timestamp(\(nextMs)::double precision / 1000)
                    WHERE endpoint_id = \(endpoint) AND entry_id = \(entryId)
                    """)
            }
        }
    }

    /// Sends an event again (an operator's `webhooks resend`): pending now, with a fresh retry window.
    public func resend(endpoint: String, entryId: Int64) throws -> Bool {
        try db.execute("""
            UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now(), first_attempt_at = NULL
            WHERE endpoint_id = \(endpoint) AND entry_id = \(entryId)
            """) == 1
    }

    public struct Summary: Codable, Sendable {
        public var endpoint: String
        public var cursor: Int64
        public var pending: Int
        public var delivered: Int
        public var gaveUp: Int
        public var attempts: Int
        public var oldestPendingEntryId: Int64?
    }

    public func summaries() throws -> [Summary] {
        try db.query("""
            SELECT c.endpoint_id, c.last_seq,
                   count(d.entry_id) FILTER (WHERE d.status = 'pending') AS pending,
                   count(d.entry_id) FILTER (WHERE d.status = 'delivered') AS delivered,
                   count(d.entry_id) FILTER (WHERE d.status = 'gave_up') AS gave_up,
                   coalesce(sum(d.attempts), 0)::bigint AS attempts,
                   min(d.entry_id) FILTER (WHERE d.status = 'pending') AS oldest
            FROM webhook_cursors c LEFT JOIN webhook_deliveries d ON d.endpoint_id = c.endpoint_id
            GROUP BY c.endpoint_id, c.last_seq ORDER BY c.endpoint_id
            """).map { row in
            Summary(endpoint: try row.string("endpoint_id"), cursor: try row.int64("last_seq"), pending: try row.int("pending"),
                    delivered: try row.int("delivered"), gaveUp: try row.int("gave_up"), attempts: try row.int("attempts"),
                    oldestPendingEntryId: try row.decode("oldest", as: Int64?.self))
        }
    }

    public struct Attempt: Codable, Sendable, Equatable {
        public var entryId: Int64
        public var eventType: String
        public var attempt: Int
        public var attemptedAt: String
        public var httpStatus: Int?
        public var error: String?
        public var durationMs: Int
        public var deliveryStatus: String
    }

    /// The delivery log of one endpoint (optionally one event), oldest first, `limit` attempts after
    /// the first `offset` (pages for a reader that wants every attempt).
    public func log(endpoint: String, entryId: Int64? = nil, limit: Int = 1_000, offset: Int = 0, newestFirst: Bool = false) throws -> [Attempt] {
        var sql: SQL = """
            SELECT a.entry_id, d.event_type, a.attempt, to_char(a.attempted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at,
                   a.http_status, a.error, a.duration_ms, d.status
            FROM webhook_attempts a JOIN webhook_deliveries d ON d.endpoint_id = a.endpoint_id AND d.entry_id = a.entry_id
            WHERE a.endpoint_id = \(endpoint)
            """
        if let entryId { sql.append(" AND a.entry_id = \(entryId)") }
        sql.append(newestFirst ? " ORDER BY a.attempted_at DESC, a.entry_id DESC, a.attempt DESC" : " ORDER BY a.attempted_at, a.entry_id, a.attempt")
        sql.append(" LIMIT \(limit) OFFSET \(offset)")
        return try db.query(sql).map { row in
            Attempt(entryId: try row.int64("entry_id"), eventType: try row.string("event_type"), attempt: try row.int("attempt"),
                    attemptedAt: try row.string("at"), httpStatus: try row.decode("http_status", as: Int?.self),
                    error: try row.decode("error", as: String?.self), durationMs: try row.int("duration_ms"),
                    deliveryStatus: try row.string("status"))
        }
    }
}
