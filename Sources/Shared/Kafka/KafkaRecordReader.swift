import CRdKafka

/// Reads single records by position (topic, partition, offset), for evidence: support shows the raw
/// input a ledger line points at. No group is joined and nothing is committed, so reading never
/// disturbs a stage. Blocking: call it off the cooperative pool.
public enum KafkaRecordReader {
    public enum Outcome: Sendable, Equatable {
        case found(KafkaRecord)
        /// The offset is outside what the partition holds now (never written, or dropped by retention).
        case notHeld(low: Int64, high: Int64)
    }

    public static func read(config: KafkaConfig, topic: String, partition: Int32, offset: Int64,
                            timeout: Duration = .seconds(5)) throws(KafkaError) -> Outcome {
        // A group id is required by the consumer type even though `assign` never joins it.
        let client = try RdKafkaClient(RD_KAFKA_CONSUMER, properties: config.consumerProperties(groupId: "storeledger-record-reader"))
        rd_kafka_poll_set_consumer(client.pointer)
        defer { _ = rd_kafka_consumer_close(client.pointer) }

        var low: Int64 = -1
        var high: Int64 = -1
        let watermarks = rd_kafka_query_watermark_offsets(client.pointer, topic, partition, &low, &high, timeout.rdMilliseconds)
        guard watermarks == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(watermarks, "watermarks of \(topic)[\(partition)]") }
        guard offset >= low, offset < high else { return .notHeld(low: low, high: high) }

        guard let list = rd_kafka_topic_partition_list_new(1) else { throw KafkaError(.other, "cannot allocate partition list") }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        rd_kafka_topic_partition_list_add(list, topic, partition).pointee.offset = offset
        let assigned = rd_kafka_assign(client.pointer, list)
        guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(assigned, "assign \(topic)[\(partition)]@\(offset)") }

        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let message = rd_kafka_consumer_poll(client.pointer, 200) else { continue }
            defer { rd_kafka_message_destroy(message) }
            let error = message.pointee.err
            if error == RD_KAFKA_RESP_ERR__PARTITION_EOF { continue }
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError(error, "read \(topic)[\(partition)]@\(offset)", detail: String(cString: rd_kafka_message_errstr(message)))
            }
            // A compacted or transactional partition may skip the exact offset: the next one is not it.
            guard message.pointee.offset == offset else { return .notHeld(low: low, high: high) }
            return .found(KafkaRecord(message))
        }
        throw KafkaError(.timedOut, "read \(topic)[\(partition)]@\(offset): no record within \(timeout)")
    }
}
