/// https://developer.apple.com/documentation/appstoreserverapi/sendtestnotificationresponse
public struct SendTestNotificationResponse: Codable, Sendable, Equatable {
    public var testNotificationToken: String?
    public init(testNotificationToken: String?) { self.testNotificationToken = testNotificationToken }
}
