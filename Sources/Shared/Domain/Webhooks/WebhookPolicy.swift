/// When a failed webhook delivery is tried again (issue 17): capped exponential backoff, and after
/// `giveUpAfterMs` since the first attempt no more tries (the delivery log keeps it; an operator
/// can resend). Pure, so the schedule is tested without a clock.
public struct WebhookRetryPolicy: Sendable, Equatable, Codable {
    public var baseDelayMs: Int64 = 10_000
    public var maxDelayMs: Int64 = 3_600_000
    public var giveUpAfterMs: Int64 = 72 * 3_600_000

    public init(baseDelayMs: Int64 = 10_000, maxDelayMs: Int64 = 3_600_000, giveUpAfterMs: Int64 = 72 * 3_600_000) {
        self.baseDelayMs = baseDelayMs
        self.maxDelayMs = maxDelayMs
        self.giveUpAfterMs = giveUpAfterMs
    }

    /// Each field may be left out of the webhooks file; the defaults fill what is.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = WebhookRetryPolicy()
        baseDelayMs = try container.decodeIfPresent(Int64.self, forKey: .baseDelayMs) ?? defaults.baseDelayMs
        maxDelayMs = try container.decodeIfPresent(Int64.self, forKey: .maxDelayMs) ?? defaults.maxDelayMs
        giveUpAfterMs = try container.decodeIfPresent(Int64.self, forKey: .giveUpAfterMs) ?? defaults.giveUpAfterMs
    }

    public enum Decision: Sendable, Equatable {
        case retry(atMs: Int64)
        case giveUp
    }

    /// After the `attempts`-th failed attempt (1 = the first), made at `nowMs`.
    public func afterFailure(attempts: Int, firstAttemptMs: Int64, nowMs: Int64) -> Decision {
        let exponent = min(max(attempts - 1, 0), 40)
        let (scaled, overflow) = baseDelayMs.multipliedReportingOverflow(by: Int64(1) << exponent)
        let delay = overflow ? maxDelayMs : min(scaled, maxDelayMs)
        let next = nowMs.saturatingAdding(delay)
        // The last try lands inside the window rather than just after it.
        guard nowMs - firstAttemptMs < giveUpAfterMs else { return .giveUp }
        return .retry(atMs: min(next, firstAttemptMs.saturatingAdding(giveUpAfterMs)))
    }
}

/// The webhook signature header: `StoreLedger-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` over
/// `<t>.<body>` (timestamp, a dot, the exact body bytes), so a receiver can refuse replays of old bodies.
public enum WebhookSignature {
    public static let header = "StoreLedger-Signature"

    public static func signedPayload(timestamp: Int64, body: [UInt8]) -> [UInt8] { Array("\(timestamp).".utf8) + body }

    public static func headerValue(timestamp: Int64, mac: [UInt8]) -> String { "t=\(timestamp),v1=\(hex(mac))" }

    /// The timestamp and the v1 signatures (hex) of a header value; nil when it is malformed.
    public static func parse(_ value: String) -> (timestamp: Int64, signatures: [String])? {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in value.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map { String($0.filter { $0 != " " }) }
            guard pair.count == 2 else { return nil }
            if pair[0] == "t" { timestamp = Int64(pair[1]) } else if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        guard let timestamp, !signatures.isEmpty else { return nil }
        return (timestamp, signatures)
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
    }
}
