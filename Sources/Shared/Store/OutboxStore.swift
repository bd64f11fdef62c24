import Postgres

/// The relay's side of `membership_outbox` (migration 6): it orders unpublished rows (a `relay_seq`
/// and a partition each), publishes them in that order and marks them published.
public struct OutboxStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// The published watermark (0 without its row): every ordered row at or below it is published.
    static let publishedThrough: SQL = "coalesce((SELECT published_through FROM membership_relay_progress WHERE singleton), 0)"

    /// Arbitrary, fixed: the advisory lock that makes one relay the active one.
    static let relayLockKey: Int64 = 0x5354_4C45_0017

    /// Takes the relay's session lock if free (true); it lasts as long as this connection.
    public func tryTakeRelayLock() throws -> Bool {
        try db.query("SELECT pg_try_advisory_lock(\(Self.relayLockKey)) AS held").first?.bool("held") == true
    }

    /// Makes this session read the outbox through plain index scans. Ordering a row updates it out
    /// of the partial index `membership_outbox_unordered`, but its old entry stays there until
    /// VACUUM; a bitmap scan visits every such entry's heap page on every round (measured at 500
    /// events/s: 7,358 entries for 18 live rows, 7.6 ms per read, growing until autovacuum), while a
    /// plain index scan marks the dead entries once (LP_DEAD) and skips them afterwards (0.3 ms).
    public func preferIndexScans() throws {
        try db.execute("SET enable_bitmapscan = off")
    }

    /// An outbox row's key.
    public struct Key: Sendable, Equatable {
        public var eventKey: String
        public var entryId: Int64
    }

    /// The relay's order for one row: its sequence number and Kafka partition.
    public struct Assignment: BulkRow {
        public var eventKey: String
        public var entryId: Int64
        public var relaySeq: Int64
        public var partition: Int32

        public init(eventKey: String, entryId: Int64, relaySeq: Int64, partition: Int32) {
            self.eventKey = eventKey
            self.entryId = entryId
            self.relaySeq = relaySeq
            self.partition = partition
        }

        static let columns: [BulkColumn<Self>] = [
            .text("event_key") { $0.eventKey },
            .bigint("entry_id") { $0.entryId },
            .bigint("relay_seq") { $0.relaySeq },
            .integer("kafka_partition") { Int($0.partition) },
        ]
    }

    /// An ordered row ready to publish.
    public struct Ordered: Sendable {
        public var eventKey: String
        public var relaySeq: Int64
        public var partition: Int32
        public var eventType: String
        public var payload: Result<[UInt8], OutboxEventUnreadable>
    }

    /// Unordered rows (never published: a row is ordered first) in ledger entry order.
    public func unordered(limit: Int) throws -> [Key] {
        try db.query("""
            SELECT event_key, entry_id FROM membership_outbox
            WHERE relay_seq IS NULL ORDER BY entry_id LIMIT \(limit)
            """).map { Key(eventKey: try $0.string("event_key"), entryId: try $0.int64("entry_id")) }
    }

    /// `count` fresh relay sequence numbers, ascending.
    public func nextRelaySeqs(_ count: Int) throws -> [Int64] {
        try db.query("SELECT nextval('membership_relay_seq') AS s FROM generate_series(1, \(count))").map { try $0.int64("s") }.sorted()
    }

    /// Writes the relay's order (one statement).
    public func assign(_ assignments: [Assignment]) throws {
        guard !assignments.isEmpty else { return }
        typealias Rows = BulkRows<Assignment>
        try db.execute("""
            UPDATE membership_outbox o SET relay_seq = \(fragment: Rows.field("relay_seq", "t")), kafka_partition = \(fragment: Rows.field("kafka_partition", "t"))
            FROM \(fragment: BulkRows(assignments).recordset("t"))
            WHERE o.event_key = \(fragment: Rows.field("event_key", "t")) AND o.entry_id = \(fragment: Rows.field("entry_id", "t"))
            """)
    }

    /// Ordered, unpublished rows in `relay_seq` order, read from the published watermark on.
    public func ordered(limit: Int) throws -> [Ordered] {
        try db.query("""
            SELECT o.event_key, o.relay_seq, o.kafka_partition, \(fragment: OutboxEvents.columns)
            FROM membership_outbox o \(fragment: OutboxEvents.ledgerJoin)
            WHERE o.relay_seq > \(fragment: Self.publishedThrough) AND o.published_at IS NULL
            ORDER BY o.relay_seq LIMIT \(limit)
            """).map { row in
            Ordered(eventKey: try row.string("event_key"), relaySeq: try row.int64("relay_seq"), partition: try row.int32("kafka_partition"),
                    eventType: try row.string("outbox_event_type"), payload: try OutboxEvents.payload(row))
        }
    }

    /// Marks these rows published (the broker acknowledged every one) and moves the watermark up to
    /// the first ordered row still unpublished (or the last ordered row): it walks only the rows
    /// published since, whichever of them the caller marked. Without its row (deleted by hand) the
    /// reads start from 0, and the next mark writes it again.
    public func markPublished(_ seqs: [Int64]) throws {
        try db.transaction { db in
            try db.executeDeferred("UPDATE membership_outbox SET published_at = now() WHERE relay_seq = ANY(\(seqs)) AND published_at IS NULL")
            try OutboxStore(db).advanceWatermark()
        }
    }

    /// Moves the watermark up to the first ordered row still unpublished, or the last ordered row. Only
    /// the relay that holds the lock may call it, between its rounds: nothing is ordered meanwhile.
    public func advanceWatermark() throws {
        try db.executeDeferred("""
            INSERT INTO membership_relay_progress (published_through)
            SELECT coalesce(
                (SELECT min(relay_seq) - 1 FROM membership_outbox
                 WHERE relay_seq > \(fragment: Self.publishedThrough) AND published_at IS NULL),
                (SELECT max(relay_seq) FROM membership_outbox), 0)
            ON CONFLICT (singleton) DO UPDATE SET published_through = EXCLUDED.published_through
            """)
    }

    /// What one `prune` deleted, and how far its walk went.
    public struct Pruned: Sendable, Equatable {
        public var outboxRows = 0
        public var deliveries = 0
        public var attempts = 0
        /// The last row the walk read when it read `limit` rows, all old enough: the next prune goes on
        /// after it (rows still held stay behind). nil when the walk reached a younger row or the end.
        public var walkedTo: Int64?
        public init(outboxRows: Int = 0, deliveries: Int = 0, attempts: Int = 0, walkedTo: Int64? = nil) {
            self.outboxRows = outboxRows
            self.deliveries = deliveries
            self.attempts = attempts
            self.walkedTo = walkedTo
        }
    }

    /// Deletes, in one transaction, the rows among the next `limit` after `after` (in `relay_seq` order)
    /// published more than `retentionSeconds` ago, with their webhook deliveries and those deliveries'
    /// attempts. The membership events topic holds what was published; without this the outbox grows by
    /// a row per ledger change for ever. Kept, for a live endpoint (one whose deliverer took rows within
    /// the retention): a row it has not taken yet (beyond its cursor), a row whose delivery to it is
    /// pending, and a row with an attempt within the retention (a given-up delivery stays resendable that
    /// long). An endpoint idle for longer (removed, renamed or stopped) holds nothing back, and misses
    /// what was deleted meanwhile. Rows not yet published are never read: the walk stops at the first
    /// row too young, so it reads at most `limit` rows whatever the table's size. Endpoints taking rows
    /// wait for it (the cursors' lock; at most a second here, else this prune is skipped), so none takes
    /// a row as it goes; a resend waits for the delivery rows it locks, then finds none.
    public func prune(retentionSeconds: Int64, after: Int64 = 0, limit: Int) throws -> Pruned {
        try db.transaction { db in
            try db.execute("SET LOCAL lock_timeout = '1s'")
            try db.execute("LOCK TABLE webhook_cursors IN SHARE ROW EXCLUSIVE MODE")
            let retention: SQL = "make_interval(secs => \(retentionSeconds)::double precision)"
            let endpoints = try db.query("SELECT endpoint_id FROM webhook_cursors").map { try $0.string("endpoint_id") }
            let bound = try db.query("""
                SELECT least(\(fragment: Self.publishedThrough),
                             (SELECT min(last_seq) FROM webhook_cursors WHERE updated_at >= now() - \(fragment: retention))) AS bound
                """).first!.int64("bound")
            let walk = try db.query("""
                SELECT entry_id, relay_seq, coalesce(published_at < now() - \(fragment: retention), false) AS expired
                FROM membership_outbox WHERE relay_seq IS NOT NULL AND relay_seq > \(after) AND relay_seq <= \(bound)
                ORDER BY relay_seq LIMIT \(limit)
                """)
            var expired: [(entryId: Int64, relaySeq: Int64)] = []
            for row in walk {
                guard try row.bool("expired") else { break }
                expired.append((try row.int64("entry_id"), try row.int64("relay_seq")))
            }
            var pruned = Pruned(walkedTo: expired.count == limit ? expired.last?.relaySeq : nil)
            guard !expired.isEmpty else { return pruned }
            let held = Set(try db.query("""
                SELECT d.entry_id, (d.status = 'pending' OR coalesce(d.last_attempt_at >= now() - \(fragment: retention), false)) AS needed
                FROM webhook_deliveries d JOIN webhook_cursors c ON c.endpoint_id = d.endpoint_id
                WHERE d.endpoint_id = ANY(\(endpoints)) AND d.entry_id = ANY(\(expired.map(\.entryId))) AND c.updated_at >= now() - \(fragment: retention)
                ORDER BY d.endpoint_id, d.entry_id FOR UPDATE OF d
                """).filter { try $0.bool("needed") }.map { try $0.int64("entry_id") })
            let done = expired.filter { !held.contains($0.entryId) }
            guard !done.isEmpty else { return pruned }
            let ids = done.map(\.entryId)
            pruned.attempts = try db.execute("DELETE FROM webhook_attempts WHERE endpoint_id = ANY(\(endpoints)) AND entry_id = ANY(\(ids))")
            pruned.deliveries = try db.execute("DELETE FROM webhook_deliveries WHERE endpoint_id = ANY(\(endpoints)) AND entry_id = ANY(\(ids))")
            pruned.outboxRows = try db.execute("DELETE FROM membership_outbox WHERE relay_seq = ANY(\(done.map(\.relaySeq)))")
            return pruned
        }
    }

    /// Ordered rows not yet marked published, per partition: after a failure, what may or may not
    /// have reached the topic.
    public func unpublishedCounts() throws -> [Int32: Int] {
        var counts: [Int32: Int] = [:]
        for row in try db.query("""
            SELECT kafka_partition, count(*) AS n FROM membership_outbox
            WHERE relay_seq > \(fragment: Self.publishedThrough) AND published_at IS NULL AND kafka_partition IS NOT NULL
            GROUP BY kafka_partition
            """) {
            counts[try row.int32("kafka_partition")] = Int(try row.int64("n"))
        }
        return counts
    }
}
