import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
import Synchronization

public struct OutboxRelayConfig: Sendable {
    public var kafka: KafkaConfig
    public var databaseURL: String
    public var topic = Topic.membershipEvents
    /// Rows published per round (one PostgreSQL transaction to order them, one to mark them).
    public var batch = 1_000
    /// How long a relay that has caught up (its last round was not full) waits before looking
    /// again. A round costs seven statements whatever its size, so at a moderate rate looking again
    /// at once meant a round per one or two rows (the relay's PostgreSQL backend then cost half as
    /// much as membership's); waiting lets rows gather. Events reach their topic up to this much
    /// later; the ledger itself is not delayed.
    public var idleWait: Duration = .milliseconds(50)
    /// Wait after taking over before reading the topic's tail: produce requests a killed predecessor
    /// had already written to its socket may still be landing on the broker. At least the producer's
    /// delivery timeout plus a second is waited in any case: a predecessor still alive whose database
    /// session was lost (which freed the lock) keeps retrying its round's records that long.
    public var settle: Duration = .seconds(1)
    /// Test-only failpoint: when this file exists, the relay removes it and SIGKILLs itself after the
    /// broker acknowledged a round and before marking it published (the window recovery covers).
    public var crashAfterPublishFlag: String?
    /// How long a published row stays in the outbox (`OutboxStore.prune`); nil keeps every row.
    public var retention: Duration? = .seconds(7 * 86_400)
    /// Rows one prune reads at most (one short transaction), and how often a relay that has caught up
    /// prunes; a walk that read that many old rows is followed by another at the next idle round.
    public var pruneBatch = 5_000
    public var pruneInterval: Duration = .seconds(60)

    public init(kafka: KafkaConfig, databaseURL: String) {
        self.kafka = kafka
        self.databaseURL = databaseURL
    }
}

/// Publishes the membership outbox to `storeledger.membership.events`, exactly once per row.
///
/// One relay is active at a time (a PostgreSQL advisory lock; standbys wait for it). Each round it
/// gives the new rows their publication order (`relay_seq`, in ledger entry order, which is per-user
/// commit order) and partition (Kafka's murmur2 of the key), publishes the ordered rows with the
/// idempotent producer and marks them published once the broker acknowledged them all. A crash or a
/// failed delivery between publishing and marking leaves rows that may be on the topic already: on
/// taking over (and after a failed round) the relay reads as many of each partition's last records as
/// the partition has rows unmarked, and marks exactly the `relay_seq`s it finds there; the others are
/// published again. Not "everything up to the last one": the idempotent producer may leave a gap when
/// messages time out (1, 2, 4, 5 written; 3 expired), and that row must go out again.
// @unchecked: `run` is entered once, on the service thread; other threads read only `ready` (Atomic).
public final class OutboxRelay: Service, @unchecked Sendable {
    public let name = "relay"
    private let config: OutboxRelayConfig
    private let logger = Logger(component: "relay")
    private let ready = Atomic<Bool>(false)
    /// When the relay last logged that it stopped before a row a newer release wrote.
    private var newerReleaseWarned: ContinuousClock.Instant?
    public init(config: OutboxRelayConfig) { self.config = config }

    public var isReady: Bool { ready.load(ordering: .acquiring) }

    /// A lost PostgreSQL connection (a restart, a failover) ends the session, not the process:
    /// the advisory lock went with the connection, so the relay waits with backoff, takes the lock
    /// again (or waits for the relay that took it) and recovers from the topic's tail.
    public func run(until stop: StopSignal) throws -> Int32 {
        var backoff = Duration.milliseconds(200)
        while !stop.isStopped {
            do {
                return try session(until: stop)
            } catch let error as PGError where error.kind == .connection {
                ready.store(false, ordering: .releasing)
                logger.warning("relay_database_unavailable", ["error": .string(error.description), "retry_ms": .of(Int(backoff / .milliseconds(1)))])
                _ = stop.wait(timeout: backoff)
                backoff = min(backoff * 2, .seconds(5))
            }
        }
        return 0
    }

