/// What a stage could not handle, with everything needed to understand and replay it: the
/// original key, bytes and headers, where it came from, which stage failed and why
/// (after karafka's dead-letter records, STYLE.md). On the wire it is the original record with
/// provenance headers (the Kafka module's `DeadLetterRecord`), never a JSON document.
public struct DeadLetter: Sendable, Equatable {
    public var stage: String
    /// Machine-readable failure kind, e.g. "invalid_json", "VERIFICATION_FAILURE", "unsupported_type".
    public var errorKind: String
    /// Human-readable reason.
    public var error: String
    public var source: RecordPosition
    public var key: [UInt8]?
    public var headers: [Header]
    public var original: [UInt8]
    public var attempts: Int
    public var failedAtMs: Int64

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: [UInt8]
        public init(name: String, value: [UInt8]) { self.name = name; self.value = value }
    }

    public init(stage: String, errorKind: String, error: String, source: RecordPosition, key: [UInt8]?,
                headers: [Header], original: [UInt8], attempts: Int, failedAtMs: Int64) {
        self.stage = stage
        self.errorKind = errorKind
        self.error = error
        self.source = source
        self.key = key
        self.headers = headers
        self.original = original
        self.attempts = attempts
        self.failedAtMs = failedAtMs
    }
}

/// An expected failure of a pure step: the record goes to the dead-letter topic and the stage moves on.
public struct PermanentFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var kind: String
    public var reason: String
    public init(_ kind: String, _ reason: String) { self.kind = kind; self.reason = reason }
    public var description: String { "\(kind): \(reason)" }
}
