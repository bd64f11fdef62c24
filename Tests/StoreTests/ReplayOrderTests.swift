import Kafka
@testable import Stages
import XCTest

/// A decode replay folds raw inputs in arrival order across partitions, but each partition in its
/// offset order whatever the producing hosts' clocks stamped (a refund stamped before the purchase
/// it follows, by a host whose clock lags, must still come after it).
final class ReplayOrderTests: XCTestCase {
    private func record(_ partition: Int32, _ offset: Int64, at timestamp: Int64, _ tag: String) -> KafkaRecord {
        KafkaRecord(topic: "raw", partition: partition, offset: offset, key: nil, value: Array(tag.utf8), headers: [], timestamp: timestamp)
    }

    func testEachPartitionKeepsItsOffsetOrderWhateverTheClocksSaid() {
        let records = [record(0, 1, at: 100, "purchase"), record(0, 2, at: 90, "refund"), record(1, 7, at: 95, "other"),
                       record(1, 8, at: 300, "later"), record(0, 2, at: 90, "refund, second event")]
        let order = ReplayEngine.arrivalOrder(records).map { String(decoding: $0.value, as: UTF8.self) }
        XCTAssertEqual(order, ["other", "purchase", "refund", "refund, second event", "later"])
    }
}
