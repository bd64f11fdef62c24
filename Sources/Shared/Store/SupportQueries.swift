import Postgres

/// What a support search finds: the ids a query may name (a user, a transaction, an original transaction).
public struct SupportQueries {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// A subscription and the user linked to it, if any.
    public struct LinkedSubscription: Sendable, Equatable {
        public var subscriptionKey: String
        public var userId: String?

        public init(subscriptionKey: String, userId: String?) {
            self.subscriptionKey = subscriptionKey
            self.userId = userId
        }
    }

    /// True when any projection or ledger line knows the user.
    public func isKnownUser(_ user: String) throws -> Bool {
        try !db.query("""
            SELECT user_id FROM subscriptions WHERE user_id = \(user)
            UNION SELECT user_id FROM user_membership WHERE user_id = \(user)
            UNION SELECT user_id FROM ledger WHERE user_id = \(user)
            LIMIT 1
            """).isEmpty
    }

    /// The subscriptions that know `transactionId` under any alias (R1), at most `limit`.
    public func subscriptions(transaction transactionId: String, limit: Int = 20) throws -> [LinkedSubscription] {
        try linked(try db.query("""
            SELECT DISTINCT a.subscription_key, s.user_id FROM transaction_aliases a
            LEFT JOIN subscriptions s ON s.subscription_key = a.subscription_key
            WHERE a.transaction_id = \(transactionId) ORDER BY a.subscription_key LIMIT \(limit)
            """))
    }

    /// Those of `keys` that are known subscriptions.
    public func subscriptions(keys: [String]) throws -> [LinkedSubscription] {
        try linked(try db.query("""
            SELECT subscription_key, user_id FROM subscriptions WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key
            """))
    }

    private func linked(_ rows: PGRows) throws -> [LinkedSubscription] {
        try rows.map { LinkedSubscription(subscriptionKey: try $0.string("subscription_key"), userId: try $0.decode("user_id")) }
    }
}
