import Domain
import Foundation
import Kafka
import Postgres
import Stages
import Store
import TestSupport
import XCTest

/// Contract: the relay's prune deletes the outbox rows published longer ago than the retention, with
/// their finished webhook deliveries and attempts, and keeps every row something still needs: not yet
/// published, a delivery pending, an endpoint that has not taken it yet while that endpoint is alive.
/// Against a real PostgreSQL.
final class OutboxPruneTests: PGTestCase {
    private let week: Int64 = 7 * 86_400

    private func outboxRow(_ db: PGConnection, seq: Int64) throws {
        try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, relay_seq, kafka_partition)
            VALUES (\("u-\(seq)"), \(seq * 10), 's', 'membership.granted', '{}', \(seq), 0)
            """)
    }

    /// Publishes `seqs` (the relay's mark and watermark), then dates their publication `days` back.
    private func publish(_ db: PGConnection, _ seqs: [Int64], daysAgo days: Int) throws {
        try OutboxStore(db).markPublished(seqs)
        try db.execute("UPDATE membership_outbox SET published_at = now() - make_interval(days => \(days)::integer) WHERE relay_seq = ANY(\(seqs))")
    }

    /// A session as the relay opens it: generic plans, index scans only.
    private func relaySession() throws -> PGConnection {
        let db = try PGConnection(url: try migratedDatabaseURL(), options: .keyed)
        try OutboxStore(db).preferIndexScans()
        return db
    }

    private func seqs(_ db: PGConnection) throws -> [Int64] {
        try db.query("SELECT relay_seq FROM membership_outbox ORDER BY relay_seq").map { try $0.int64("relay_seq") }
    }

    func testPublishedRowsPastTheRetentionGoWithTheirFinishedDeliveriesAndAttempts() throws {
        let db = try relaySession()
        defer { db.close() }
        for seq in Int64(1)...6 { try outboxRow(db, seq: seq) }
        let webhooks = WebhookStore(db)
        XCTAssertEqual(try webhooks.enqueue(endpoint: "crm", start: .beginning), 6)
        let now = try db.query("SELECT (extract(epoch FROM now()) * 1000)::bigint AS ms").first!.int64("ms")
        let longAgo = now - 8 * 86_400_000
        // 10 delivered at the second attempt and 20 given up, both eight days ago; 30 still to retry;
        // 40 given up yesterday (resendable for the retention).
        try webhooks.record(endpoint: "crm", entryId: 10, attempt: 1, atMs: longAgo, durationMs: 1,
                            outcome: .failed(status: 500, error: "HTTP 500", next: .retry(atMs: longAgo)))
        try webhooks.record(endpoint: "crm", entryId: 10, attempt: 2, atMs: longAgo, durationMs: 1, outcome: .delivered(status: 204))
        try webhooks.record(endpoint: "crm", entryId: 20, attempt: 1, atMs: longAgo, durationMs: 1,
                            outcome: .failed(status: nil, error: "timeout", next: .giveUp))
        try webhooks.record(endpoint: "crm", entryId: 30, attempt: 1, atMs: longAgo, durationMs: 1,
                            outcome: .failed(status: 503, error: "HTTP 503", next: .retry(atMs: now + 60_000)))
        try webhooks.record(endpoint: "crm", entryId: 40, attempt: 1, atMs: now - 86_400_000, durationMs: 1,
                            outcome: .failed(status: 410, error: "HTTP 410", next: .giveUp))
        try publish(db, [1, 2, 3, 4], daysAgo: 9)
        try publish(db, [5], daysAgo: 1)   // 6 stays unpublished

        let pruned = try OutboxStore(db).prune(retentionSeconds: week, limit: 100)
        XCTAssertEqual(pruned, OutboxStore.Pruned(outboxRows: 2, deliveries: 2, attempts: 3))
        XCTAssertEqual(try seqs(db), [3, 4, 5, 6], "3's delivery is pending, 4 was tried yesterday, 5 is young, 6 is not published")
        let deliveries = try db.query("SELECT entry_id FROM webhook_deliveries ORDER BY entry_id").map { try $0.int64("entry_id") }
        XCTAssertEqual(deliveries, [30, 40, 50, 60])
        XCTAssertEqual(try webhooks.log(endpoint: "crm").map(\.entryId), [30, 40], "the deleted deliveries' attempts went with them")
        XCTAssertFalse(try webhooks.resend(endpoint: "crm", entryId: 10), "a deleted delivery cannot be resent")
        XCTAssertEqual(try webhooks.due(endpoint: "crm", nowMs: now + 120_000).map(\.entryId), [30, 50, 60],
                       "what is pending still goes out, with its payload")
        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: week, limit: 100), OutboxStore.Pruned(), "nothing more is old enough")

        // Once 30 is delivered (long ago, for the test) its row goes too; the watermark is untouched.
        try webhooks.record(endpoint: "crm", entryId: 30, attempt: 2, atMs: longAgo, durationMs: 1, outcome: .delivered(status: 200))
        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: week, limit: 100).outboxRows, 1)
        XCTAssertEqual(try seqs(db), [4, 5, 6])
        XCTAssertEqual(try OutboxStore(db).ordered(limit: 10).map(\.relaySeq), [6])
    }

    /// Rows a live endpoint still needs do not stop the walk: the next prune goes on after them. An
    /// endpoint idle for longer than the retention holds nothing, not even its pending deliveries.
    func testHeldRowsAreWalkedPastAndAnIdleEndpointHoldsNothing() throws {
        let db = try relaySession()
        defer { db.close() }
        for seq in Int64(1)...5 { try outboxRow(db, seq: seq) }
        XCTAssertEqual(try WebhookStore(db).enqueue(endpoint: "old-crm", start: .beginning, limit: 4), 4, "1–4 pending, 5 not taken")
        try publish(db, [1, 2, 3, 4, 5], daysAgo: 9)
        try db.execute("UPDATE webhook_cursors SET last_seq = 5")   // as if it had taken 5 and delivered it
        let store = OutboxStore(db)

        let first = try store.prune(retentionSeconds: week, limit: 2)
        XCTAssertEqual(first, OutboxStore.Pruned(walkedTo: 2), "1 and 2 are pending: nothing deleted, the walk goes on after 2")
        let second = try store.prune(retentionSeconds: week, after: 2, limit: 2)
        XCTAssertEqual(second, OutboxStore.Pruned(walkedTo: 4))
        XCTAssertEqual(try store.prune(retentionSeconds: week, after: 4, limit: 2), OutboxStore.Pruned(outboxRows: 1),
                       "5 has no delivery; the walk reached the end")
        XCTAssertEqual(try seqs(db), [1, 2, 3, 4])

        // The endpoint was renamed: its deliverer takes nothing any more.
        try db.execute("UPDATE webhook_cursors SET updated_at = now() - make_interval(days => 8)")
        XCTAssertEqual(try store.prune(retentionSeconds: week, limit: 100), OutboxStore.Pruned(outboxRows: 4, deliveries: 4))
        XCTAssertEqual(try seqs(db), [])
    }

    func testAnEndpointHoldsBackWhatItHasNotTakenWhileItIsAliveAndAPruneDeletesAtMostItsLimit() throws {
        let db = try relaySession()
        defer { db.close() }
        for seq in Int64(1)...2 { try outboxRow(db, seq: seq) }
        let webhooks = WebhookStore(db)
        XCTAssertEqual(try webhooks.enqueue(endpoint: "crm"), 0, "a new endpoint starts after row 2")
        for seq in Int64(3)...6 { try outboxRow(db, seq: seq) }
        try publish(db, [1, 2, 3, 4, 5, 6], daysAgo: 30)

        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: week, limit: 100).outboxRows, 2, "rows 3–6 wait for crm's deliverer")
        XCTAssertEqual(try seqs(db), [3, 4, 5, 6])

        // The deliverer has taken nothing for longer than the retention: stopped or removed, it holds nothing back.
        try db.execute("UPDATE webhook_cursors SET updated_at = now() - make_interval(days => 8)")
        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: week, limit: 3).outboxRows, 3, "at most `limit` rows per prune")
        XCTAssertEqual(try seqs(db), [6])
        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: 40 * 86_400, limit: 100).outboxRows, 0, "a longer retention keeps it")
        XCTAssertEqual(try OutboxStore(db).prune(retentionSeconds: week, limit: 100).outboxRows, 1)
        XCTAssertEqual(try seqs(db), [])
        XCTAssertEqual(try webhooks.enqueue(endpoint: "crm"), 0, "the endpoint comes back to nothing missing from its cursor on")
    }

    /// The running relay prunes once it has caught up: publishing goes first, the old rows go after.
    func testTheRelayPrunesOnceItHasCaughtUp() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        try broker.createTopic(Topic.membershipEvents, partitions: 2)
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        for seq in Int64(1)...3 { try outboxRow(db, seq: seq) }
        try publish(db, [1, 2, 3], daysAgo: 8)
        _ = try db.query("SELECT setval('membership_relay_seq', 3)")   // as if the relay had ordered 1–3
        try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload)
            VALUES ('u-new', 40, 's', 'membership.granted', '{}')
            """)
        var config = OutboxRelayConfig(kafka: KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "outbox-prune-test"),
                                       databaseURL: url)
        config.retention = .seconds(week)
        let relay = ServiceThread(OutboxRelay(config: config))
        defer { relay.stop() }
        let deadline = Date().addingTimeInterval(60)
        var rows: [(entry: Int64, published: Bool)] = []
        while Date() < deadline {
            rows = try db.query("SELECT entry_id, published_at IS NOT NULL AS published FROM membership_outbox ORDER BY entry_id")
                .map { (try $0.int64("entry_id"), try $0.bool("published")) }
            if rows.count == 1, rows[0].published { break }
            if let failure = relay.failure { return XCTFail("the relay stopped: \(failure)") }
            Thread.sleep(forTimeInterval: 0.2)
        }
        XCTAssertEqual(rows.map(\.entry), [40], "the rows published eight days ago are gone")
        XCTAssertEqual(rows.map(\.published), [true], "the new row was published")
    }
}
