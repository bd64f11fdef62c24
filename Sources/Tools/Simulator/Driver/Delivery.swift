/// One HTTP POST the simulated world makes to StoreLedger: Apple's notification or an app's
/// receipt upload, with when it happens in simulated time and what it is about.
public struct Delivery: Sendable {
    public enum Channel: String, Sendable, CaseIterable {
        case notificationV1 = "v1"
        case notificationV2 = "v2"
        case receiptUpload = "receipt"
    }

    public static let notificationPath = "/v1/notifications/appstore"
    public static let receiptPath = "/v1/receipts"

    public var channel: Channel
    public var body: [UInt8]
    public var simMs: Int64
    public var userId: String
    /// Short text for reports: "V2 DID_RENEW vip.a.1m txn 1000…".
    public var label: String
    public var environment: SimEnvironment
    /// A deliberately malformed upload (the app forgot a required field): ingest must answer 400.
    public var expectsRejection: Bool = false
    /// Sent once and in submission order: no injected copy, hold-back or lost acknowledgement. For
    /// uploads whose arrival order decides who owns a subscription (R17: the latest claim).
    public var keepsOrder: Bool = false

    public var path: String { channel == .receiptUpload ? Delivery.receiptPath : Delivery.notificationPath }

    public init(channel: Channel, body: [UInt8], simMs: Int64, userId: String, label: String, environment: SimEnvironment,
                expectsRejection: Bool = false) {
        self.channel = channel
        self.body = body
        self.simMs = simMs
        self.userId = userId
        self.label = label
        self.environment = environment
        self.expectsRejection = expectsRejection
    }

    /// Apple's retry schedule after a failed post, in hours after the previous attempt:
    /// V2 5 retries (1, 12, 24, 48, 72 h), V1 3 (6, 24, 48 h); the sandbox sends once.
    /// Apps retry an upload a few times within minutes.
    public var retryDelaysHours: [Double] {
        switch (channel, environment) {
        case (.notificationV1, .production): return [6, 24, 48]
        case (.notificationV2, .production): return [1, 12, 24, 48, 72]
        case (.notificationV1, .sandbox), (.notificationV2, .sandbox): return []
        case (.receiptUpload, _): return [0.01, 0.1, 1]
        }
    }
}