    private func session(until stop: StopSignal) throws -> Int32 {
        // The relay reads the outbox by index only: rows to order, rows from the published watermark.
        // The lock is held by the session that does the work: if that session is lost, so is the lock,
        // and this relay's next statement fails before another relay can order beside it.
        let db = try PGConnection(url: config.databaseURL, options: .keyed)
        defer { db.close() }
        while !stop.isStopped {
            if try OutboxStore(db).tryTakeRelayLock() { break }
            _ = stop.wait(timeout: .milliseconds(500))
        }
        guard !stop.isStopped else { return 0 }
        _ = stop.wait(timeout: max(config.settle, config.kafka.deliveryTimeout + .seconds(1)))
        try OutboxStore(db).preferIndexScans()
        let partitions = try partitionCount()
        var producer = try KafkaProducer(config: config.kafka)
        defer { producer.close() }
        try recover(db)
        ready.store(true, ordering: .releasing)
        logger.info("relay_started", ["partitions": .of(Int(partitions)), "topic": .string(config.topic)])
        var prunes = PruneSchedule()
        while !stop.isStopped {
            do {
                try order(db, partitions: partitions)
                let round = try publish(db, producer)
                guard round.rows < config.batch else { continue }
                if ContinuousClock.now >= prunes.next { try prune(db, &prunes) }
                _ = stop.wait(timeout: round.waitsForNewerRelease ? config.settle : config.idleWait)
            } catch let error as KafkaError {
                // What landed is unknown: start over from the topic's tail with a fresh producer.
                logger.warning("relay_publish_failed", ["error": .string(error.description)])
                ready.store(false, ordering: .releasing)
                producer.close()
                // As at takeover: a produce request the broker stalled on may still land after its
                // message timed out here; the tail is read only once it cannot.
                _ = stop.wait(timeout: max(config.settle, config.kafka.deliveryTimeout + .seconds(1)))
                producer = try KafkaProducer(config: config.kafka)
                try recover(db)
                ready.store(true, ordering: .releasing)
            }
        }
        return 0
    }

    /// Where the next prune starts and when. A prune that read a full walk goes on at the next idle
    /// round after the last row it read, past rows still held; one that reached a younger row starts
    /// again from the oldest a minute later (held rows may have been freed meanwhile).
    struct PruneSchedule {
        var next = ContinuousClock.now
        var after: Int64 = 0
    }

    /// Prunes published rows past the retention (when the relay has caught up, so publishing goes
    /// first). A failure is logged and tried again later: pruning is housekeeping, never a reason to
    /// stop publishing. A lost connection ends the session as ever.
    private func prune(_ db: PGConnection, _ schedule: inout PruneSchedule) throws {
        guard let retention = config.retention else { return schedule.next = .now + .seconds(86_400) }
        do {
            let pruned = try OutboxStore(db).prune(retentionSeconds: retention.components.seconds, after: schedule.after, limit: config.pruneBatch)
            if pruned.outboxRows > 0 {
                Metrics.shared.increment("storeledger_relay_pruned_total", by: Double(pruned.outboxRows))
                logger.info("relay_pruned", ["outbox_rows": .of(pruned.outboxRows), "webhook_deliveries": .of(pruned.deliveries),
                                             "webhook_attempts": .of(pruned.attempts)])
            }
            schedule = pruned.walkedTo.map { PruneSchedule(next: .now, after: $0) } ?? PruneSchedule(next: .now + config.pruneInterval)
        } catch let error as PGError where error.kind != .connection {
            logger.warning("relay_prune_failed", ["error": .string(error.description)])
            schedule = PruneSchedule(next: .now + config.pruneInterval)
        }
    }

    private func partitionCount() throws -> Int32 {
        let admin = try KafkaAdmin(config: config.kafka)
        guard let count = try admin.partitionCount(topic: config.topic, timeout: .seconds(30)), count > 0 else {
            throw StageError.configuration("topic \(config.topic) does not exist (storeledger topics creates it)")
        }
        return Int32(count)
    }

