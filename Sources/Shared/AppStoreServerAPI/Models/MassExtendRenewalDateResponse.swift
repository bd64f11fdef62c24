/// https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldateresponse
public struct MassExtendRenewalDateResponse: Codable, Sendable, Equatable {
    public var requestIdentifier: String?
    public init(requestIdentifier: String?) { self.requestIdentifier = requestIdentifier }
}
