import AppStoreServerAPI
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Stages
import Store
import Synchronization
import TestSupport
import XCTest

/// Consumption answers against PostgreSQL: an answer Apple has is recorded the moment it was sent,
/// so a batch held for a later request (rolled back, tried again) sends nothing twice; a request
/// older than Apple's 12 hours is recorded `expired` and not sent.
final class ConsumptionAnswerLogTests: PGTestCase {
    private func request(_ id: String, askedAgoMs: Int64) -> KafkaRecord {
        let now = currentTimeMs()
        let transaction = TransactionFacts(transactionId: "t-\(id)", originalTransactionId: "o-\(id)", productId: "coins.100",
                                           purchaseDateMs: now - 86_400_000)
        let event = AppleEvent(eventId: "v2:\(id)", source: .notificationV2, environment: "Sandbox", bundleId: "com.example",
                               subscriptionKey: "o-\(id)@Sandbox",
                               notification: NotificationMeta(type: "CONSUMPTION_REQUEST", uuid: "u-\(id)", signedDateMs: now - askedAgoMs),
                               transactions: [transaction], receivedAtMs: now - askedAgoMs)
        return KafkaRecord(topic: Topic.decoded, partition: 0, offset: 0, key: Array("o-\(id)@Sandbox".utf8),
                           value: TopicRecords.encode(event), headers: [], timestamp: 0)
    }

    func testAHeldBatchNeverSendsAnAnswerTwiceAndALateRequestIsNotSent() throws {
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        defer { db.close() }
        let sent = Mutex<[String]>([])
        let appleDown = Atomic<Bool>(true)
        let stage = ConsumptionStage(policy: ConsumptionPolicy(), databaseURL: url) { transactionId, _, _ in
            if transactionId == "t-b", appleDown.load(ordering: .relaxed) {
                return .failure(APIFailure(.retryable, "App Store Server API failed", httpStatus: 503))
            }
            sent.withLock { $0.append(transactionId) }
            return .success(())
        }
        let batch = [request("a", askedAgoMs: 60_000), request("b", askedAgoMs: 60_000), request("late", askedAgoMs: 13 * 3_600_000)]
        for _ in 0..<3 {
            try db.begin()
            XCTAssertThrowsError(try stage.process(batch, database: db), "B's outage holds the batch")
            try db.rollback()
        }
        XCTAssertEqual(sent.withLock { $0 }, ["t-a"], "A was sent once, though its batch was tried three times")
        appleDown.store(false, ordering: .relaxed)
        try db.begin()
        _ = try stage.process(batch, database: db)
        try db.commit()
        XCTAssertEqual(sent.withLock { $0 }, ["t-a", "t-b"], "B once Apple answers; the late request never")
        let outcomes = Dictionary(uniqueKeysWithValues: try db.query("SELECT transaction_id, outcome FROM consumption_answers")
            .map { (try $0.string("transaction_id"), try $0.string("outcome")) })
        XCTAssertEqual(outcomes, ["t-a": "sent", "t-b": "sent", "t-late": "expired"])
    }
}
