/// https://developer.apple.com/documentation/appstoreserverapi/sendattemptitem
public struct SendAttemptItem: Codable, Sendable, Equatable {
    /// ms since 1970.
    public var attemptDate: Int64?
    public var rawSendAttemptResult: String?

    public var sendAttemptResult: SendAttemptResult? { rawSendAttemptResult.flatMap(SendAttemptResult.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case attemptDate
        case rawSendAttemptResult = "sendAttemptResult"
    }

    public init(attemptDate: Int64?, rawSendAttemptResult: String?) {
        self.attemptDate = attemptDate
        self.rawSendAttemptResult = rawSendAttemptResult
    }
}
