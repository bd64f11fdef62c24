import Domain
import Foundation
import Kafka
import Postgres
import Stages
import Store
import TestSupport
import XCTest

/// Outbox rows keep an event's details; the relay and the webhook deliverers read the event rebuilt
/// from them and its ledger row: the bytes the membership worker described, with rows written before
/// (a stored payload) read as they are, and a damaged row reported, not fatal.
final class OutboxEventTests: PGTestCase {
    private let day: Int64 = 86_400_000
    private let start: Int64 = 1_700_000_000_000
    private let recordedAtMs: Int64 = 1_796_000_000_123

    private func command(_ id: String, _ key: String, _ action: MembershipCommand.Action) -> MembershipCommand {
        MembershipCommand(commandId: id, subscriptionKey: key, action: action, reason: "\(id): \"quoted\" / ünïcode",
                          cause: Cause(source: .notificationV2, eventId: "v2:\(id)", notificationType: "SUBSCRIBED",
                                       notificationSubtype: id == "c1" ? "INITIAL_BUY" : nil, transactionId: "t-\(id)",
                                       decodedPosition: RecordPosition(topic: "decoded", partition: 1, offset: 7)))
    }

    private func grant(_ id: String, at: Int64, cut: Cut? = nil) -> PurchaseGrant {
        PurchaseGrant(purchaseId: id, transactionId: "t-\(id)", originalTransactionId: "o-\(id)", productId: "vip.month",
                      productKind: .autoRenewable, group: "vip", startMs: at, endMs: at + 30 * day, cut: cut,
                      finance: FinanceFlags(isTrial: true, offerType: 1), level: 1, environment: "Sandbox")
    }

