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
                  purchaseSecond: PurchaseIdentity.second(ofMs: PurchaseIdentity.identifyingDateMs(of: transaction)))
    }

    /// The date a purchase is known by. A purchase that never expires and has no web order line item
    /// (a non-consumable; consumables and non-renewing subscriptions are each their own original) is
    /// known by its original purchase date: a restore may carry the restore's own charge date as its
    /// purchase date ("a restored In-App Purchase"), never another original one. Subscription periods
    /// keep their own purchase date: their original date is the first period's.
    public static func identifyingDateMs(of t: TransactionFacts) -> Int64 {
        guard t.expiresDateMs == nil, t.webOrderLineItemId == nil, let original = t.originalPurchaseDateMs else { return t.purchaseDateMs }
        return original
    }

    /// Floor division, so dates before 1970 still truncate towards the earlier second; defined for
    /// every Int64 (`purchase_date_ms` "-9223372036854775808" once trapped here and crash-looped dedupe).
    public static func second(ofMs ms: Int64) -> Int64 { ms.floorDivided(by: 1000) }

    /// The purchase second's first millisecond, the instant membership grants from (R1).
    public static func secondStartMs(ofMs ms: Int64) -> Int64 { second(ofMs: ms).saturatingMultiplied(by: 1000) }

    /// The stable text form used as the purchase id in PostgreSQL and on the topics.
    public var description: String { "\(subscriptionKey)|\(bundleId)|\(productId)|\(purchaseSecond)" }
}
