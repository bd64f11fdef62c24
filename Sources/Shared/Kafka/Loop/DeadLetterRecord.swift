/// A dead letter on the wire, karafka-style: the value is the original bytes, the key the original
/// key, the headers the original headers followed by provenance headers (`dlq-*`). No JSON
/// wrapping, so a dead letter is as large as its original plus well under `provenanceAllowance`
/// bytes, and anything that fitted into its source topic fits into the dead-letter topic.
public struct DeadLetterRecord: Sendable, Equatable {
    public var stage: String
    public var kind: String
    public var message: String
    public var source: PartitionID
    public var sourceOffset: Int64
    public var attempts: Int
    public var firstFailureMs: Int64
    public var lastFailureMs: Int64
    public var key: [UInt8]?
    public var value: [UInt8]
    /// The original record's headers, in order.
    public var headers: [KafkaHeader]

    public init(stage: String, kind: String, message: String, source: PartitionID, sourceOffset: Int64,
                attempts: Int, firstFailureMs: Int64, lastFailureMs: Int64,
                key: [UInt8]?, value: [UInt8], headers: [KafkaHeader]) {
        self.stage = stage
        self.kind = kind
        self.message = message
        self.source = source
        self.sourceOffset = sourceOffset
        self.attempts = attempts
        self.firstFailureMs = firstFailureMs
        self.lastFailureMs = lastFailureMs
        self.key = key
        self.value = value
        self.headers = headers
    }

    public init(stage: String, order: DeadLetterOrder) {
        let record = order.record
        self.init(stage: stage, kind: order.kind, message: order.reason, source: record.partitionID, sourceOffset: record.offset,
                  attempts: order.attempts, firstFailureMs: order.firstFailureMs, lastFailureMs: order.lastFailureMs,
                  key: record.key, value: record.value, headers: record.headers)
    }

    public enum Header {
        public static let stage = "dlq-stage"
        public static let sourceTopic = "dlq-source-topic"
        public static let sourcePartition = "dlq-source-partition"
        public static let sourceOffset = "dlq-source-offset"
        public static let kind = "dlq-error-kind"
        public static let message = "dlq-error-message"
        public static let attempts = "dlq-attempts"
        public static let firstFailure = "dlq-first-failure-ms"
        public static let lastFailure = "dlq-last-failure-ms"
        /// Present only when the original did not fit beside its headers: its full size in bytes.
        public static let truncatedFrom = "dlq-value-truncated-from"
        static let all: Set<String> = [stage, sourceTopic, sourcePartition, sourceOffset, kind, message, attempts,
                                       firstFailure, lastFailure, truncatedFrom]
    }

    /// Longest error message kept (UTF-8 bytes); longer ones are cut at a character boundary.
    public static let maxMessageBytes = 1024
    /// Upper bound of what provenance adds to a record (names, values and Kafka's per-header overhead).
    public static let provenanceAllowance = 2048

    /// The record to produce.
    public func outgoing(topic: String) -> OutgoingRecord {
        var all = headers.filter { !Header.all.contains($0.name) }
        func add(_ name: String, _ value: String) { all.append(KafkaHeader(name: name, value: Array(value.utf8))) }
        add(Header.stage, String(decoding: stage.utf8.prefix(128), as: UTF8.self))
        add(Header.sourceTopic, source.topic)
        add(Header.sourcePartition, String(source.partition))
        add(Header.sourceOffset, String(sourceOffset))
        add(Header.kind, String(decoding: kind.utf8.prefix(128), as: UTF8.self))
        add(Header.message, Self.truncated(message))
        add(Header.attempts, String(attempts))
        add(Header.firstFailure, String(firstFailureMs))
        add(Header.lastFailure, String(lastFailureMs))
        // Always fits: an original under the limits (everything ingest accepts) is kept whole;
        // anything larger is cut, and says so, rather than wedging the stage on an unsendable record.
        let headerBytes = all.reduce(0) { $0 + $1.name.utf8.count + $1.value.count + 16 }
        let budget = max(0, KafkaLimits.messageMaxBytes - (key?.count ?? 0) - headerBytes - Self.provenanceAllowance)
        var kept = value
        if value.count > budget {
            kept = Array(value.prefix(budget))
            add(Header.truncatedFrom, String(value.count))
        }
        return OutgoingRecord(topic: topic, key: key, value: kept, headers: all)
    }

    /// Reads a record of the dead-letter topic; nil when it carries no provenance.
    public init?(_ record: KafkaRecord) {
        func text(_ name: String) -> String? {
            record.headers.last { $0.name == name }.map { String(decoding: $0.value, as: UTF8.self) }
        }
        guard let stage = text(Header.stage), let topic = text(Header.sourceTopic),
              let partition = text(Header.sourcePartition).flatMap({ Int32($0) }),
              let offset = text(Header.sourceOffset).flatMap({ Int64($0) }), let kind = text(Header.kind) else { return nil }
        self.init(stage: stage, kind: kind, message: text(Header.message) ?? "",
                  source: PartitionID(topic: topic, partition: partition), sourceOffset: offset,
                  attempts: text(Header.attempts).flatMap { Int($0) } ?? 1,
                  firstFailureMs: text(Header.firstFailure).flatMap { Int64($0) } ?? -1,
                  lastFailureMs: text(Header.lastFailure).flatMap { Int64($0) } ?? -1,
                  key: record.key, value: record.value, headers: record.headers.filter { !Header.all.contains($0.name) })
    }

