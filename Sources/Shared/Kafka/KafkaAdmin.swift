import CRdKafka

/// Topic administration on a real Kafka cluster (CreateTopics and metadata). Blocking: call it
/// from setup code or a dedicated thread. On the embedded broker use
/// `EmbeddedBroker.createTopic`: librdkafka 2.0.2's mock cluster advertises no controller, so
/// CreateTopics times out there ("Failed while waiting for controller").
public final class KafkaAdmin: Sendable {
    private let client: RdKafkaClient

    public init(config: KafkaConfig) throws(KafkaError) {
        client = try RdKafkaClient(RD_KAFKA_PRODUCER, properties: config.adminProperties())
    }

    /// Creates each topic; a topic that already exists counts as success (whatever its
    /// partition count). Throws the first other failure.
    public func createTopics(_ names: [String], partitions: Int32, replicationFactor: Int16,
                             timeout: Duration) throws(KafkaError) {
        guard !names.isEmpty else { return }
        var newTopics: [OpaquePointer?] = []
        defer { newTopics.forEach { rd_kafka_NewTopic_destroy($0) } }
        var errorText = [CChar](repeating: 0, count: 512)
        for name in names {
            guard let topic = rd_kafka_NewTopic_new(name, partitions, Int32(replicationFactor),
                                                    &errorText, errorText.count) else {
                throw KafkaError(.configuration, "topic \(name): \(text(of: errorText))")
            }
            newTopics.append(topic)
        }

        let options = rd_kafka_AdminOptions_new(client.pointer, RD_KAFKA_ADMIN_OP_CREATETOPICS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeout.rdMilliseconds, &errorText, errorText.count)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeout.rdMilliseconds, &errorText, errorText.count)

        let queue = rd_kafka_queue_new(client.pointer)
        defer { rd_kafka_queue_destroy(queue) }
        rd_kafka_CreateTopics(client.pointer, &newTopics, newTopics.count, options, queue)
        // The admin request enforces its own timeout; the extra second lets its error arrive.
        guard let event = rd_kafka_queue_poll(queue, (timeout + .seconds(1)).rdMilliseconds) else {
            throw KafkaError(.timedOut, "create topics \(names.joined(separator: ",")): no answer within \(timeout)")
        }
        defer { rd_kafka_event_destroy(event) }
        let error = rd_kafka_event_error(event)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            let text = rd_kafka_event_error_string(event).map { String(cString: $0) }
                ?? String(cString: rd_kafka_err2str(error))
            throw KafkaError(error, "create topics \(names.joined(separator: ","))", detail: text)
        }
        var count = 0
        guard let result = rd_kafka_event_CreateTopics_result(event),
              let topics = rd_kafka_CreateTopics_result_topics(result, &count) else { return }
        for index in 0..<count {
            let topic = topics[index]
            let error = rd_kafka_topic_result_error(topic)
            guard error != RD_KAFKA_RESP_ERR_NO_ERROR, error != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS else { continue }
            let name = String(cString: rd_kafka_topic_result_name(topic))
            let text = rd_kafka_topic_result_error_string(topic).map { String(cString: $0) }
                ?? String(cString: rd_kafka_err2str(error))
            throw KafkaError(error, "create topic \(name)", detail: text)
        }
    }

    /// The number of partitions of `topic` according to the cluster's metadata, or `nil` if the
    /// cluster does not know the topic. Lists all topics, so it never auto-creates one.
    public func partitionCount(topic: String, timeout: Duration) throws(KafkaError) -> Int? {
        var metadata: UnsafePointer<rd_kafka_metadata_t>?
        let error = rd_kafka_metadata(client.pointer, 1, nil, &metadata, timeout.rdMilliseconds)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(error, "metadata") }
        defer { rd_kafka_metadata_destroy(metadata) }
        let topics = UnsafeBufferPointer(start: metadata.pointee.topics, count: Int(metadata.pointee.topic_cnt))
        guard let entry = topics.first(where: { String(cString: $0.topic) == topic }),
              entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return Int(entry.partition_cnt)
    }
}
