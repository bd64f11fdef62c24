import AppleDecoding

/// Why an App Store Server API call did not produce a verified answer. A value, not a crash:
/// the caller decides from `kind` whether to retry later, give up, or ask another environment.
/// Never contains the bearer token or the key: only statuses, Apple's error code and message.
public struct APIFailure: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// Apple or the network is in trouble (429, 5xx, a retryable error code, a timeout), also
        /// after our own retries: try again later.
        case retryable
        /// Asking again will not help (a bad id, a refused request, 401).
        case permanent
        /// The answer came but broke the contract: unreadable JSON, a bound exceeded, a signature
        /// that does not verify. Treated like an attack: do not retry blindly, alert.
        case invalidResponse
        /// No bearer token could be had (the signer did not answer or refused).
        case noToken
        /// We refused to send the request (an id that is not a plain id, days out of range).
        case invalidRequest
    }

    public var kind: Kind
    public var environment: AppStoreEnvironment?
    public var httpStatus: Int?
    /// Apple's `errorCode`, as sent.
    public var rawErrorCode: Int64?
    /// Apple's `errorMessage`, cut to `APILimits.maxErrorMessageCharacters` printable characters.
    public var errorMessage: String?
    /// What Apple's `Retry-After` asked for, when it asked for more than we wait in-process.
    public var retryAfterSeconds: Int64?
    /// Our explanation.
    public var reason: String

    public init(_ kind: Kind, _ reason: String, environment: AppStoreEnvironment? = nil, httpStatus: Int? = nil,
                rawErrorCode: Int64? = nil, errorMessage: String? = nil, retryAfterSeconds: Int64? = nil) {
        self.kind = kind
        self.reason = reason
        self.environment = environment
        self.httpStatus = httpStatus
        self.rawErrorCode = rawErrorCode
        self.errorMessage = errorMessage
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var errorCode: APIErrorCode? { rawErrorCode.flatMap(APIErrorCode.init(rawValue:)) }

    public var description: String {
        var text = "\(kind.rawValue): \(reason)"
        if let environment { text += " [\(environment.rawValue)]" }
        if let httpStatus { text += " HTTP \(httpStatus)" }
        if let rawErrorCode { text += " errorCode \(rawErrorCode)\(errorCode.map { " (\($0))" } ?? "")" }
        if let errorMessage { text += ": \(errorMessage)" }
        if let retryAfterSeconds { text += " (Retry-After \(retryAfterSeconds) s)" }
        return text
    }

    /// Apple's message made safe to log: printable ASCII only, bounded.
    static func sanitized(_ message: String?) -> String? {
        guard let message else { return nil }
        let printable = message.unicodeScalars.prefix(APILimits.maxErrorMessageCharacters)
            .map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" }
        return String(printable)
    }
}
