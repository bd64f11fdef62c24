/// Apple's `status` of an auto-renewable subscription (named `Status` in Apple's library).
/// https://developer.apple.com/documentation/appstoreserverapi/status
public enum SubscriptionStatus: Int32, Codable, Sendable, CaseIterable {
    case active = 1
    case expired = 2
    case billingRetry = 3
    case billingGracePeriod = 4
    case revoked = 5
}
