/// https://developer.apple.com/documentation/appstoreserverapi/transactioninforesponse
public struct TransactionInfoResponse: Codable, Sendable, Equatable {
    public var signedTransactionInfo: String?
    public init(signedTransactionInfo: String?) { self.signedTransactionInfo = signedTransactionInfo }
}
