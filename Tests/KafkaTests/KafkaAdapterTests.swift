import Foundation
@testable import Kafka
import CRdKafka
import Synchronization
import XCTest

/// Contract: the Kafka adapter, run against librdkafka's real mock cluster over loopback TCP
/// (an `EmbeddedBroker` per test), moves records with key, value and headers intact; a consumer
/// group resumes exactly after what was committed and redelivers what was not; the idempotent
/// producer (acks=all) confirms each record once; a write to a dead broker fails within the
/// configured delivery timeout instead of hanging; the forwarder port works as a bootstrap
/// address, also for another process (kcat); and keyed records always land on one partition.
/// These tests block threads on purpose (the adapter's calls are blocking by design).
final class KafkaAdapterTests: XCTestCase {
    /// Short group timings: the mock cluster delays each join/rebalance by about
    /// session.timeout.ms - 1000.
    private func config(_ broker: EmbeddedBroker, deliveryTimeout: Duration = .seconds(5)) -> KafkaConfig {
        KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "kafka-tests",
                    deliveryTimeout: deliveryTimeout,
                    sessionTimeout: .milliseconds(3000), heartbeatInterval: .milliseconds(500),
                    fetchMaxWait: .milliseconds(10),
                    extra: ["topic.metadata.refresh.interval.ms": "1000"])
    }

    private func uniqueName(_ prefix: String) -> String { "\(prefix)-\(UUID().uuidString.prefix(8))" }

    /// Polls until `count` records arrived or `limit` passed.
    private func consume(_ consumer: KafkaConsumer, count: Int, within limit: Duration = .seconds(20)) throws -> [KafkaRecord] {
        let deadline = ContinuousClock.now + limit
        var records: [KafkaRecord] = []
        while records.count < count, ContinuousClock.now < deadline {
            records += try consumer.poll(maxRecords: count - records.count, timeout: .milliseconds(200))
        }
        return records
    }

    func testRoundTripPreservesKeyValueAndHeaders() throws {
        let broker = try EmbeddedBroker()
        let topic = uniqueName("roundtrip")
        try broker.createTopic(topic, partitions: 3)
        let producer = try KafkaProducer(config: config(broker))
        let headers = [KafkaHeader(name: "source", value: Array("ingest".utf8)),
                       KafkaHeader(name: "attempt", value: [0, 1, 0xFF]),
                       KafkaHeader(name: "source", value: [])]
        let value: [UInt8] = Array(0...255) + Array("signedPayload".utf8)
        let report = try producer.sendAndWait(topic: topic, key: Array("txn-42".utf8), value: value,
                                              headers: headers, timeout: .seconds(10))
        let unkeyed = try producer.sendAndWait(topic: topic, key: nil, value: Array("second".utf8),
                                               partition: report.partition, timeout: .seconds(10))
        XCTAssertEqual(report.topic, topic)
        XCTAssertEqual(unkeyed.offset, report.offset + 1)

        let consumer = try KafkaConsumer(config: config(broker), groupId: uniqueName("g"), topics: [topic])
        let records = try consume(consumer, count: 2)
        XCTAssertEqual(records.count, 2)
        let first = try XCTUnwrap(records.first { $0.offset == report.offset && $0.partition == report.partition })
        XCTAssertEqual(first.topic, topic)
        XCTAssertEqual(first.key, Array("txn-42".utf8))
        XCTAssertEqual(first.value, value)
        XCTAssertEqual(first.headers, headers)
        XCTAssertLessThan(abs(first.timestamp - Int64(Date().timeIntervalSince1970 * 1000)), 60_000)
        let second = try XCTUnwrap(records.first { $0.offset == unkeyed.offset })
        XCTAssertNil(second.key)
        XCTAssertEqual(second.headers, [])
    }

    func testNewMemberResumesAfterCommittedOffsetAndGetsUncommittedAgain() throws {
        let broker = try EmbeddedBroker()
        let topic = uniqueName("resume")
        try broker.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(config: config(broker))
        for index in 0..<10 {
            _ = try producer.sendAndWait(topic: topic, key: nil, value: [UInt8(index)], timeout: .seconds(10))
        }
        let group = uniqueName("g")

        let first = try KafkaConsumer(config: config(broker), groupId: group, topics: [topic])
        let read = try consume(first, count: 10)
        XCTAssertEqual(read.map(\.offset), Array(0..<10))
        // Commit only the first four, out of order: the commit is max offset + 1 = 4.
        try first.commit([read[3], read[0], read[2]])
        XCTAssertEqual(try first.committedOffsets(topic: topic, partitions: [0], timeout: .seconds(5)), [0: 4])
        first.close()
        first.close() // idempotent

        let second = try KafkaConsumer(config: config(broker), groupId: group, topics: [topic])
        let again = try consume(second, count: 6)
        XCTAssertEqual(again.map(\.offset), Array(4..<10), "uncommitted records are redelivered, committed ones are not")
        XCTAssertEqual(again.map(\.value), (4..<10).map { [UInt8($0)] })
        XCTAssertThrowsError(try second.commit(again.map { var record = $0; record.topic = "no-such-topic"; return record }))
    }

    func testAsynchronousCommitLandsAndItsFailureIsServedByPoll() throws {
        let broker = try EmbeddedBroker()
        let topic = uniqueName("async-commit")
        try broker.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(config: config(broker))
        for index in 0..<5 {
            _ = try producer.sendAndWait(topic: topic, key: nil, value: [UInt8(index)], timeout: .seconds(10))
        }
        let consumer = try KafkaConsumer(config: config(broker), groupId: uniqueName("g"), topics: [topic])
        XCTAssertEqual(try consume(consumer, count: 5).count, 5)
        try consumer.commitAsync(offsets: [PartitionID(topic: topic, partition: 0): 3])
        let deadline = ContinuousClock.now + .seconds(10)
        while try consumer.committedOffsets(topic: topic, partitions: [0], timeout: .seconds(5)) != [0: 3], ContinuousClock.now < deadline {
            _ = try consumer.poll(maxRecords: 1, timeout: .milliseconds(50))
        }
        XCTAssertEqual(try consumer.committedOffsets(topic: topic, partitions: [0], timeout: .seconds(5)), [0: 3])
        XCTAssertEqual(consumer.takeAsyncCommitFailures().count, 0)

        // A partition of a topic that does not exist: the coordinator refuses it, and the refusal
        // comes back through poll, not as a thrown error of the call.
        try consumer.commitAsync(offsets: [PartitionID(topic: "no-such-topic", partition: 0): 1])
        var failures: [KafkaError] = []
        while failures.isEmpty, ContinuousClock.now < deadline + .seconds(10) {
            _ = try consumer.poll(maxRecords: 1, timeout: .milliseconds(50))
            failures += consumer.takeAsyncCommitFailures()
        }
        XCTAssertEqual(failures.count, 1, "the refused asynchronous commit is reported once")
        XCTAssertEqual(try consumer.committedOffsets(topic: topic, partitions: [0], timeout: .seconds(5)), [0: 3])
    }

    func testIdempotentProducerConfirmsEachRecordOnce() throws {
        let broker = try EmbeddedBroker(brokers: 3)
        let topic = uniqueName("idempotent")
        try broker.createTopic(topic, partitions: 1, replicationFactor: 3)
        let producer = try KafkaProducer(config: config(broker))
        let reports = Locked<[KafkaDeliveryReport]>([])
        for index in 0..<500 {
            producer.send(topic: topic, key: Array("k\(index)".utf8), value: Array("v\(index)".utf8)) { result in
                if case .success(let report) = result { reports.withLock { $0.append(report) } }
            }
        }
        try producer.flush(timeout: .seconds(10))
        let offsets = reports.withLock { $0.map(\.offset) }.sorted()
        XCTAssertEqual(offsets, Array(0..<500), "each record confirmed exactly once, no gaps")

        let consumer = try KafkaConsumer(config: config(broker), groupId: uniqueName("g"), topics: [topic])
        let records = try consume(consumer, count: 500)
        XCTAssertEqual(records.map(\.value), (0..<500).map { Array("v\($0)".utf8) })
        XCTAssertTrue(try consumer.poll(maxRecords: 10, timeout: .milliseconds(300)).isEmpty, "no duplicates")
    }

    func testSendFailsWithinDeliveryTimeoutWhenBrokerIsDown() throws {
        let broker = try EmbeddedBroker()
        let topic = uniqueName("down")
        try broker.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(config: config(broker, deliveryTimeout: .milliseconds(1500)))
        _ = try producer.sendAndWait(topic: topic, key: nil, value: [1], timeout: .seconds(10))

        try broker.setBrokerDown(1)
        let start = ContinuousClock.now
        XCTAssertThrowsError(try producer.sendAndWait(topic: topic, key: nil, value: [2], timeout: .seconds(15))) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .timedOut, "\(error)")
        }
        let elapsed = ContinuousClock.now - start
        XCTAssertLessThan(elapsed, .milliseconds(3500), "bounded by message.timeout.ms (+1 s scan)")

        try broker.setBrokerUp(1)
        XCTAssertNoThrow(try producer.sendAndWait(topic: topic, key: nil, value: [3], timeout: .seconds(10)),
                         "the same producer recovers once the broker is back")

        // The whole cluster gone (as when the broker process dies).
        broker.close()
        let closedStart = ContinuousClock.now
        XCTAssertThrowsError(try producer.sendAndWait(topic: topic, key: nil, value: [4], timeout: .seconds(15))) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .timedOut, "\(error)")
        }
        XCTAssertLessThan(ContinuousClock.now - closedStart, .milliseconds(3500))
        XCTAssertThrowsError(try broker.createTopic("after-close", partitions: 1)) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .closed)
        }
    }

    func testForwarderPortServesAsBootstrapForThisAndOtherProcesses() throws {
        let broker = try EmbeddedBroker(port: 0)
        XCTAssertTrue(broker.bootstrapServers.hasPrefix("127.0.0.1:"))
        XCTAssertNotEqual(broker.bootstrapServers, broker.brokerAddresses)
        let topic = uniqueName("forwarded")
        try broker.createTopic(topic, partitions: 2)

        let producer = try KafkaProducer(config: config(broker))
        _ = try producer.sendAndWait(topic: topic, key: Array("a".utf8), value: Array("in-process".utf8), timeout: .seconds(10))
        // Another process, when kcat is installed: it bootstraps through the forwarder too.
        let kcat = ["/usr/bin/kcat", "/usr/bin/kafkacat"].first(where: FileManager.default.isExecutableFile)
        if let kcat {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: kcat)
            process.arguments = ["-b", broker.bootstrapServers, "-P", "-t", topic, "-k", "b"]
            let input = Pipe()
            process.standardInput = input
            try process.run()
            input.fileHandleForWriting.write(Data("from-kcat\n".utf8))
            try input.fileHandleForWriting.close()
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }

        let consumer = try KafkaConsumer(config: config(broker), groupId: uniqueName("g"), topics: [topic])
        let expected = kcat == nil ? 1 : 2
        let values = Set(try consume(consumer, count: expected).map { String(decoding: $0.value, as: UTF8.self) })
        XCTAssertTrue(values.contains("in-process"))
        if expected == 2 { XCTAssertTrue(values.contains("from-kcat"), "\(values)") }
    }

    func testTwelvePartitionsAndKeyedRecordsLandByKey() throws {
        let broker = try EmbeddedBroker()
        let topic = uniqueName("keyed")
        try broker.createTopic(topic, partitions: 12)
        let admin = try KafkaAdmin(config: config(broker))
        XCTAssertEqual(try admin.partitionCount(topic: topic, timeout: .seconds(5)), 12)
        XCTAssertNil(try admin.partitionCount(topic: "never-created", timeout: .seconds(5)))

        let producer = try KafkaProducer(config: config(broker))
        let placements = Locked<[String: Set<Int32>]>([:])
        for round in 0..<5 {
            for user in 0..<40 {
                let key = "user-\(user)"
                producer.send(topic: topic, key: Array(key.utf8), value: [UInt8(round)]) { result in
                    if case .success(let report) = result { placements.withLock { $0[key, default: []].insert(report.partition) } }
                }
            }
        }
        try producer.flush(timeout: .seconds(10))
        let byKey = placements.withLock { $0 }
        XCTAssertEqual(byKey.count, 40)
        XCTAssertTrue(byKey.values.allSatisfy { $0.count == 1 }, "a key always lands on the same partition")
        XCTAssertGreaterThan(Set(byKey.values.flatMap { $0 }).count, 6, "keys spread over the partitions")

        let consumer = try KafkaConsumer(config: config(broker), groupId: uniqueName("g"), topics: [topic])
        let records = try consume(consumer, count: 200)
        XCTAssertEqual(records.count, 200)
        for record in records {
            let key = String(decoding: record.key ?? [], as: UTF8.self)
            XCTAssertEqual(byKey[key], [record.partition])
        }
        let rounds = Dictionary(grouping: records) { String(decoding: $0.key ?? [], as: UTF8.self) }
            .mapValues { $0.sorted { $0.offset < $1.offset }.map { $0.value[0] } }
        XCTAssertTrue(rounds.values.allSatisfy { $0 == [0, 1, 2, 3, 4] }, "per-key order is kept")
    }

    func testFailuresAreTypedValues() throws {
        XCTAssertThrowsError(try KafkaProducer(config: KafkaConfig(extra: ["no.such.property": "1"]))) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .configuration)
        }
        let broker = try EmbeddedBroker()
        let producer = try KafkaProducer(config: config(broker))
        // The mock cluster has no controller: CreateTopics fails as a value.
        let admin = try KafkaAdmin(config: config(broker))
        XCTAssertThrowsError(try admin.createTopics(["t"], partitions: 1, replicationFactor: 1, timeout: .seconds(1))) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .timedOut, "\(error)")
        }

        producer.close()
        producer.close()
        XCTAssertThrowsError(try producer.sendAndWait(topic: "t", key: nil, value: [1], timeout: .seconds(1))) { error in
            XCTAssertEqual((error as? KafkaError)?.kind, .closed)
        }
        // A missing or forbidden topic is no record's fault: its own kind, which stages wait out (the
        // mock cluster creates every topic it is asked about, so the codes are classified directly).
        for code in [RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED] {
            XCTAssertEqual(KafkaError(code, "publish").kind, .unavailable)
        }
        XCTAssertEqual(KafkaError(RD_KAFKA_RESP_ERR_INVALID_RECORD, "publish").kind, .other)
        XCTAssertThrowsError(try broker.setBrokerDown(99))
        let forwarded = try EmbeddedBroker(port: 0)
        let taken = try XCTUnwrap(Int(forwarded.bootstrapServers.split(separator: ":").last ?? ""))
        XCTAssertThrowsError(try EmbeddedBroker(port: taken), "the forwarder port is already in use")
    }
}

/// A value shared with completions running on the producer's poll thread.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    @discardableResult func withLock<R: Sendable>(_ body: (inout Value) -> R) -> R { mutex.withLock { body(&$0) } }
}
