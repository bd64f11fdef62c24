/// Get Transaction History: up to 20 signed transactions per page and the `revision` to ask
/// for the next. https://developer.apple.com/documentation/appstoreserverapi/historyresponse
public struct HistoryResponse: Codable, Sendable, Equatable {
    public var revision: String?
    public var hasMore: Bool?
    public var bundleId: String?
    public var appAppleId: Int64?
    /// Apple's spelling ("Production", "Sandbox"); `AppStoreEnvironment(rawValue:)` types it.
    public var environment: String?
    public var signedTransactions: [String]?

    public init(revision: String?, hasMore: Bool?, bundleId: String?, appAppleId: Int64?, environment: String?,
                signedTransactions: [String]?) {
        self.revision = revision
        self.hasMore = hasMore
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
        self.signedTransactions = signedTransactions
    }
}
