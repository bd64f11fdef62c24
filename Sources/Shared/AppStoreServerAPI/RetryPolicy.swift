import Foundation

/// How the client retries one request: capped exponential backoff, and Apple's `Retry-After`
/// honoured when it asks for a wait we are willing to make in-process. Pure: the client sleeps.
public struct RetryPolicy: Sendable, Equatable {
    public var maxAttempts: Int
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    /// A `Retry-After` longer than this ends the call as retryable with the asked delay, rather
    /// than holding a worker for minutes.
    public var maxRetryAfter: Duration

    public init(maxAttempts: Int = 4, initialBackoff: Duration = .milliseconds(250), maxBackoff: Duration = .seconds(8),
                maxRetryAfter: Duration = .seconds(60)) {
        self.maxAttempts = max(1, min(maxAttempts, 20))
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.maxRetryAfter = maxRetryAfter
    }

    public enum Decision: Sendable, Equatable {
        case retry(after: Duration)
        /// Give up now; `retryAfterSeconds` when Apple asked for a longer wait than we make.
        case giveUp(retryAfterSeconds: Int64?)
    }

    /// After failed attempt number `attempt` (1-based) of a retryable failure.
    public func decide(attempt: Int, retryAfterSeconds: Int64?) -> Decision {
        if let seconds = retryAfterSeconds {
            let asked = Duration.seconds(seconds)
            guard asked <= maxRetryAfter else { return .giveUp(retryAfterSeconds: seconds) }
            guard attempt < maxAttempts else { return .giveUp(retryAfterSeconds: seconds) }
            return .retry(after: asked)
        }
        guard attempt < maxAttempts else { return .giveUp(retryAfterSeconds: nil) }
        return .retry(after: backoff(attempt: attempt))
    }

    /// initial × 2^(attempt-1), capped.
    public func backoff(attempt: Int) -> Duration {
        let factor = 1 << min(max(attempt - 1, 0), 20)
        return min(initialBackoff * factor, maxBackoff)
    }
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Values that are not one of
/// those, negative, or absurdly far (over a day) read as absent, so hostile text cannot stall us.
public enum RetryAfter {
    public static let maxSeconds: Int64 = 86_400

    public static func seconds(_ header: String?, now: Date) -> Int64? {
        guard let text = header?.trimmingCharacters(in: .whitespaces), !text.isEmpty, text.utf8.count <= 64 else { return nil }
        if text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            guard let value = Int64(text), value <= maxSeconds else { return nil }
            return value
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text) else { return nil }
        let delta = date.timeIntervalSince(now).rounded(.up)
        guard delta.isFinite, delta <= Double(maxSeconds) else { return nil }
        return max(0, Int64(delta))
    }
}