    /// Writes what membership writes for `commands` (ledger and outbox rows) and, unless the relay is to,
    /// orders the outbox rows: the events expected, in entry order.
    private func write(_ commands: [MembershipCommand], _ db: PGConnection, order: Bool = true) throws -> [MembershipEvent] {
        let keys = Array(Set(commands.map(\.subscriptionKey))).sorted()
        let plan = MembershipPlan(commands, keys: keys, loaded: [], others: [])
        let store = MembershipStore(db)
        let ids = try store.reserveEntryIds(plan.described.count)
        try store.appendLedger(plan.ledgerRows(ids: ids))
        try store.appendOutbox(plan.outboxRows(ids: ids, nowMs: recordedAtMs))
        let events = plan.described.enumerated().compactMap { MembershipEvent($1, entryId: ids[$0], recordedAtMs: recordedAtMs) }
        guard order else { return events }
        let outbox = OutboxStore(db)
        let rows = try outbox.unordered(limit: 100)
        let seqs = try outbox.nextRelaySeqs(rows.count)
        try outbox.assign(zip(rows, seqs).map { OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 0) })
        return events
    }

    func testTheRelayAndWebhooksReadTheEventsMembershipDescribed() throws {
        let db = try migratedDatabase()
        let expected = try write([
            command("c1", "s-1", .purchase(grant("p1", at: start))),
            command("c2", "s-1", .linkUser(UserLink(userId: "u-1", via: UserLink.appAccountToken, claimedAtMs: start))),
            command("c3", "s-1", .purchase(grant("p1", at: start, cut: Cut(atMs: start + 10 * day, kind: .refund, appleReason: "1")))),
            command("c4", "s-2", .purchase(grant("p2", at: start + day))),
        ], db)
        XCTAssertGreaterThanOrEqual(expected.count, 4)
        let stored = try db.query("SELECT count(*) AS n FROM membership_outbox WHERE payload IS NULL AND details IS NOT NULL").first!.int("n")
        XCTAssertEqual(stored, expected.count, "new rows keep details, not a copy of the entry")

        let ordered = try OutboxStore(db).ordered(limit: 100)
        XCTAssertEqual(ordered.map(\.eventType), expected.map(\.type.rawValue))
        XCTAssertEqual(ordered.map(\.eventKey), expected.map(\.partitionKey))
        for (row, event) in zip(ordered, expected) {
            XCTAssertEqual(String(decoding: try row.payload.get(), as: UTF8.self), String(decoding: event.json, as: UTF8.self))
        }

        let webhooks = WebhookStore(db)
        XCTAssertEqual(try webhooks.enqueue(endpoint: "crm", start: .beginning), expected.count)
        let due = try webhooks.due(endpoint: "crm", nowMs: Int64(Date().timeIntervalSince1970 * 1000) + 1000)
        XCTAssertFalse(due.isEmpty)
        for delivery in due {
            let event = try XCTUnwrap(expected.first { $0.ledgerEntryId == delivery.entryId })
            XCTAssertEqual(try delivery.payload.get(), event.json, "a webhook body is the published event")
        }
    }

    func testRowsWrittenBeforeKeepTheirPayloadAndDamagedRowsAreReported() throws {
        let db = try migratedDatabase()
        let expected = try write([command("c1", "s-1", .purchase(grant("p1", at: start)))], db)
        let first = try XCTUnwrap(expected.first)
        try MembershipStore(db).appendOutbox([
            OutboxRow(eventKey: "u-old", entryId: 900, subscriptionKey: "s-old", eventType: "RENEWAL", payload: "{\"old\":true}"),
            OutboxRow(eventKey: "u-lost", entryId: 901, subscriptionKey: "s-lost", eventType: "RENEWAL",
                      details: MembershipEventDetails(first).bytes),
        ])
        // Its ledger row exists; its details are not an encoding of ours.
        try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, details)
            VALUES ('u-damaged', \(first.ledgerEntryId), \(first.subscriptionKey), 'RENEWAL', '\\x01ff'::bytea)
            """)
        XCTAssertThrowsError(try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type) VALUES ('u', 1, 's', 'RENEWAL')
            """), "a row holds its event one way or the other")
        let outbox = OutboxStore(db)
        let rows = try outbox.unordered(limit: 100)
        let seqs = try outbox.nextRelaySeqs(rows.count)
        try outbox.assign(zip(rows, seqs).map { OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 0) })

        let ordered = Dictionary(uniqueKeysWithValues: try outbox.ordered(limit: 100).map { ($0.eventKey, $0.payload) })
        XCTAssertEqual(Set(ordered.keys), [first.partitionKey, "u-old", "u-lost", "u-damaged"])
        XCTAssertEqual(try ordered[first.partitionKey]?.get(), first.json)
        XCTAssertEqual(try ordered["u-old"]?.get(), Array("{\"old\":true}".utf8), "a stored payload goes out as it is")
        guard case .failure(let lost) = ordered["u-lost"] else { return XCTFail("a row without its ledger row is unreadable") }
        XCTAssertTrue(lost.reason.contains("ledger row is missing"), lost.reason)
        guard case .failure(let damaged) = ordered["u-damaged"] else { return XCTFail("damaged details are unreadable") }
        XCTAssertTrue(damaged.reason.contains("details"), damaged.reason)
        XCTAssertFalse(lost.writtenByNewerRelease || damaged.writtenByNewerRelease, "nothing can publish these")
    }

    /// Details of a later version, or an event type this release does not know: a newer release wrote the
    /// row, and its relay publishes it; this release's must not take it for a damaged one and drop it.
    func testRowsOfANewerReleaseAreNotTakenForDamagedOnes() throws {
        let db = try migratedDatabase()
        let first = try XCTUnwrap(try write([command("c1", "s-1", .purchase(grant("p1", at: start)))], db).first)
        var later = MembershipEventDetails(first).bytes
        later[0] += 1
        try MembershipStore(db).appendOutbox([
            OutboxRow(eventKey: "u-later", entryId: first.ledgerEntryId, subscriptionKey: first.subscriptionKey, eventType: "RENEWAL",
                      details: later),
            OutboxRow(eventKey: "u-type", entryId: first.ledgerEntryId, subscriptionKey: first.subscriptionKey,
                      eventType: "SOMETHING_NEW", details: MembershipEventDetails(first).bytes),
        ])
        let outbox = OutboxStore(db)
        let rows = try outbox.unordered(limit: 100)
        try outbox.assign(zip(rows, try outbox.nextRelaySeqs(rows.count)).map {
            OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 0)
        })
        let ordered = Dictionary(uniqueKeysWithValues: try outbox.ordered(limit: 100).map { ($0.eventKey, $0.payload) })
        for key in ["u-later", "u-type"] {
            guard case .failure(let newer) = ordered[key] else { return XCTFail("\(key) is not readable here") }
            XCTAssertTrue(newer.writtenByNewerRelease, "\(key): \(newer.reason)")
        }
    }

    /// A running relay publishes the rebuilt bytes, passes over a row nothing can publish, and stops
    /// before a row a newer release wrote: it and the rows after it wait, unpublished.
    func testTheRelayPublishesRebuiltEventsAndWaitsForANewerRelease() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        try broker.createTopic(Topic.membershipEvents, partitions: 1)
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        let events = try write([
            command("c1", "s-1", .purchase(grant("p1", at: start))),
            command("c2", "s-2", .purchase(grant("p2", at: start + day))),
        ], db, order: false)
        XCTAssertEqual(events.count, 2)
        var later = MembershipEventDetails(events[0]).bytes
        later[0] += 1
        try MembershipStore(db).appendOutbox([
            OutboxRow(eventKey: "u-lost", entryId: 1_000, subscriptionKey: "s-lost", eventType: "RENEWAL",
                      details: MembershipEventDetails(events[0]).bytes),
            OutboxRow(eventKey: "u-later", entryId: 1_001, subscriptionKey: "s-1", eventType: "RENEWAL", details: later),
            OutboxRow(eventKey: "u-after", entryId: 1_002, subscriptionKey: "s-x", eventType: "RENEWAL", payload: "{\"after\":1}"),
        ])
        let config = OutboxRelayConfig(kafka: KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "outbox-event-test"),
                                       databaseURL: url)
        let relay = ServiceThread(OutboxRelay(config: config))
        defer { relay.stop() }
        func published() throws -> [Int64: Bool] {
            Dictionary(uniqueKeysWithValues: try db.query("SELECT entry_id, published_at IS NOT NULL AS p FROM membership_outbox")
                .map { (try $0.int64("entry_id"), try $0.bool("p")) })
        }
        let deadline = Date().addingTimeInterval(60)
        var marks: [Int64: Bool] = [:]
        while Date() < deadline {
            marks = try published()
            if marks[1_000] == true { break }
            if let failure = relay.failure { return XCTFail("the relay stopped: \(failure)") }
            Thread.sleep(forTimeInterval: 0.2)
        }
        Thread.sleep(forTimeInterval: 1.5)   // rounds after it: the rows behind the newer one stay put
        marks = try published()
        XCTAssertEqual(marks[events[0].ledgerEntryId], true)
        XCTAssertEqual(marks[events[1].ledgerEntryId], true)
        XCTAssertEqual(marks[1_000], true, "a row nothing can publish is passed over")
        XCTAssertEqual(marks[1_001], false, "a newer release's row waits for its relay")
        XCTAssertEqual(marks[1_002], false, "and so does every row after it")

        let landed = try PartitionTail.lastRecords(config: config.kafka, topic: Topic.membershipEvents, counts: [0: 10],
                                                   timeout: .seconds(20))
        XCTAssertEqual(landed[0]?.map(\.value), events.map(\.json), "exactly the rebuilt events, in order")
    }
}