    /// Marks as published exactly the unmarked rows the topic holds. Nothing but the relay writes the
    /// topic, and every unmarked row went out after the rows already marked, so any of a partition's
    /// unmarked rows that landed is among that many last records of it (twice that many are read, in
    /// case a row landed twice).
    func recover(_ db: PGConnection) throws {
        let store = OutboxStore(db)
        let unmarked = try store.unpublishedCounts()
        let tails = try PartitionTail.lastRecords(config: config.kafka, topic: config.topic,
                                                  counts: unmarked.mapValues { $0 * 2 }, timeout: .seconds(30))
        let landed = tails.values.joined().compactMap { record -> Int64? in
            guard let header = record.headers.first(where: { $0.name == RecordHeader.relaySequence }) else { return nil }
            return Int64(String(decoding: header.value, as: UTF8.self))
        }
        // Also moves the watermark: rows marked here would otherwise stay above it, read again every round.
        try store.markPublished(landed)
        logger.info("relay_recovered", ["unmarked": .of(unmarked.values.reduce(0, +)), "found_on_topic": .of(landed.count)])
    }

    /// Gives unordered rows their `relay_seq` (ledger entry order) and partition, in one transaction.
    private func order(_ db: PGConnection, partitions: Int32) throws {
        try db.transaction { db in
            let store = OutboxStore(db)
            let rows = try store.unordered(limit: config.batch)
            guard !rows.isEmpty else { return }
            let seqs = try store.nextRelaySeqs(rows.count)
            try store.assign(rows.enumerated().map { index, row in
                OutboxStore.Assignment(eventKey: row.eventKey, entryId: row.entryId, relaySeq: seqs[index],
                                       partition: KafkaMurmur2.partition(key: Array(row.eventKey.utf8), count: partitions))
            })
        }
    }

    /// Publishes ordered, unpublished rows in `relay_seq` order and marks them once all are acknowledged.
    /// Stops before a row a newer release wrote (`OutboxEventUnreadable.writtenByNewerRelease`): that
    /// release's relay publishes it and the rows after it, in order; this one waits (`waitsForNewerRelease`).
    /// - Returns: how many rows it took (published or passed over), and whether it stopped before such a row.
    private func publish(_ db: PGConnection, _ producer: KafkaProducer) throws -> (rows: Int, waitsForNewerRelease: Bool) {
        var rows = try OutboxStore(db).ordered(limit: config.batch)
        let newer = rows.firstIndex { if case .failure(let unreadable) = $0.payload { unreadable.writtenByNewerRelease } else { false } }
        if let newer {
            if newerReleaseWarned.map({ ContinuousClock.now - $0 >= .seconds(60) }) ?? true {
                newerReleaseWarned = ContinuousClock.now
                logger.warning("relay_waiting_for_newer_release", ["relay_seq": .int(rows[newer].relaySeq)])
            }
            rows.removeSubrange(newer...)
        }
        guard !rows.isEmpty else { return (0, newer != nil) }
        let failures = Mutex<[KafkaError]>([])
        let group = DispatchGroup()
        var seqs: [Int64] = []
        var sent = 0
        for row in rows {
            let seq = row.relaySeq
            seqs.append(seq)
            let payload: [UInt8]
            switch row.payload {
            case .success(let bytes): payload = bytes
            case .failure(let unreadable):
                // Marked with the others: a row nothing can publish (its ledger row deleted, its details
                // damaged by hand) must not hold back every event behind it.
                logger.error("relay_event_unreadable", ["relay_seq": .int(seq), "error": .string(unreadable.reason)])
                Metrics.shared.increment("storeledger_relay_unreadable_total")
                continue
            }
            sent += 1
            let headers = [KafkaHeader(name: RecordHeader.relaySequence, value: Array(String(seq).utf8)),
                           KafkaHeader(name: RecordHeader.eventType, value: Array(row.eventType.utf8)),
                           KafkaHeader(name: RecordHeader.schema, value: Array(MembershipEvent.schemaId.utf8))]
            group.enter()
            producer.send(topic: config.topic, key: Array(row.eventKey.utf8), value: payload,
                          headers: headers, partition: row.partition) { result in
                if case .failure(let error) = result { failures.withLock { $0.append(error) } }
                group.leave()
            }
        }
        group.wait()
        if let failure = failures.withLock({ $0.first }) { throw failure }
        if let flag = config.crashAfterPublishFlag, (try? FileManager.default.removeItem(atPath: flag)) != nil {
            logger.warning("relay_failpoint_crash", ["published_unmarked": .of(rows.count)])
            kill(getpid(), SIGKILL)
        }
        try OutboxStore(db).markPublished(seqs)
        Metrics.shared.increment("storeledger_relay_published_total", by: Double(sent))
        return (rows.count, newer != nil)
    }
}
