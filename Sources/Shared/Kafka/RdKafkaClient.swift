import CRdKafka
import Runtime

/// Owns one `rd_kafka_t` and destroys it in `deinit`: the single place a handle is freed.
///
/// `rd_kafka_destroy` blocks (it joins librdkafka's threads), so the last reference must not be
/// dropped inside a librdkafka callback or on the Swift cooperative pool.
// @unchecked: the only stored property is an immutable pointer to an rd_kafka_t, which librdkafka
// documents as thread-safe for every call this module makes.
final class RdKafkaClient: @unchecked Sendable {
    let pointer: OpaquePointer

    /// - Parameter configure: sets callbacks on the `rd_kafka_conf_t` before the handle exists.
    init(_ type: rd_kafka_type_t, properties: [String: String],
         configure: (OpaquePointer) -> Void = { _ in }) throws(KafkaError) {
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(.configuration, "rd_kafka_conf_new failed")
        }
        var errorText = [CChar](repeating: 0, count: 512)
        // Sorted so a failure names the same property on every run.
        for (name, value) in properties.sorted(by: { $0.key < $1.key }) {
            let result = rd_kafka_conf_set(conf, name, value, &errorText, errorText.count)
            guard result == RD_KAFKA_CONF_OK else {
                rd_kafka_conf_destroy(conf)
                // The value is left out on purpose: it may be a credential (sasl.password).
                throw KafkaError(.configuration, "property \(name): \(text(of: errorText))")
            }
        }
        rd_kafka_conf_set_log_cb(conf, forwardLibrdkafkaLog)
        rd_kafka_conf_set_error_cb(conf, reportClientError)
        configure(conf)
        // On success rd_kafka_new takes ownership of conf; on failure it stays ours.
        guard let handle = rd_kafka_new(type, conf, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(.configuration, "rd_kafka_new: \(text(of: errorText))")
        }
        pointer = handle
    }

    deinit { rd_kafka_destroy(pointer) }

    /// The client's instance name (`rdkafka#producer-1`), for logs.
    var name: String { String(cString: rd_kafka_name(pointer)) }

    /// The partitions of `topic` from the cluster's metadata; an unknown topic is an error.
    func partitionCount(topic: String, timeout: Duration) throws(KafkaError) -> Int32 {
        guard let handle = rd_kafka_topic_new(pointer, topic, nil) else { throw KafkaError(.other, "topic handle \(topic)") }
        defer { rd_kafka_topic_destroy(handle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let error = rd_kafka_metadata(pointer, 0, handle, &metadata, timeout.rdMilliseconds)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(error, "metadata of \(topic)") }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt == 1, metadata.pointee.topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(metadata.pointee.topic_cnt == 1 ? metadata.pointee.topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
                             "metadata of \(topic)")
        }
        return metadata.pointee.topics[0].partition_cnt
    }
}

private let librdkafkaLogger = Logger(component: "kafka")

/// librdkafka's own log lines (warnings and worse) as JSON log events instead of raw stderr text.
/// Runs on librdkafka's internal threads.
private func forwardLibrdkafkaLog(_ client: OpaquePointer?, _ level: Int32,
                                  _ facility: UnsafePointer<CChar>?, _ text: UnsafePointer<CChar>?) {
    // syslog levels: 0-3 error, 4 warning, 5-7 notice/info/debug (dropped).
    guard level <= 4 else { return }
    let fields: [String: LogValue] = [
        "client": .string(client.map { String(cString: rd_kafka_name($0)) } ?? "?"),
        "facility": .string(facility.map { String(cString: $0) } ?? ""),
        "message": .string(text.map { String(cString: $0) } ?? ""),
    ]
    if level <= 3 {
        librdkafkaLogger.error("librdkafka_log", fields)
    } else {
        librdkafkaLogger.warning("librdkafka_log", fields)
    }
}

/// librdkafka's error events. Without this callback they are logged a second time as copies of
/// the log line that explains them, so only what matters beyond the log is reported: a fatal
/// error (the producer must be recreated) and losing every broker.
private func reportClientError(_ client: OpaquePointer?, _ error: Int32, _ reason: UnsafePointer<CChar>?,
                               _ opaque: UnsafeMutableRawPointer?) {
    let code = rd_kafka_resp_err_t(rawValue: error)
    guard code == RD_KAFKA_RESP_ERR__FATAL || code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN else { return }
    librdkafkaLogger.error(code == RD_KAFKA_RESP_ERR__FATAL ? "kafka_fatal_error" : "kafka_all_brokers_down", [
        "client": .string(client.map { String(cString: rd_kafka_name($0)) } ?? "?"),
        "message": .string(reason.map { String(cString: $0) } ?? ""),
    ])
}

/// Thread-safe topic name of a message (`rkt` is always set on messages handed to the app).
func topicName(of message: UnsafePointer<rd_kafka_message_t>) -> String {
    guard let topic = message.pointee.rkt else { return "" }
    return String(cString: rd_kafka_topic_name(topic))
}

/// The text librdkafka wrote into an `errstr` buffer.
func text(of buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
