import CRdKafka
import Foundation

/// Reads the last records of chosen partitions of a topic, without joining a group: how a single
/// producer (the outbox relay) learns, after a failure, what already reached the broker.
public enum PartitionTail {
    /// Up to `counts[p]` last records of each partition p, oldest first (partitions without records
    /// are left out).
    public static func lastRecords(config: KafkaConfig, topic: String, counts: [Int32: Int],
                                   timeout: Duration) throws(KafkaError) -> [Int32: [KafkaRecord]] {
        let wantedCounts = counts.filter { $0.value > 0 }
        guard !wantedCounts.isEmpty else { return [:] }
        let client = try RdKafkaClient(RD_KAFKA_CONSUMER,
                                       properties: config.consumerProperties(groupId: "storeledger-tail-\(UUID().uuidString)"))
        rd_kafka_poll_set_consumer(client.pointer)
        let deadline = ContinuousClock.now + timeout
        var ranges: [Int32: (from: Int64, last: Int64)] = [:]
        for (partition, count) in wantedCounts {
            var low: Int64 = 0
            var high: Int64 = 0
            let error = rd_kafka_query_watermark_offsets(client.pointer, topic, partition, &low, &high, timeout.rdMilliseconds)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "watermarks of \(topic)[\(partition)]") }
            if high > low { ranges[partition] = (max(low, high - Int64(count)), high - 1) }
        }
        guard !ranges.isEmpty else { return [:] }
        guard let list = rd_kafka_topic_partition_list_new(Int32(ranges.count)) else {
            throw KafkaError(.other, "tail: cannot allocate partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (partition, range) in ranges { rd_kafka_topic_partition_list_add(list, topic, partition).pointee.offset = range.from }
        let assigned = rd_kafka_assign(client.pointer, list)
        guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(assigned, "assign \(topic) tails") }
        defer { _ = rd_kafka_assign(client.pointer, nil) }
        var found: [Int32: [KafkaRecord]] = [:]
        var done: Set<Int32> = []
        while done.count < ranges.count {
            guard ContinuousClock.now < deadline else {
                throw KafkaError(.timedOut, "tail of \(topic): \(done.count) of \(ranges.count) partitions read within \(timeout)")
            }
            guard let message = rd_kafka_consumer_poll(client.pointer, 100) else { continue }
            defer { rd_kafka_message_destroy(message) }
            guard message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
            let record = KafkaRecord(message)
            guard let range = ranges[record.partition], record.offset >= range.from, record.offset <= range.last else { continue }
            found[record.partition, default: []].append(record)
            if record.offset == range.last { done.insert(record.partition) }
        }
        return found
    }
}
