/// https://developer.apple.com/documentation/appstoreserverapi/checktestnotificationresponse
public struct CheckTestNotificationResponse: Codable, Sendable, Equatable {
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?

    public init(signedPayload: String?, sendAttempts: [SendAttemptItem]?) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }
}
