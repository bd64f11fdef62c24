import Foundation

/// Every error this module throws. The description holds the kind, SQLSTATE, the server's
/// message and the statement text with `$n` placeholders, never a bind value: quoted bind
/// values the server echoes in its message are redacted, and `detail` (which for a unique
/// violation repeats the key, i.e. row data) is kept out of the description.
public struct PGError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Could not connect, or the connection broke (retryable after `reset()`).
        case connection
        /// The server rejected a statement; see `sqlState`.
        case server
        /// A value could not be sent (e.g. a string with a NUL byte, which PostgreSQL cannot store).
        case invalidParameter
        /// A row value was missing, NULL, of another type, or unparsable.
        case decoding
        /// Migrations could not be applied as given.
        case migration
        /// The embedded throwaway server could not be started.
        case embeddedServer
        /// A misuse of the API (e.g. a closed connection).
        case usage
    }

    public let kind: Kind
    /// Five-character SQLSTATE from the server, e.g. `23505`; nil for client-side errors.
    public let sqlState: String?
    public let message: String
    /// The server's DETAIL line. May contain row data: not part of `description`.
    public let detail: String?
    public let hint: String?
    /// The constraint the server named, e.g. for a unique violation.
    public let constraint: String?
    /// The statement text (placeholders, no values), when the error came from one.
    public let statement: String?

    public init(kind: Kind, sqlState: String? = nil, message: String, detail: String? = nil,
                hint: String? = nil, constraint: String? = nil, statement: String? = nil) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.statement = statement
    }

    /// Worth retrying the whole transaction: serialization failure, deadlock, a lost or
    /// refused connection, or the server shutting down / starting up.
    public var isRetryable: Bool {
        if kind == .connection { return true }
        guard let sqlState else { return false }
        return sqlState == "40001" || sqlState == "40P01"
            || sqlState.hasPrefix("08")  // connection exception class
            || sqlState == "57P01" || sqlState == "57P02" || sqlState == "57P03"  // shutdown / cannot connect now
            || sqlState == "53300"  // too_many_connections
    }

    public var isUniqueViolation: Bool { sqlState == "23505" }
    public var isSerializationFailure: Bool { sqlState == "40001" }
    public var isDeadlock: Bool { sqlState == "40P01" }

    public var description: String {
        var text = "PGError.\(kind.rawValue)"
        if let sqlState { text += " [\(sqlState)]" }
        text += ": \(message)"
        if let hint { text += " (hint: \(hint))" }
        if let statement { text += " -- statement: \(statement)" }
        return text
    }

    /// The same error with a context prefix on its message.
    public func prefixed(_ context: String) -> PGError {
        PGError(kind: kind, sqlState: sqlState, message: "\(context): \(message)", detail: detail,
                hint: hint, constraint: constraint, statement: statement)
    }

    /// Replaces bind values the server quoted in its message (e.g. `invalid input syntax for
    /// type integer: "abc"`) with `"<redacted>"`.
    static func redact(_ message: String, binds: [PGValue]) -> String {
        var result = message
        for bind in binds {
            guard case .text(let value) = bind.payload, !value.isEmpty else { continue }
            result = result.replacingOccurrences(of: "\"\(value)\"", with: "\"<redacted>\"")
        }
        return result
    }
}
