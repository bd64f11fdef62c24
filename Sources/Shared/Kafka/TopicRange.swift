import CRdKafka
import Foundation
import Runtime
import Synchronization

/// Reads ranges of partitions without joining a group (replay, issue 13): watermarks, the offset of
/// an instant, and every record of `[from, to)`. Blocking: for tools, never the cooperative pool.
public final class TopicRangeReader: Sendable {
    private let client: RdKafkaClient
    private let timeout: Duration

    public init(config: KafkaConfig, timeout: Duration = .seconds(10)) throws(KafkaError) {
        // A group id is required by the consumer type even though `assign` never joins it.
        client = try RdKafkaClient(RD_KAFKA_CONSUMER, properties: config.consumerProperties(groupId: "storeledger-replay-reader"))
        rd_kafka_poll_set_consumer(client.pointer)
        self.timeout = timeout
    }

    deinit { _ = rd_kafka_consumer_close(client.pointer) }

    public func partitionCount(topic: String) throws(KafkaError) -> Int32 {
        try client.partitionCount(topic: topic, timeout: timeout)
    }

    /// What the partition holds now: `[low, high)`.
    public func watermarks(topic: String, partition: Int32) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = -1
        var high: Int64 = -1
        let error = rd_kafka_query_watermark_offsets(client.pointer, topic, partition, &low, &high, timeout.rdMilliseconds)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "watermarks of \(topic)[\(partition)]") }
        return (low, high)
    }

    /// The first offset whose record is at or after `ms`, or nil when none is. Real Kafka answers by
    /// ListOffsets (offsets-for-times); the embedded broker cannot (librdkafka 2.0.2's mock answers -1,
    /// PLATFORM-NOTES.md), so then the partition is bisected on the records' own timestamps, which the
    /// pipeline's producers set in partition order.
    public func offset(forTime ms: Int64, topic: String, partition: Int32, low: Int64, high: Int64) throws(KafkaError) -> Int64? {
        guard high > low else { return nil }
        if let list = rd_kafka_topic_partition_list_new(1) {
            defer { rd_kafka_topic_partition_list_destroy(list) }
            rd_kafka_topic_partition_list_add(list, topic, partition).pointee.offset = ms
            let error = rd_kafka_offsets_for_times(client.pointer, list, timeout.rdMilliseconds)
            let answer = list.pointee.elems[0]
            if error == RD_KAFKA_RESP_ERR_NO_ERROR, answer.err == RD_KAFKA_RESP_ERR_NO_ERROR, answer.offset >= 0 {
                return answer.offset
            }
        }
        // Bisect: the first offset in [low, high) whose timestamp is >= ms.
        var lower = low, upper = high
        while lower < upper {
            let middle = lower + (upper - lower) / 2
            let stamp = try record(topic: topic, partition: partition, at: middle).timestamp
            if stamp >= ms { upper = middle } else { lower = middle + 1 }
        }
        return lower < high ? lower : nil
    }

    /// The record at `offset`, or the next one the partition holds.
    private func record(topic: String, partition: Int32, at offset: Int64) throws(KafkaError) -> KafkaRecord {
        var found: KafkaRecord?
        try read(topic: topic, partition: partition, from: offset, to: offset + 1, batch: 1) { records in
            found = records.first
            return false
        }
        guard let found else { throw KafkaError(.timedOut, "read \(topic)[\(partition)]@\(offset): no record") }
        return found
    }

    /// Hands every record of `[from, to)` to `body` in offset order, `batch` at a time; `body`
    /// returns false to stop early. Throws when the partition stops answering for `timeout`.
    public func read(topic: String, partition: Int32, from: Int64, to: Int64, batch: Int = 500,
                     _ body: ([KafkaRecord]) throws -> Bool) throws(KafkaError) {
        guard to > from else { return }
        guard let list = rd_kafka_topic_partition_list_new(1) else { throw KafkaError(.other, "cannot allocate partition list") }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        rd_kafka_topic_partition_list_add(list, topic, partition).pointee.offset = from
        let assigned = rd_kafka_assign(client.pointer, list)
        guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(assigned, "assign \(topic)[\(partition)]@\(from)") }
        defer { _ = rd_kafka_assign(client.pointer, nil) }
        var next = from
        var pending: [KafkaRecord] = []
        var lastProgress = ContinuousClock.now
        while next < to {
            guard let message = rd_kafka_consumer_poll(client.pointer, 100) else {
                if !pending.isEmpty {
                    do { guard try body(pending) else { return } } catch { throw KafkaError(.other, "replay: \(error)") }
                    pending.removeAll(keepingCapacity: true)
                }
                guard ContinuousClock.now - lastProgress < timeout else {
                    throw KafkaError(.timedOut, "read \(topic)[\(partition)]: stuck at offset \(next) of \(to) for \(timeout)")
                }
                continue
            }
            defer { rd_kafka_message_destroy(message) }
            let error = message.pointee.err
            if error == RD_KAFKA_RESP_ERR__PARTITION_EOF { continue }
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError(error, "read \(topic)[\(partition)]@\(next)", detail: String(cString: rd_kafka_message_errstr(message)))
            }
            let record = KafkaRecord(message)
            guard record.partition == partition, record.offset >= next else { continue }
            lastProgress = ContinuousClock.now
            next = record.offset + 1
            if record.offset < to { pending.append(record) }
            if pending.count >= batch || next >= to {
                do { guard try body(pending) else { return } } catch { throw KafkaError(.other, "replay: \(error)") }
                pending.removeAll(keepingCapacity: true)
            }
        }
    }
}

