/// https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldatestatusresponse
public struct MassExtendRenewalDateStatusResponse: Codable, Sendable, Equatable {
    public var requestIdentifier: String?
    public var complete: Bool?
    /// ms since 1970.
    public var completeDate: Int64?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public init(requestIdentifier: String?, complete: Bool?, completeDate: Int64?, succeededCount: Int64?, failedCount: Int64?) {
        self.requestIdentifier = requestIdentifier
        self.complete = complete
        self.completeDate = completeDate
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}
