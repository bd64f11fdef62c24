/// https://developer.apple.com/documentation/appstoreserverapi/lasttransactionsitem
public struct LastTransactionsItem: Codable, Sendable, Equatable {
    /// Kept raw so a status Apple adds later still decodes; `status` types it.
    public var rawStatus: Int32?
    public var originalTransactionId: String?
    public var signedTransactionInfo: String?
    public var signedRenewalInfo: String?

    public var status: SubscriptionStatus? { rawStatus.flatMap(SubscriptionStatus.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawStatus = "status"
        case originalTransactionId, signedTransactionInfo, signedRenewalInfo
    }

    public init(rawStatus: Int32?, originalTransactionId: String?, signedTransactionInfo: String?, signedRenewalInfo: String?) {
        self.rawStatus = rawStatus
        self.originalTransactionId = originalTransactionId
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }
}
