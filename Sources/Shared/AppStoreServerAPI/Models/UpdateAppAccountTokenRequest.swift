/// https://developer.apple.com/documentation/appstoreserverapi/updateappaccounttokenrequest
public struct UpdateAppAccountTokenRequest: Codable, Sendable, Equatable {
    /// A UUID, lowercase as StoreKit writes it.
    public var appAccountToken: String
    public init(appAccountToken: String) { self.appAccountToken = appAccountToken }
}
