/// https://developer.apple.com/documentation/appstoreserverapi/extendrenewaldaterequest
public struct ExtendRenewalDateRequest: Codable, Sendable, Equatable {
    /// 1...90 days (Apple's limit per extension).
    public var extendByDays: Int32
    public var extendReasonCode: Int32
    /// Our id for the request, so a retried extension is not applied twice (Apple dedupes on it).
    public var requestIdentifier: String

    public init(extendByDays: Int32, extendReasonCode: ExtendReasonCode, requestIdentifier: String) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode.rawValue
        self.requestIdentifier = requestIdentifier
    }

    public var problem: String? {
        ExtendRenewalDateRequest.problem(days: extendByDays, reason: extendReasonCode, requestIdentifier: requestIdentifier)
    }

    static func problem(days: Int32, reason: Int32, requestIdentifier: String) -> String? {
        if !(1...90).contains(days) { return "extendByDays \(days) is outside 1...90" }
        if ExtendReasonCode(rawValue: reason) == nil { return "extendReasonCode \(reason) is not 0...3" }
        if requestIdentifier.isEmpty || requestIdentifier.utf8.count > 128 { return "requestIdentifier must have 1...128 bytes" }
        return nil
    }
}

/// https://developer.apple.com/documentation/appstoreserverapi/extendreasoncode
public enum ExtendReasonCode: Int32, Codable, Sendable, CaseIterable {
    case undeclared = 0
    case customerSatisfaction = 1
    case other = 2
    case serviceIssueOrOutage = 3
}
