import Foundation
import Kafka
import XCTest

/// Contract (against librdkafka's mock cluster): a paused partition yields nothing while the other
/// keeps flowing and the consumer keeps polling; resuming continues exactly after the last record
/// `poll` returned (no gap, no duplicate); the member reports its assignment and counts rebalances.
final class KafkaPauseTests: XCTestCase {
    func testPausedPartitionWaitsWhileTheOtherFlowsAndResumesWithoutGapOrDuplicate() throws {
        let broker = try EmbeddedBroker()
        defer { broker.close() }
        let topic = "pause-\(UUID().uuidString.prefix(8))"
        try broker.createTopic(topic, partitions: 2)
        let config = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "pause-tests",
                                 sessionTimeout: .milliseconds(3000), heartbeatInterval: .milliseconds(500),
                                 fetchMaxWait: .milliseconds(10))
        let producer = try KafkaProducer(config: config)
        defer { producer.close() }
        for partition in Int32(0)...1 {
            for index in 0..<30 {
                _ = try producer.sendAndWait(topic: topic, key: nil, value: Array("\(partition)-\(index)".utf8),
                                             partition: partition, timeout: .seconds(10))
            }
        }
        let consumer = try KafkaConsumer(config: config, groupId: "pause-\(UUID().uuidString)", topics: [topic])
        defer { consumer.close() }
        let p0 = PartitionID(topic: topic, partition: 0)
        let p1 = PartitionID(topic: topic, partition: 1)

        var seen: [Int32: [Int64]] = [0: [], 1: []]
        func take(_ records: [KafkaRecord]) { for record in records { seen[record.partition, default: []].append(record.offset) } }
        let deadline = Date().addingTimeInterval(30)
        while seen[0]!.isEmpty, Date() < deadline { take(try consumer.poll(maxRecords: 3, timeout: .milliseconds(200))) }
        XCTAssertFalse(seen[0]!.isEmpty, "partition 0 delivered before the pause")
        XCTAssertEqual(consumer.assignment, [p0, p1])
        XCTAssertGreaterThan(consumer.rebalanceGeneration, 0)

        try consumer.pause([p0])
        let beforePause = seen[0]!.count
        var pausedPolls = 0
        let pausedUntil = Date().addingTimeInterval(1.5)
        while Date() < pausedUntil {
            let records = try consumer.poll(maxRecords: 5, timeout: .milliseconds(100))
            XCTAssertFalse(records.contains { $0.partition == 0 }, "nothing from a paused partition")
            take(records)
            pausedPolls += 1
        }
        XCTAssertEqual(seen[0]!.count, beforePause)
        XCTAssertEqual(seen[1]!.count, 30, "the other partition flowed meanwhile")
        XCTAssertGreaterThan(pausedPolls, 5)

        try consumer.resume([p0])
        let resumeDeadline = Date().addingTimeInterval(20)
        while seen[0]!.count < 30, Date() < resumeDeadline { take(try consumer.poll(maxRecords: 5, timeout: .milliseconds(200))) }
        XCTAssertEqual(seen[0]!, Array(0..<30), "resumed exactly after the last polled record")
    }
}
