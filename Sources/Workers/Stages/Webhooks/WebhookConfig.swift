import Domain
import Foundation
import Store

/// Webhook endpoints, from the JSON file named by `Setting.webhooks` (docs/events.md, "Webhooks"):
///
///     {"endpoints": [{"id": "crm", "url": "https://crm.example/hooks/storeledger",
///                     "secretEnv": "CRM_WEBHOOK_SECRET", "timeoutMs": 5000, "concurrency": 8}],
///      "retry": {"baseDelayMs": 10000, "maxDelayMs": 3600000, "giveUpAfterMs": 259200000}}
///
/// The signing secret comes from an environment variable (`secretEnv`) or a file (`secretFile`),
/// never from the file itself, and is never logged nor written to PostgreSQL or Kafka.
public struct WebhookConfig: Sendable {
    public struct Endpoint: Sendable, CustomStringConvertible {
        public var id: String
        public var url: URL
        public var timeout: Duration
        /// Where a new endpoint starts: the events from now on (default) or every event written.
        public var start: WebhookStore.Start
        /// POSTs in flight at once (1...32), each the oldest pending event of a different user (per-user order holds).
        public var concurrency: Int
        public static let concurrencyRange = 1...32
        public static let defaultConcurrency = 8
        /// The signing secret: keep it out of logs (`description` leaves it out).
        let secret: [UInt8]
        public var description: String { "\(id) -> \(url.absoluteString)" }

        public init(id: String, url: URL, secret: [UInt8], timeout: Duration = .seconds(5), start: WebhookStore.Start = .now,
                    concurrency: Int = defaultConcurrency) {
            self.id = id
            self.url = url
            self.secret = secret
            self.timeout = timeout
            self.start = start
            self.concurrency = min(max(concurrency, Self.concurrencyRange.lowerBound), Self.concurrencyRange.upperBound)
        }
    }

    public var endpoints: [Endpoint]
    public var retry: WebhookRetryPolicy

    public init(endpoints: [Endpoint], retry: WebhookRetryPolicy = WebhookRetryPolicy()) {
        self.endpoints = endpoints
        self.retry = retry
    }

    private struct File: Decodable {
        struct Entry: Decodable {
            var id: String
            var url: String
            var secretEnv: String?
            var secretFile: String?
            var timeoutMs: Int?
            var startAt: String?
            var concurrency: Int?
        }
        var endpoints: [Entry]
        var retry: WebhookRetryPolicy?
    }

    /// Reads and validates the file; every problem is reported at once.
    public static func load(path: String, environment: [String: String]) throws -> WebhookConfig {
        guard let data = FileManager.default.contents(atPath: path) else { throw WebhookConfigError("cannot read \(path)") }
        let file: File
        do { file = try JSONDecoder().decode(File.self, from: data) } catch { throw WebhookConfigError("\(path): \(error)") }
        var problems: [String] = []
        var endpoints: [Endpoint] = []
        var ids: Set<String> = []
        for entry in file.endpoints {
            let idOK = !entry.id.isEmpty && entry.id.count <= 64
                && entry.id.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" }
            if !idOK { problems.append("endpoint id \(entry.id.debugDescription): 1-64 letters, digits, - or _") }
            if !ids.insert(entry.id).inserted { problems.append("endpoint id \(entry.id) appears twice") }
            guard let url = URL(string: entry.url), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                problems.append("endpoint \(entry.id): url must be http(s)://host/...")
                continue
            }
            var secret: String?
            if let name = entry.secretEnv { secret = environment[name] }
            if let file = entry.secretFile {
                secret = FileManager.default.contents(atPath: file).map { String(decoding: $0, as: UTF8.self) }?
                    .trimmingCharacters(in: .whitespacesAndNewlines)
            }
            guard let secret, secret.utf8.count >= 16 else {
                problems.append("endpoint \(entry.id): no signing secret of at least 16 bytes (secretEnv or secretFile)")
                continue
            }
            let timeoutMs = entry.timeoutMs ?? 5_000
            if !(100...60_000).contains(timeoutMs) { problems.append("endpoint \(entry.id): timeoutMs must be 100...60000") }
            let start = WebhookStore.Start(rawValue: entry.startAt ?? "now")
            if start == nil { problems.append("endpoint \(entry.id): startAt must be now or beginning") }
            let concurrency = entry.concurrency ?? Endpoint.defaultConcurrency
            let range = Endpoint.concurrencyRange
            if !range.contains(concurrency) { problems.append("endpoint \(entry.id): concurrency must be \(range.lowerBound)...\(range.upperBound)") }
            endpoints.append(Endpoint(id: entry.id, url: url, secret: Array(secret.utf8), timeout: .milliseconds(timeoutMs),
                                      start: start ?? .now, concurrency: concurrency))
        }
        let retry = file.retry ?? WebhookRetryPolicy()
        if retry.baseDelayMs < 1 || retry.maxDelayMs < retry.baseDelayMs || retry.giveUpAfterMs < 1 {
            problems.append("retry: need 1 <= baseDelayMs <= maxDelayMs and giveUpAfterMs >= 1")
        }
        guard problems.isEmpty else { throw WebhookConfigError("\(path): " + problems.joined(separator: "; ")) }
        return WebhookConfig(endpoints: endpoints, retry: retry)
    }
}

public struct WebhookConfigError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
