/// https://developer.apple.com/documentation/appstoreserverapi/refundhistoryresponse
public struct RefundHistoryResponse: Codable, Sendable, Equatable {
    public var signedTransactions: [String]?
    public var revision: String?
    public var hasMore: Bool?

    public init(signedTransactions: [String]?, revision: String?, hasMore: Bool?) {
        self.signedTransactions = signedTransactions
        self.revision = revision
        self.hasMore = hasMore
    }
}
