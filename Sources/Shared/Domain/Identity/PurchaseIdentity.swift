/// The identity of one purchase (R1): bundle id + product id + purchase date at *second* precision
/// (Apple's milliseconds differ between copies, S14), scoped to the subscription so that two
/// customers buying the same product in the same second never merge. `transaction_id` is not part
/// of it: a restore on a new device brings the same purchase back with a new one (S1).
public struct PurchaseIdentity: Hashable, Sendable, Codable, CustomStringConvertible {
    public var subscriptionKey: String
    public var bundleId: String
    public var productId: String
    public var purchaseSecond: Int64

    public init(subscriptionKey: String, bundleId: String, productId: String, purchaseSecond: Int64) {
        self.subscriptionKey = subscriptionKey
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseSecond = purchaseSecond
    }

    public init(subscriptionKey: String, bundleId: String?, transaction: TransactionFacts) {
        self.init(subscriptionKey: subscriptionKey,
                  bundleId: transaction.bundleId ?? bundleId ?? "",
                  productId: transaction.productId,
                  purchaseSecond: PurchaseIdentity.second(ofMs: transaction.purchaseDateMs))
    }

    /// Floor division, so dates before 1970 still truncate towards the earlier second; defined for
    /// every Int64 (`purchase_date_ms` "-9223372036854775808" once trapped here and crash-looped dedupe).
    public static func second(ofMs ms: Int64) -> Int64 { ms.floorDivided(by: 1000) }

    /// The purchase second's first millisecond, the instant membership grants from (R1).
    public static func secondStartMs(ofMs ms: Int64) -> Int64 { second(ofMs: ms).saturatingMultiplied(by: 1000) }

    /// The stable text form used as the purchase id in PostgreSQL and on the topics.
    public var description: String { "\(subscriptionKey)|\(bundleId)|\(productId)|\(purchaseSecond)" }
}
