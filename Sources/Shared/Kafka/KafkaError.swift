import CRdKafka

/// A Kafka failure: librdkafka's error code and name plus what we were doing.
public struct KafkaError: Error, CustomStringConvertible, Sendable, Equatable {
    /// What the caller can do about it.
    public enum Kind: String, Sendable {
        /// No answer in time (message timeout, request timeout, our own wait): retry later.
        case timedOut
        /// No usable connection to the brokers: retry later.
        case transport
        /// The local send queue is full: back off (backpressure).
        case queueFull
        /// The client was closed, or the message was purged while closing.
        case closed
        /// A bad property or argument: fix the configuration.
        case configuration
        /// The idempotent producer hit a fatal error: it must be recreated.
        case fatal
        /// The topic does not exist (yet) or this client may not use it: an operator's matter (create
        /// the topic, grant the ACL), never a record's; retry later.
        case unavailable
        /// Any other error reported by a broker or by librdkafka.
        case other
    }

    public let kind: Kind
    /// librdkafka's `rd_kafka_resp_err_t` (negative: client-side, positive: broker).
    public let code: Int32
    /// librdkafka's name for `code`, e.g. `_MSG_TIMED_OUT`.
    public let name: String
    public let message: String

    public var isTimeout: Bool { kind == .timedOut }
    public var isTransport: Bool { kind == .transport }
    /// The record is larger than `message.max.bytes` (client or broker side): it will never fit.
    public var isMessageTooLarge: Bool { code == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE.rawValue }

    public var description: String { "kafka \(kind.rawValue) error \(name) (\(code)): \(message)" }

    init(_ error: rd_kafka_resp_err_t, _ context: String) {
        self.init(kind: Self.kind(of: error), code: error,
                  message: "\(context): \(String(cString: rd_kafka_err2str(error)))")
    }

    /// A librdkafka code with librdkafka's own, more specific text (`detail`).
    init(_ error: rd_kafka_resp_err_t, _ context: String, detail: String) {
        self.init(kind: Self.kind(of: error), code: error, message: "\(context): \(detail)")
    }

    /// An error without a librdkafka code of its own (only `kind` and text matter).
    init(_ kind: Kind, _ message: String) {
        self.init(kind: kind, code: Self.representativeCode(kind), message: message)
    }

    /// Takes ownership of a non-nil `rd_kafka_error_t` and destroys it.
    static func consuming(_ error: OpaquePointer, _ context: String) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        let code = rd_kafka_error_code(error)
        let kind = rd_kafka_error_is_fatal(error) != 0 ? .fatal : Self.kind(of: code)
        let text = rd_kafka_error_string(error).map { String(cString: $0) }
            ?? String(cString: rd_kafka_err2str(code))
        return KafkaError(kind: kind, code: code, message: "\(context): \(text)")
    }

    private init(kind: Kind, code: rd_kafka_resp_err_t, message: String) {
        self.kind = kind
        self.code = code.rawValue
        self.name = String(cString: rd_kafka_err2name(code))
        self.message = message
    }

    private static func kind(of error: rd_kafka_resp_err_t) -> Kind {
        switch error {
        case RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
             RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
            return .timedOut
        case RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
             RD_KAFKA_RESP_ERR__RESOLVE, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
             RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
            return .transport
        case RD_KAFKA_RESP_ERR__QUEUE_FULL:
            return .queueFull
        case RD_KAFKA_RESP_ERR__DESTROY, RD_KAFKA_RESP_ERR__PURGE_QUEUE,
             RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
            return .closed
        case RD_KAFKA_RESP_ERR__INVALID_ARG, RD_KAFKA_RESP_ERR__UNKNOWN_PROTOCOL:
            return .configuration
        case RD_KAFKA_RESP_ERR__FATAL:
            return .fatal
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
             RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
            return .unavailable
        default:
            return .other
        }
    }

    private static func representativeCode(_ kind: Kind) -> rd_kafka_resp_err_t {
        switch kind {
        case .timedOut: return RD_KAFKA_RESP_ERR__TIMED_OUT
        case .transport: return RD_KAFKA_RESP_ERR__TRANSPORT
        case .queueFull: return RD_KAFKA_RESP_ERR__QUEUE_FULL
        case .closed: return RD_KAFKA_RESP_ERR__STATE
        case .configuration: return RD_KAFKA_RESP_ERR__INVALID_ARG
        case .fatal: return RD_KAFKA_RESP_ERR__FATAL
        case .unavailable: return RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
        case .other: return RD_KAFKA_RESP_ERR__FAIL
        }
    }
}
