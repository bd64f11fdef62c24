import Domain
import Foundation
import Kafka
import Runtime
import XCTest

/// Contract: limits are consistent end to end. A receipt upload of exactly ingest's body limit
/// (`KafkaLimits.maxValueBytes`) is accepted, fails decode, and is dead-lettered whole: value = the
/// original bytes, the original headers kept, provenance headers added (stage, source
/// topic/partition/offset, kind, message, attempts, failure times). One byte more is refused with
/// 413. Decode does not wedge: an ordinary notification posted behind it is granted.
final class DeadLetterLimitTests: XCTestCase {
    func testBodyAtTheLimitIsDeadLetteredWithProvenanceAndTheNextNotificationIsGranted() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }

        let body = Self.receiptUpload(totalBytes: KafkaLimits.maxValueBytes)
        XCTAssertEqual(body.count, KafkaLimits.maxValueBytes)
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/receipts", body: Self.receiptUpload(totalBytes: body.count + 1),
                                     timeout: 30).status, 413)
        let posted = currentTimeMs()
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/receipts", body: body, timeout: 30).status, 200)

        let key = "2000\(Int.random(in: 100_000...999_999))"
        let notification = try V1Bodies.initialBuy(originalTransactionId: key)
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: V1Bodies.data(notification)).status, 200)

        var letter: DeadLetterRecord?
        try waitUntil("the upload is dead-lettered", timeout: 60, interval: 0.5) {
            letter = try cluster.readTopic(Topic.deadLetter, atLeast: 1, timeout: 10)
                .compactMap(DeadLetterRecord.init)
                .first { $0.value.count == body.count }
            return letter != nil
        }
        let found = try XCTUnwrap(letter)
        XCTAssertEqual(found.value, [UInt8](body), "the original bytes, whole")
        XCTAssertEqual(found.stage, "decode")
        XCTAssertEqual(found.source.topic, Topic.receiptsRaw)
        XCTAssertGreaterThanOrEqual(found.sourceOffset, 0)
        XCTAssertFalse(found.kind.isEmpty)
        XCTAssertFalse(found.message.isEmpty)
        XCTAssertEqual(found.attempts, 1)
        XCTAssertGreaterThanOrEqual(found.firstFailureMs, posted - 1000)
        XCTAssertGreaterThanOrEqual(found.lastFailureMs, found.firstFailureMs)
        XCTAssertTrue(found.headers.contains { $0.name == RecordHeader.receivedAt }, "original headers kept")

        try waitUntil("the notification behind it is granted", timeout: 30, interval: 0.2) {
            let response = try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)")
            return response.status == 200 && ((response.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
    }

    /// `{"user_id": ..., "receipt_data": "<random base64>"}` of exactly `totalBytes` bytes.
    static func receiptUpload(totalBytes: Int) -> Data {
        let prefix = #"{"user_id":"limit-user","receipt_data":""#
        let suffix = #""}"#
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var generator = SystemRandomNumberGenerator()
        let count = totalBytes - prefix.utf8.count - suffix.utf8.count
        let data = (0..<count).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] }
        return Data(prefix.utf8) + Data(data) + Data(suffix.utf8)
    }
}
