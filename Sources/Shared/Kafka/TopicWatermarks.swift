import CRdKafka

/// Each partition's high watermark (ListOffsets) from outside any group: the handle never
/// subscribes, so asking neither joins a group nor triggers a rebalance. The embedded broker's
/// metrics use it to show how many records each topic holds. Blocking: call it off the cooperative pool.
public final class TopicWatermarks: Sendable {
    private let client: RdKafkaClient

    public init(config: KafkaConfig) throws(KafkaError) {
        // A group id is required by the consumer type even though nothing joins it.
        client = try RdKafkaClient(RD_KAFKA_CONSUMER, properties: config.consumerProperties(groupId: "storeledger-watermarks"))
    }

    /// The high watermark of partitions 0..<partitions of `topic` (records ever written, retention aside).
    public func high(topic: String, partitions: Int32, timeout: Duration = .seconds(2)) throws(KafkaError) -> [Int32: Int64] {
        var marks: [Int32: Int64] = [:]
        for partition in 0..<partitions {
            var low: Int64 = -1
            var high: Int64 = -1
            let error = rd_kafka_query_watermark_offsets(client.pointer, topic, partition, &low, &high, timeout.rdMilliseconds)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "watermarks of \(topic)[\(partition)]") }
            marks[partition] = high
        }
        return marks
    }
}