    static func truncated(_ message: String) -> String {
        guard message.utf8.count > maxMessageBytes else { return message }
        var cut = ""
        for character in message {
            guard cut.utf8.count + character.utf8.count <= maxMessageBytes - 3 else { break }
            cut.append(character)
        }
        return cut + "..."
    }
}

/// A record to produce.
public struct OutgoingRecord: Sendable, Equatable {
    public var topic: String
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]

    public init(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = []) {
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
    }
}

extension DeadLetterRecord {
    /// Names the dead letter it came from when re-driven, so a record failing again shows its history.
    public static let redrivenFromHeader = "dlq-redriven-from"

    /// The original record, to produce to its source topic again after a fix (provenance dropped,
    /// the dead letter's own position added). Re-driving twice is harmless: every stage is
    /// idempotent, so the second copy changes nothing.
    public func redrive(from position: String) -> OutgoingRecord {
        OutgoingRecord(topic: source.topic, key: key, value: value,
                       headers: headers.filter { $0.name != Self.redrivenFromHeader }
                           + [KafkaHeader(name: Self.redrivenFromHeader, value: Array(position.utf8))])
    }

    /// The value as text when it is printable UTF-8 (JSON, base64), else nil.
    public var printableValue: String? {
        guard let text = String(validating: value, as: UTF8.self) else { return nil }
        let printable = text.unicodeScalars.allSatisfy { $0 == "\n" || $0 == "\r" || $0 == "\t" || !($0.properties.generalCategory == .control) }
        return printable ? text : nil
    }
}

/// Which dead letters a `storeledger dlq` command selects.
public struct DeadLetterFilter: Sendable, Equatable {
    public var stage: String?
    public var kind: String?
    /// Only dead letters whose last failure is at or after this time (ms since 1970).
    public var sinceMs: Int64?
    /// At most this many: the most recent by last failure (letters of a raw record land in any
    /// partition, so topic order says nothing across partitions); the older ones are dropped.
    public var limit: Int?

    public init(stage: String? = nil, kind: String? = nil, sinceMs: Int64? = nil, limit: Int? = nil) {
        self.stage = stage
        self.kind = kind
        self.sinceMs = sinceMs
        self.limit = limit
    }

    public func matches(_ letter: DeadLetterRecord) -> Bool {
        (stage == nil || letter.stage == stage) && (kind == nil || letter.kind == kind)
            && (sinceMs.map { letter.lastFailureMs >= $0 } ?? true)
    }

    /// The selected letters: all in the order given, or with a limit the most recent `limit` by last
    /// failure, oldest first.
    public func select<T>(_ letters: [(T, DeadLetterRecord)]) -> [(T, DeadLetterRecord)] {
        var selection = DeadLetterSelection<T>(self)
        for (id, letter) in letters { selection.offer(id, letter) }
        return selection.kept
    }
}

/// The letters a filter selects, gathered as they are read: what it keeps is bounded by `limit`, not
/// by the topic (a topic anyone can grow by posting junk to the notification endpoint).
public struct DeadLetterSelection<T> {
    public let filter: DeadLetterFilter
    /// Each letter with the order it was offered in, which breaks ties between equal failure times.
    private var buffer: [(order: Int, id: T, letter: DeadLetterRecord)] = []
    private var offered = 0

    public init(_ filter: DeadLetterFilter) { self.filter = filter }

    public mutating func offer(_ id: T, _ letter: DeadLetterRecord) {
        guard filter.matches(letter) else { return }
        buffer.append((offered, id, letter))
        offered += 1
        // Trimmed when twice the limit: amortised O(log limit) per letter, at most 2 × limit held.
        if let limit = filter.limit, buffer.count >= 2 * max(1, limit) { buffer = Self.latest(buffer, limit) }
    }

    /// Without a limit all of them in the order offered; with one the `limit` latest by last
    /// failure, oldest first.
    public var kept: [(T, DeadLetterRecord)] {
        guard let limit = filter.limit else { return buffer.map { ($0.id, $0.letter) } }
        return Self.latest(buffer, limit).map { ($0.id, $0.letter) }
    }

    private static func latest(_ letters: [(order: Int, id: T, letter: DeadLetterRecord)], _ limit: Int)
        -> [(order: Int, id: T, letter: DeadLetterRecord)] {
        Array(letters.sorted { ($0.letter.lastFailureMs, $0.order) < ($1.letter.lastFailureMs, $1.order) }.suffix(max(0, limit)))
    }
}
