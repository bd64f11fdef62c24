import Domain
import Foundation
import Kafka
import Postgres
@testable import Stages
import Store
import TestSupport
import XCTest

/// Contract: after a failure the outbox relay marks published exactly the rows whose records are on
/// the topic, never "everything up to the partition's last record": the idempotent producer may
/// leave a gap when messages time out (1, 2, 4, 5 written; 3 expired), and row 3 must go out again.
/// Against librdkafka's mock cluster in this process and a real PostgreSQL.
final class OutboxRecoveryTests: PGTestCase {
    func testRecoveryMarksExactlyTheRowsFoundOnTheTopic() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        try broker.createTopic(Topic.membershipEvents, partitions: 2)
        let kafka = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "outbox-recovery-test")
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        // Ordered, none marked: 1–5 in partition 0, 6–7 in partition 1.
        for seq in Int64(1)...7 {
            try db.execute("""
                INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, relay_seq, kafka_partition)
                VALUES (\("user-\(seq)"), \(seq), 'key', 'grant', '{}', \(seq), \(seq <= 5 ? 0 : 1))
                """)
        }
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        func land(_ seq: Int64, partition: Int32) throws {
            _ = try producer.sendAndWait(topic: Topic.membershipEvents, key: Array("user-\(seq)".utf8), value: Array("{}".utf8),
                                         headers: [KafkaHeader(name: RecordHeader.relaySequence, value: Array(String(seq).utf8))],
                                         partition: partition, timeout: .seconds(10))
        }
        for seq: Int64 in [1, 2, 4, 5] { try land(seq, partition: 0) }
        let relay = OutboxRelay(config: OutboxRelayConfig(kafka: kafka, databaseURL: url))
        func published() throws -> [Int64] {
            try db.query("SELECT relay_seq FROM membership_outbox WHERE published_at IS NOT NULL ORDER BY relay_seq").map { try $0.int64("relay_seq") }
        }

        try relay.recover(db)
        XCTAssertEqual(try published(), [1, 2, 4, 5], "3 did not land: it stays unmarked and goes out again")
        XCTAssertEqual(try OutboxStore(db).ordered(limit: 10).map(\.relaySeq), [3, 6, 7], "the next round sends what is left, in order")

        // 3 and 6 land later (the next round, cut short again): found behind rows already marked.
        try land(3, partition: 0)
        try land(6, partition: 1)
        try relay.recover(db)
        XCTAssertEqual(try published(), [1, 2, 3, 4, 5, 6])
        XCTAssertEqual(try OutboxStore(db).ordered(limit: 10).map(\.relaySeq), [7])
    }
}
