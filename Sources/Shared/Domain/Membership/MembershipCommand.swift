/// The small closed set of commands classify sends to membership. Classification decides what an
/// Apple event *means*; membership does only interval arithmetic and bookkeeping.
public struct MembershipCommand: Codable, Sendable, Equatable {
    /// Stable across re-decoding and replays: the same input always yields the same ids.
    public var commandId: String
    public var subscriptionKey: String
    public var action: Action
    /// Human-readable reason, copied into ledger entries (R4).
    public var reason: String
    public var cause: Cause

    public enum Action: Codable, Sendable, Equatable {
        /// Apple's current facts about one purchase; membership grants `[start, end)` cut at `cut`.
        case purchase(PurchaseGrant)
        /// Renewal state of the subscription (auto-renew on/off, pending product, billing retry, grace).
        case renewal(RenewalState)
        /// The subscription belongs to this app user (R6).
        case linkUser(UserLink)
        /// Recorded in the ledger, changes nothing (unknown type, informational notification).
        case record(String)
    }

    public init(commandId: String, subscriptionKey: String, action: Action, reason: String, cause: Cause) {
        self.commandId = commandId
        self.subscriptionKey = subscriptionKey
        self.action = action
        self.reason = reason
        self.cause = cause
    }
}

/// The four product types of R13, plus unknown (recorded, never fatal).
public enum ProductKind: String, Codable, Sendable {
    case autoRenewable = "auto-renewable"
    case nonRenewing = "non-renewing"
    case nonConsumable = "non-consumable"
    case consumable
    case unknown
}

public struct PurchaseGrant: Codable, Sendable, Equatable {
    public var purchaseId: String
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var productKind: ProductKind
    /// The entitlement group the product grants (a subscription group, or the product id itself).
    public var group: String
    public var startMs: Int64
    /// nil = open-ended (non-consumable).
    public var endMs: Int64?
    public var cut: Cut?
    /// For consumables: the catalog quantity to credit.
    public var credit: Int?
    public var finance: FinanceFlags

    public init(purchaseId: String, transactionId: String, originalTransactionId: String, productId: String,
                productKind: ProductKind, group: String, startMs: Int64, endMs: Int64?, cut: Cut? = nil,
                credit: Int? = nil, finance: FinanceFlags = FinanceFlags()) {
        self.purchaseId = purchaseId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.productKind = productKind
        self.group = group
        self.startMs = startMs
        self.endMs = endMs
        self.cut = cut
        self.credit = credit
        self.finance = finance
    }
}

/// Where and why a purchase's interval is cut (R3, R5, R11).
public struct Cut: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case refund          // Apple support refund (V1 CANCEL (c), V1/V2 REFUND)
        case revoke          // family sharing revoked
        case upgrade         // switched to a higher level: immediate, old purchase refunded pro rata
        case crossgrade      // switched within a level, same duration: immediate
        case cancelAndSwitch // V1 CANCEL with auto_renew_status=false and switch markers
    }
    public var atMs: Int64
    public var kind: Kind
    public var appleReason: String?

    public init(atMs: Int64, kind: Kind, appleReason: String? = nil) {
        self.atMs = atMs
        self.kind = kind
        self.appleReason = appleReason
    }
}

/// Per-transaction facts finance reconciles with (R10).
public struct FinanceFlags: Codable, Sendable, Equatable {
    public var isTrial: Bool
    public var isIntro: Bool
    public var promotionalOfferId: String?
    public var offerCodeRefName: String?

    public init(isTrial: Bool = false, isIntro: Bool = false, promotionalOfferId: String? = nil,
                offerCodeRefName: String? = nil) {
        self.isTrial = isTrial
        self.isIntro = isIntro
        self.promotionalOfferId = promotionalOfferId
        self.offerCodeRefName = offerCodeRefName
    }
}

public struct RenewalState: Codable, Sendable, Equatable {
    public var autoRenewStatus: Bool?
    public var productId: String?
    public var autoRenewProductId: String?
    public var isInBillingRetry: Bool?
    public var gracePeriodExpiresMs: Int64?
    public var asOfMs: Int64

    public init(autoRenewStatus: Bool?, productId: String?, autoRenewProductId: String?, isInBillingRetry: Bool?,
                gracePeriodExpiresMs: Int64?, asOfMs: Int64) {
        self.autoRenewStatus = autoRenewStatus
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresMs = gracePeriodExpiresMs
        self.asOfMs = asOfMs
    }
}

public struct UserLink: Codable, Sendable, Equatable {
    public var userId: String
    /// How we know: "receipt-upload", "app-account-token", "application-username".
    public var via: String
    public init(userId: String, via: String) { self.userId = userId; self.via = via }
}
