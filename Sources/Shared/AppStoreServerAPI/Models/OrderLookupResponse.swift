/// https://developer.apple.com/documentation/appstoreserverapi/orderlookupresponse
public struct OrderLookupResponse: Codable, Sendable, Equatable {
    public var rawStatus: Int32?
    public var signedTransactions: [String]?

    public var status: OrderLookupStatus? { rawStatus.flatMap(OrderLookupStatus.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawStatus = "status"
        case signedTransactions
    }

    public init(rawStatus: Int32?, signedTransactions: [String]?) {
        self.rawStatus = rawStatus
        self.signedTransactions = signedTransactions
    }
}

/// https://developer.apple.com/documentation/appstoreserverapi/orderlookupstatus
public enum OrderLookupStatus: Int32, Codable, Sendable, CaseIterable {
    case valid = 0
    case invalid = 1
}
