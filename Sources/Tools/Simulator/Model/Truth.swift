import Domain

/// The App Store environment a purchase happened in.
public enum SimEnvironment: String, Sendable, Codable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
}

/// How a purchase was priced (R10): Apple's offer facts as the simulator decided them.
public enum SimOffer: Sendable, Equatable, Hashable {
    case none
    case freeTrial
    case introPrice
    case promotional(String)
    case offerCode(String)

    var isIntroductory: Bool { self == .freeTrial || self == .introPrice }
}

/// One purchase event as the App Store recorded it: the ground truth the oracle reads.
/// A restore on a new device is not a new transaction: it adds an id to `restoredIds` (R1).
public struct SimTransaction: Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    /// Auto-renewables only: stable across devices.
    public var webOrderLineItemId: String?
    public var productId: String
    public var kind: ProductKind
    public var group: String
    /// When Apple charged (ms; Apple's copies disagree below the second, S14).
    public var purchaseMs: Int64
    public var originalPurchaseMs: Int64
    /// Auto-renewables: the period end Apple reports.
    public var expiresMs: Int64?
    /// Non-renewing subscriptions: the catalog duration (Apple sends no expiry for them).
    public var durationMs: Int64?
    /// Refund / revoke / switch time (V1 `cancellation_date`, V2 `revocationDate`).
    public var cancellationMs: Int64?
    /// "0" other, "1" app issue; nil for an upgrade.
    public var cancellationReason: String?
    /// Cancelled because the user switched within the group (R3 a/b, R5).
    public var isUpgraded: Bool
    public var offer: SimOffer
    public var isRenewal: Bool
    public var appAccountToken: String
    public var storefront: String
    public var environment: SimEnvironment
    /// Transaction ids of restored copies on other devices (S1).
    public var restoredIds: [String]
    /// Consumables: finished by the app, so later receipts leave them out (as Apple does).
    public var finished: Bool
    /// Consumables: units one purchase credits.
    public var credits: Int
    /// A refund Apple later reversed: the purchase stood cancelled only in between (R14).
    public var reversal: SimReversal? = nil

    /// Apple's price of this transaction (milli-units) and its currency, from the storefront's price list.
    public var price: (milli: Int64, currency: String) {
        SimulatorCatalog.price(productId: productId, storefront: storefront, offer: offer)
    }

    /// The end of what the purchase paid for, before any cancellation; nil = open-ended.
    public var paidEndMs: Int64? {
        switch kind {
        case .autoRenewable: return expiresMs
        case .nonRenewing: return durationMs.map { purchaseMs + $0 }
        default: return nil
        }
    }
}

/// When a reversed refund stood: from the refund until Apple reversed it.
public struct SimReversal: Sendable, Equatable {
    public var refundMs: Int64
    public var reversedMs: Int64
}

/// An Apple ID on one device family; a user may sign in with several (S11).
public struct SimAppleID: Sendable, Equatable {
    public var id: String
    public var storefront: String
    public var environment: SimEnvironment
    /// Restores so far (each gives the transactions new ids on the new device).
    public var devices: Int = 1
    /// The app account signed in on this Apple ID's devices when it is not the user's own: the user
    /// restored on another account (R6), which then uploads the receipts and sets the tokens.
    public var appAccount: String? = nil
}

/// A receipt upload that showed a subscription: the app account it claims it for, and when (R17).
public struct SimClaim: Sendable, Equatable {
    public var account: String
    public var atMs: Int64
}

/// Billing state of an auto-renewable subscription between periods.
public enum SimBilling: Sendable, Equatable {
    case paid
    /// Charge failed at `sinceMs`; Apple keeps trying. `graceUntilMs` when a grace period applies.
    case retrying(sinceMs: Int64, graceUntilMs: Int64?)
    case expired(intent: String)
}

public struct GraceWindow: Sendable, Equatable {
    public var fromMs: Int64
    public var untilMs: Int64
}

/// One `original_transaction_id`: an auto-renewable subscription, or a one-time purchase
/// (consumable, non-consumable, non-renewing), whose otid is its own transaction id.
public struct SimSubscription: Sendable, Equatable {
    public var originalTransactionId: String
    public var userId: String
    public var appleIdIndex: Int
    public var group: String
    public var kind: ProductKind
    public var environment: SimEnvironment
    public var transactions: [SimTransaction]
    public var autoRenew: Bool
    public var autoRenewProductId: String
    public var autoRenewChangedMs: Int64?
    public var billing: SimBilling = .paid
    /// The subscription moved to another storefront: it will not renew under this otid (R6, S10).
    public var movedTo: String?
    /// Billing grace periods: Apple keeps serving from the end of the period that failed to
    /// renew until the grace period expires, whether or not billing recovers.
    public var graceWindows: [GraceWindow] = []
    /// Every receipt upload that showed this subscription, in upload order.
    public var uploadClaims: [SimClaim] = []

    public var latest: SimTransaction? { transactions.last }
    /// The product of the latest period.
    public var productId: String { transactions.last?.productId ?? autoRenewProductId }
}

/// One of the app's users (an account in the app), with the Apple IDs they used.
public struct SimUser: Sendable {
    public var userId: String
    /// The app account token the app passes to StoreKit (a UUID derived from the user id).
    public var appAccountToken: String
    public var appleIds: [SimAppleID]
    /// Every original_transaction_id this user owns, in purchase order.
    public var subscriptionIds: [String]
    /// Groups in which this account ever had an intro or trial period (R8).
    public var introUsedGroups: Set<String>
    /// Promotional offer ids redeemed, with counts (R9).
    public var promotionalRedemptions: [String: Int]
    /// Human-readable journey, printed with a mismatch.
    public var journey: [String]
    /// Subscriptions of other users' Apple IDs this account uploaded a receipt of (restored on it).
    public var claimedSubscriptionIds: [String] = []
}
