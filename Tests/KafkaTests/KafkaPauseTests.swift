import Foundation
import Kafka
import XCTest

/// Contract (against librdkafka's mock cluster): a paused partition yields nothing while the other
/// keeps flowing and the consumer keeps polling; resuming continues exactly after the last record
/// `poll` returned (no gap, no duplicate); the member reports its assignment and counts rebalances.
final class KafkaPauseTests: XCTestCase {
    /// A broker of its own with a two-partition topic, the group timings both tests use, and a producer.
    private struct TwoPartitions {
        let broker: EmbeddedBroker
        let topic: String
        let config: KafkaConfig
        let producer: KafkaProducer

        init(_ prefix: String) throws {
            broker = try EmbeddedBroker()
            topic = "\(prefix)-\(UUID().uuidString.prefix(8))"
            try broker.createTopic(topic, partitions: 2)
            config = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "pause-tests",
                                 sessionTimeout: .milliseconds(3000), heartbeatInterval: .milliseconds(500),
                                 fetchMaxWait: .milliseconds(10))
            producer = try KafkaProducer(config: config)
        }

        func close() {
            producer.close()
            broker.close()
        }
    }

    func testPausedPartitionWaitsWhileTheOtherFlowsAndResumesWithoutGapOrDuplicate() throws {
        let setup = try TwoPartitions("pause")
        defer { setup.close() }
        let (topic, config, producer) = (setup.topic, setup.config, setup.producer)
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

    /// A partition paused before a rebalance comes back unpaused when it is assigned again: the loop
    /// starts every new assignment unpaused, so one left paused inside librdkafka was never read again
    /// (a chaos run's decode and classify groups stalled so, their lag constant).
    func testAPartitionPausedBeforeARebalanceIsReadAfterItIsAssignedAgain() throws {
        let setup = try TwoPartitions("repause")
        defer { setup.close() }
        let (topic, config, producer) = (setup.topic, setup.config, setup.producer)
        for partition in Int32(0)...1 {
            _ = try producer.sendAndWait(topic: topic, key: nil, value: Array("\(partition)".utf8), partition: partition, timeout: .seconds(10))
        }
        let group = "repause-\(UUID().uuidString)"
        let consumer = try KafkaConsumer(config: config, groupId: group, topics: [topic])
        defer { consumer.close() }
        let both: Set = [PartitionID(topic: topic, partition: 0), PartitionID(topic: topic, partition: 1)]
        func poll(until condition: () -> Bool, _ what: String) throws {
            let deadline = Date().addingTimeInterval(30)
            while !condition(), Date() < deadline { _ = try consumer.poll(maxRecords: 10, timeout: .milliseconds(100)) }
            XCTAssertTrue(condition(), what)
        }
        try poll(until: { Set(consumer.assignment) == both }, "the first member holds both partitions")
        try consumer.pause(Array(both))
        let generation = consumer.rebalanceGeneration

        // A second member joins and leaves: two rebalances, after which the first holds both again.
        let other = try KafkaConsumer(config: config, groupId: group, topics: [topic])
        let joined = Date().addingTimeInterval(30)
        while Set(consumer.assignment) == both, Date() < joined {
            _ = try consumer.poll(maxRecords: 10, timeout: .milliseconds(100))
            _ = try other.poll(maxRecords: 10, timeout: .milliseconds(100))
        }
        XCTAssertNotEqual(Set(consumer.assignment), both, "the second member took a partition")
        other.close()
        try poll(until: { Set(consumer.assignment) == both && consumer.rebalanceGeneration > generation + 2 },
                 "the first member holds both partitions again")

        // Nothing resumed them: records still arrive from both.
        for partition in Int32(0)...1 {
            _ = try producer.sendAndWait(topic: topic, key: nil, value: Array("after-\(partition)".utf8), partition: partition, timeout: .seconds(10))
        }
        var read: Set<Int32> = []
        let deadline = Date().addingTimeInterval(20)
        while read.count < 2, Date() < deadline {
            for record in try consumer.poll(maxRecords: 10, timeout: .milliseconds(100)) where String(decoding: record.value, as: UTF8.self).hasPrefix("after-") {
                read.insert(record.partition)
            }
        }
        XCTAssertEqual(read, [0, 1], "both partitions are read after they came back")
    }

    /// A paused partition is not fetched, so librdkafka's cached high watermark stands still while
    /// records keep arriving: lag counted from it froze during outages. Asked of the broker, it moves.
    func testLagOfAPausedPartitionFollowsTheBroker() throws {
        let setup = try TwoPartitions("lag")
        defer { setup.close() }
        let (topic, config, producer) = (setup.topic, setup.config, setup.producer)
        func send(_ count: Int) throws {
            for index in 0..<count {
                _ = try producer.sendAndWait(topic: topic, key: nil, value: Array("\(index)".utf8), partition: 0, timeout: .seconds(10))
            }
        }
        try send(5)
        let consumer = try KafkaConsumer(config: config, groupId: "lag-\(UUID().uuidString)", topics: [topic])
        defer { consumer.close() }
        let p0 = PartitionID(topic: topic, partition: 0)
        var read = 0
        let deadline = Date().addingTimeInterval(30)
        while read < 5, Date() < deadline { read += try consumer.poll(maxRecords: 10, timeout: .milliseconds(200)).count }
        XCTAssertEqual(read, 5)
        try consumer.pause([p0])
        _ = try consumer.poll(maxRecords: 10, timeout: .milliseconds(300))
        try send(7)
        for _ in 0..<5 { _ = try consumer.poll(maxRecords: 10, timeout: .milliseconds(100)) }
        let committed = [p0: Int64(5)]
        XCTAssertEqual(consumer.lag(of: [p0], committed: committed)[p0], 0, "the cached watermark did not move while paused")
        let queried = consumer.queryHighWatermarks([p0], timeout: .seconds(5))
        XCTAssertEqual(queried[p0], 12)
        XCTAssertEqual(consumer.lag(of: [p0], committed: committed, queried: queried)[p0], 7)
    }

    /// The loop drops its queue on every rebalance, right only for the eager protocol: a consumer
    /// configured for cooperative assignment refuses to start rather than skip records.
    func testACooperativeAssignorIsRefused() throws {
        var config = KafkaConfig(bootstrapServers: "127.0.0.1:1", clientId: "cooperative-test")
        config.extra["partition.assignment.strategy"] = "cooperative-sticky"
        XCTAssertThrowsError(try KafkaConsumer(config: config, groupId: "g", topics: ["t"])) { error in
            XCTAssertTrue("\(error)".contains("cooperative"), "\(error)")
        }
    }
}
