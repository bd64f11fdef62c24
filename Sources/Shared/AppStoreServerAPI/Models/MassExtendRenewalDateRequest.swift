/// https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldaterequest
public struct MassExtendRenewalDateRequest: Codable, Sendable, Equatable {
    public var extendByDays: Int32
    public var extendReasonCode: Int32
    public var requestIdentifier: String
    /// Empty or nil: every storefront.
    public var storefrontCountryCodes: [String]?
    public var productId: String

    public init(extendByDays: Int32, extendReasonCode: ExtendReasonCode, requestIdentifier: String,
                storefrontCountryCodes: [String]? = nil, productId: String) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode.rawValue
        self.requestIdentifier = requestIdentifier
        self.storefrontCountryCodes = storefrontCountryCodes
        self.productId = productId
    }

    public var problem: String? {
        if let problem = ExtendRenewalDateRequest.problem(days: extendByDays, reason: extendReasonCode,
                                                          requestIdentifier: requestIdentifier) { return problem }
        if (storefrontCountryCodes?.count ?? 0) > 300 { return "more than 300 storefront country codes" }
        return nil
    }
}
