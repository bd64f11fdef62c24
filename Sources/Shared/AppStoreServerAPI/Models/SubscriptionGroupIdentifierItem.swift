/// https://developer.apple.com/documentation/appstoreserverapi/subscriptiongroupidentifieritem
public struct SubscriptionGroupIdentifierItem: Codable, Sendable, Equatable {
    public var subscriptionGroupIdentifier: String?
    public var lastTransactions: [LastTransactionsItem]?

    public init(subscriptionGroupIdentifier: String?, lastTransactions: [LastTransactionsItem]?) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.lastTransactions = lastTransactions
    }
}