/// Holds a stage's consumer group while a replay runs (issue 13): joins it as its only member and
/// pauses every partition, so no worker of that stage can process anything meanwhile. Refuses
/// (`sole == false`) when the group already has active members: the replay works on a stopped group.
public final class ConsumerGroupHold: Sendable {
    public let groupId: String
    public let consumer: KafkaConsumer
    private let stopping = Atomic<Bool>(false)
    private let keeping = Atomic<Bool>(false)

    /// Joins every group at once (each first join waits for the broker's group delay) and waits until
    /// each has an assignment. `partitions[g]` is how many partitions group `g`'s topics have.
    public static func join(config: KafkaConfig, groups: [(groupId: String, topics: [String], partitions: Int)],
                            timeout: Duration) throws(KafkaError) -> [(hold: ConsumerGroupHold, sole: Bool)] {
        var holds: [ConsumerGroupHold] = []
        for group in groups { holds.append(ConsumerGroupHold(groupId: group.groupId, consumer: try KafkaConsumer(config: config, groupId: group.groupId, topics: group.topics))) }
        let deadline = ContinuousClock.now + timeout
        var assigned: [Int: Int] = [:]
        while assigned.count < holds.count {
            guard ContinuousClock.now < deadline else {
                for hold in holds { hold.close() }
                throw KafkaError(.timedOut, "replay: no assignment in group(s) \(groups.map(\.groupId).joined(separator: ", ")) within \(timeout)")
            }
            for (index, hold) in holds.enumerated() where assigned[index] == nil {
                _ = try? hold.consumer.poll(maxRecords: 1, timeout: .milliseconds(100))
                let count = hold.consumer.assignedPartitionCount
                if count > 0 { assigned[index] = count }
            }
        }
        var result: [(hold: ConsumerGroupHold, sole: Bool)] = []
        for (index, hold) in holds.enumerated() {
            try hold.consumer.pause(Array(hold.consumer.assignment))
            hold.keepAlive()
            result.append((hold, assigned[index]! >= groups[index].partitions))
        }
        return result
    }

    private init(groupId: String, consumer: KafkaConsumer) {
        self.groupId = groupId
        self.consumer = consumer
    }

    /// Whether another member joined since: the hold lost (some of) its partitions.
    public func wasRebalanced(since generation: Int) -> Bool { consumer.rebalanceGeneration != generation }

    /// Polls in the background (every partition is paused, so nothing arrives) so that the member
    /// stays in the group for as long as the replay runs (max.poll.interval.ms).
    private func keepAlive() {
        keeping.store(true, ordering: .releasing)
        let thread = Thread { [self] in
            while !stopping.load(ordering: .acquiring) {
                _ = try? consumer.poll(maxRecords: 1, timeout: .milliseconds(200))
            }
            keeping.store(false, ordering: .releasing)
        }
        thread.name = "replay-hold-\(groupId)"
        thread.start()
    }

    /// Leaves the group without committing anything: its committed offsets stay as the stage left them.
    public func close() {
        stopping.store(true, ordering: .releasing)
        // The keeper polls at most 200 ms more; closing waits for it so poll and close do not overlap.
        while keeping.load(ordering: .acquiring) { usleep(20_000) }
        consumer.close()
    }
}
