/// One Kafka record header. Names may repeat; order is preserved.
public struct KafkaHeader: Sendable, Equatable {
    public var name: String
    public var value: [UInt8]

    public init(name: String, value: [UInt8]) {
        self.name = name
        self.value = value
    }
}

/// A record read by `KafkaConsumer`.
public struct KafkaRecord: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    /// `nil` when the record was written without a key.
    public var key: [UInt8]?
    /// Empty for a null (tombstone) value.
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Create time in milliseconds since the Unix epoch, as set by the producer (-1 if absent).
    public var timestamp: Int64

    public init(topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8],
                headers: [KafkaHeader], timestamp: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }
}

/// Where the broker stored a produced record.
public struct KafkaDeliveryReport: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}
