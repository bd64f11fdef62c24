import CRdKafka
import Foundation

/// Reads the last record of every partition of a topic, without joining a group: how a single
/// producer (the outbox relay) learns, after a crash, what already reached the broker.
public enum PartitionTail {
    /// The last record per partition (partitions without records are left out).
    public static func lastRecords(config: KafkaConfig, topic: String, timeout: Duration) throws(KafkaError) -> [Int32: KafkaRecord] {
        let client = try RdKafkaClient(RD_KAFKA_CONSUMER,
                                       properties: config.consumerProperties(groupId: "storeledger-tail-\(UUID().uuidString)"))
        rd_kafka_poll_set_consumer(client.pointer)
        let deadline = ContinuousClock.now + timeout
        let count = try client.partitionCount(topic: topic, timeout: timeout)
        var wanted: [Int32: Int64] = [:]
        for partition in 0..<count {
            var low: Int64 = 0
            var high: Int64 = 0
            let error = rd_kafka_query_watermark_offsets(client.pointer, topic, partition, &low, &high, timeout.rdMilliseconds)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "watermarks of \(topic)[\(partition)]") }
            if high > low { wanted[partition] = high - 1 }
        }
        guard !wanted.isEmpty else { return [:] }
        guard let list = rd_kafka_topic_partition_list_new(Int32(wanted.count)) else {
            throw KafkaError(.other, "tail: cannot allocate partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (partition, offset) in wanted { rd_kafka_topic_partition_list_add(list, topic, partition).pointee.offset = offset }
        let assigned = rd_kafka_assign(client.pointer, list)
        guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(assigned, "assign \(topic) tails") }
        defer { _ = rd_kafka_assign(client.pointer, nil) }
        var found: [Int32: KafkaRecord] = [:]
        while found.count < wanted.count {
            guard ContinuousClock.now < deadline else {
                throw KafkaError(.timedOut, "tail of \(topic): \(found.count) of \(wanted.count) partitions read within \(timeout)")
            }
            guard let message = rd_kafka_consumer_poll(client.pointer, 100) else { continue }
            defer { rd_kafka_message_destroy(message) }
            guard message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
            let record = KafkaRecord(message)
            if let last = wanted[record.partition], record.offset >= last { found[record.partition] = record }
        }
        return found
    }
}
