import AppleDecoding

/// What the client returns: Apple's answers with every signed item verified by the same
/// `SignedDataVerifier` the decode stage uses. Not Sendable because verified payloads are JSON
/// objects; they are consumed where they are fetched.

/// One page of Get Transaction History or Get Refund History.
public struct TransactionPage {
    public let environment: AppStoreEnvironment
    /// The cursor for the next page; store it to ask later for only what changed.
    public let revision: String?
    public let hasMore: Bool
    public let transactions: [VerifiedSignedData]
    /// The JWS as Apple sent them, index for index with `transactions` (to feed the pipeline).
    public let signedTransactions: [String]
}

/// The pages of one history walk and whether it stopped before Apple said `hasMore: false`.
public struct TransactionWalk {
    public let environment: AppStoreEnvironment
    public let transactions: [VerifiedSignedData]
    public let signedTransactions: [String]
    /// The last revision seen: where the next walk starts.
    public let revision: String?
    public let pages: Int
    /// Stopped at the page limit or on a repeated cursor: more data may exist.
    public let truncated: Bool
}

public struct SubscriptionStatuses {
    public struct LastTransaction {
        public let rawStatus: Int32?
        public var status: SubscriptionStatus? { rawStatus.flatMap(SubscriptionStatus.init(rawValue:)) }
        public let originalTransactionId: String?
        public let transaction: VerifiedSignedData
        public let renewalInfo: VerifiedSignedData?
        public let signedTransactionInfo: String
        public let signedRenewalInfo: String?
    }

    public struct Group {
        public let subscriptionGroupIdentifier: String?
        public let lastTransactions: [LastTransaction]
    }

    public let environment: AppStoreEnvironment
    public let groups: [Group]
}

public struct NotificationHistoryEntry {
    /// The V2 `signedPayload` exactly as Apple sent it: what recovery feeds into the raw topic.
    public let signedPayload: String
    public let notification: VerifiedSignedData
    public let sendAttempts: [SendAttemptItem]

    /// Apple never got a success answer from us for this notification.
    public var neverDelivered: Bool { !sendAttempts.contains { $0.sendAttemptResult == .success } }
}

public struct NotificationHistoryPage {
    public let environment: AppStoreEnvironment
    public let paginationToken: String?
    public let hasMore: Bool
    public let entries: [NotificationHistoryEntry]
}

public struct NotificationHistoryWalk {
    public let environment: AppStoreEnvironment
    public let entries: [NotificationHistoryEntry]
    public let pages: Int
    public let truncated: Bool
    /// Truncated by the page limit (PageCursor.reachedPageLimit): a narrower window would read more.
    public var reachedPageLimit = false
}

public struct TestNotificationStatus {
    public let notification: VerifiedSignedData
    public let signedPayload: String
    public let sendAttempts: [SendAttemptItem]
}

public struct OrderLookup {
    public let rawStatus: Int32?
    public var status: OrderLookupStatus? { rawStatus.flatMap(OrderLookupStatus.init(rawValue:)) }
    public let transactions: [VerifiedSignedData]
}

public struct TransactionInfo {
    public let environment: AppStoreEnvironment
    public let transaction: VerifiedSignedData
    public let signedTransactionInfo: String
}
