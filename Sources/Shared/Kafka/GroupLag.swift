import CRdKafka

/// A consumer group's lag seen from outside the group: its committed offsets (OffsetFetch) against
/// each partition's high watermark (ListOffsets). The handle never subscribes, so asking does not
/// join the group or trigger a rebalance. Blocking: for tests, tools and chaos drivers.
public final class GroupLag: Sendable {
    private let client: RdKafkaClient
    public let groupId: String

    public init(config: KafkaConfig, groupId: String) throws(KafkaError) {
        self.groupId = groupId
        client = try RdKafkaClient(RD_KAFKA_CONSUMER, properties: config.consumerProperties(groupId: groupId))
    }

    /// Records not yet committed by the group, per partition of `topics` (0..<partitions each).
    /// A partition the group never committed counts from its low watermark.
    public func lag(topics: [String], partitions: Int32, timeout: Duration = .seconds(5)) throws(KafkaError) -> [PartitionID: Int64] {
        guard let list = rd_kafka_topic_partition_list_new(Int32(topics.count) * partitions) else {
            throw KafkaError(.other, "group lag: cannot allocate partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics { for partition in 0..<partitions { rd_kafka_topic_partition_list_add(list, topic, partition) } }
        let error = rd_kafka_committed(client.pointer, list, timeout.rdMilliseconds)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "committed offsets of group \(groupId)") }
        var lags: [PartitionID: Int64] = [:]
        let entries = UnsafeMutableBufferPointer(start: list.pointee.elems, count: Int(list.pointee.cnt))
        for entry in entries {
            var low: Int64 = -1
            var high: Int64 = -1
            let watermark = rd_kafka_query_watermark_offsets(client.pointer, entry.topic, entry.partition, &low, &high, timeout.rdMilliseconds)
            guard watermark == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(watermark, "watermarks of \(String(cString: entry.topic))") }
            let committed = entry.offset >= 0 ? entry.offset : low
            lags[PartitionID(topic: String(cString: entry.topic), partition: entry.partition)] = max(0, high - committed)
        }
        return lags
    }
}
