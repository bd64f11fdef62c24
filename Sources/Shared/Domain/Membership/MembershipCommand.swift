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
        /// Apple keeps serving a subscription whose renewal failed, until the grace period ends.
        case gracePeriod(GracePeriodGrant)
        /// Apple ended the billing grace period (GRACE_PERIOD_EXPIRED) at `atMs`.
        case endGrace(GraceEnd)
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
public enum ProductKind: String, Codable, Sendable, CaseIterable {
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
    /// The purchase second (R1: Apple's milliseconds differ between copies of one purchase).
    public var startMs: Int64
    /// nil = open-ended (non-consumable).
    public var endMs: Int64?
    public var cut: Cut?
    /// For consumables: the units to credit (catalog credits × quantity).
    public var credit: Int?
    public var finance: FinanceFlags
    /// The product's level and duration from the catalog (R5): lets membership name a switch
    /// (upgrade, crossgrade, downgrade) when a later purchase supersedes this one.
    public var level: Int?
    public var durationDays: Int?
    /// Whether the catalog knows the product (unknown products are granted from Apple's facts and
    /// flagged, never dropped).
    public var inCatalog: Bool?
    public var environment: String?

    /// A replay found this purchase is none of its own (merged into another, or dropped): its grant is
    /// taken back whole (`Cut.Kind.correction`), and it counts as no purchase anywhere.
    public var isTakenBack: Bool { cut?.kind == .correction }

    public init(purchaseId: String, transactionId: String, originalTransactionId: String, productId: String,
                productKind: ProductKind, group: String, startMs: Int64, endMs: Int64?, cut: Cut? = nil,
                credit: Int? = nil, finance: FinanceFlags = FinanceFlags(), level: Int? = nil, durationDays: Int? = nil,
                inCatalog: Bool? = nil, environment: String? = nil) {
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
        self.level = level
        self.durationDays = durationDays
        self.inCatalog = inCatalog
        self.environment = environment
    }
}

/// Where and why a purchase's interval is cut (R3, R5, R11).
public struct Cut: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case refund          // Apple support refund (V1 CANCEL (c), V1/V2 REFUND)
        case revoke          // family sharing revoked (V2 REVOKE, revocationType FAMILY_REVOKE)
        case upgrade         // switched to a higher level: immediate, old purchase refunded pro rata
        case crossgrade      // switched within a level, same duration: immediate
        case downgrade       // switched to a lower level (normally at renewal; immediate only if Apple says so)
        case `switch`        // switched within the group, levels unknown to the catalog
        case cancelAndSwitch // V1 CANCEL with auto_renew_status=false and switch markers (R3 b)
        /// Not Apple's: a replay after a fix found that the purchase is none of its own (issue 13).
        case correction = "replay-correction"
    }
    public var atMs: Int64
    public var kind: Kind
    public var appleReason: String?
    /// V2 REFUND_PRORATED: the refunded share in thousandths of a percent (100000 = all of it).
    /// A consumable's debit is that share of its credit; a subscription is still cut at `atMs`.
    public var refundedShare: Int?

    public init(atMs: Int64, kind: Kind, appleReason: String? = nil, refundedShare: Int? = nil) {
        self.atMs = atMs
        self.kind = kind
        self.appleReason = appleReason
        self.refundedShare = refundedShare
    }

    /// The units a refund takes back of `credit`: all of them, or for a prorated refund the refunded
    /// share rounded to the nearest unit (halves up), never more than the credit.
    public func refundedUnits(of credit: Int) -> Int {
        guard let share = refundedShare.map({ min(max($0, 0), 100_000) }) else { return credit }
        let (scaled, overflow) = credit.multipliedReportingOverflow(by: share)
        guard !overflow else { return credit }
        return min(credit, (scaled + 50_000) / 100_000)
    }
}

/// Per-transaction facts finance reconciles with (R10), normalized over V1 and V2: V2's
/// `offerType` 1/2/3 fill `isIntro` / `promotionalOfferId` / `offerCodeRefName`.
public struct FinanceFlags: Codable, Sendable, Equatable {
    public var isTrial: Bool
    public var isIntro: Bool
    public var promotionalOfferId: String?
    public var offerCodeRefName: String?
    /// V2 raw offer type (1 intro, 2 promotional, 3 offer code, 4 win-back) and identifier.
    public var offerType: Int?
    public var offerIdentifier: String?
    /// V2 `offerDiscountType` (FREE_TRIAL, PAY_AS_YOU_GO, PAY_UP_FRONT, ONE_TIME) and `offerPeriod`
    /// (ISO 8601 duration): whether an offer period was free or paid, and for how long (R10).
    public var offerDiscountType: String?
    public var offerPeriod: String?
    /// V2 `billingPlanType` and `commitmentInfo`: a charge that is one period of a longer commitment
    /// (kept in the finance row's `grant_facts`).
    public var billingPlanType: String?
    public var commitment: CommitmentInfo?

    public init(isTrial: Bool = false, isIntro: Bool = false, promotionalOfferId: String? = nil,
                offerCodeRefName: String? = nil, offerType: Int? = nil, offerIdentifier: String? = nil,
                offerDiscountType: String? = nil, offerPeriod: String? = nil, billingPlanType: String? = nil,
                commitment: CommitmentInfo? = nil) {
        self.isTrial = isTrial
        self.isIntro = isIntro
        self.promotionalOfferId = promotionalOfferId
        self.offerCodeRefName = offerCodeRefName
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.offerDiscountType = offerDiscountType
        self.offerPeriod = offerPeriod
        self.billingPlanType = billingPlanType
        self.commitment = commitment
    }
}

public struct RenewalState: Codable, Sendable, Equatable {
    public var autoRenewStatus: Bool?
    public var productId: String?
    public var autoRenewProductId: String?
    public var isInBillingRetry: Bool?
    public var gracePeriodExpiresMs: Int64?
    /// When Apple stated these facts (signed date, status change date, or the latest date in the
    /// input): older news never overwrites newer (S15). Ties break on `sourceEventId`.
    public var asOfMs: Int64
    /// R5: what `autoRenewProductId` is to `productId` ("downgrade", "crossgrade-at-renewal", ...).
    public var pendingChange: String?
    public var expirationIntent: String?
    public var priceIncreaseStatus: String?
    /// Breaks ties of `asOfMs`: a change notification (1) stated at the same instant as a purchase
    /// (0) happened after it; then `sourceEventId` decides, so every order gives the same state.
    public var asOfRank: Int?
    public var sourceEventId: String?

    public init(autoRenewStatus: Bool?, productId: String?, autoRenewProductId: String?, isInBillingRetry: Bool?,
                gracePeriodExpiresMs: Int64?, asOfMs: Int64, pendingChange: String? = nil, expirationIntent: String? = nil,
                priceIncreaseStatus: String? = nil, asOfRank: Int? = nil, sourceEventId: String? = nil) {
        self.autoRenewStatus = autoRenewStatus
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.isInBillingRetry = isInBillingRetry
        self.gracePeriodExpiresMs = gracePeriodExpiresMs
        self.asOfMs = asOfMs
        self.pendingChange = pendingChange
        self.expirationIntent = expirationIntent
        self.priceIncreaseStatus = priceIncreaseStatus
        self.asOfRank = asOfRank
        self.sourceEventId = sourceEventId
    }

    /// Which of two statements is the newer news.
    func isNewer(than other: RenewalState) -> Bool {
        (asOfMs, asOfRank ?? 0, sourceEventId ?? "") > (other.asOfMs, other.asOfRank ?? 0, other.sourceEventId ?? "")
    }

    /// Whether this newer statement says nothing new compared with `other`, whatever the time stamp;
    /// a fact this statement does not mention (nil) is no change (a V1 CANCEL body says nothing
    /// about billing retry), and "not in billing retry" after nothing was said is no news either.
    func sameFacts(as other: RenewalState) -> Bool {
        func same<T: Equatable>(_ old: T?, _ new: T?) -> Bool { new == nil || old == new }
        return same(other.autoRenewStatus, autoRenewStatus) && same(other.productId, productId)
            && same(other.autoRenewProductId, autoRenewProductId) && (same(other.isInBillingRetry, isInBillingRetry) || (other.isInBillingRetry == nil && isInBillingRetry == false))
            && same(other.gracePeriodExpiresMs, gracePeriodExpiresMs) && pendingChange == other.pendingChange
            && same(other.expirationIntent, expirationIntent) && same(other.priceIncreaseStatus, priceIncreaseStatus)
    }
}

public struct UserLink: Codable, Sendable, Equatable {
    public var userId: String
    /// How we know: "receipt-upload", "app-account-token", or "app-account-token-renewal" (a token
    /// only renewals repeat: a provisional claim, replaced by the purchase's own once seen).
    public var via: String
    /// What to do when the subscription already belongs to another user (catalog `accounts.transfer`).
    public var transfer: AccountPolicy.TransferPolicy
    /// R17: when the claim was made, so that the latest claim owns the subscription whatever order
    /// the inputs arrive in. A receipt upload claims when it was uploaded; a token claims when the
    /// first purchase that carries it was made (a renewal repeating it makes no new claim).
    public var claimedAtMs: Int64?

    public static let receiptUpload = "receipt-upload"
    public static let appAccountToken = "app-account-token"
    public static let renewedAppAccountToken = "app-account-token-renewal"
    /// The owner a subscription had before its claims were kept (keep-first counts it first).
    public static let ownerBeforeClaims = "owner-before-claims"

    public init(userId: String, via: String, transfer: AccountPolicy.TransferPolicy = .move, claimedAtMs: Int64? = nil) {
        self.userId = userId
        self.via = via
        self.transfer = transfer
        self.claimedAtMs = claimedAtMs
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userId = try container.decode(String.self, forKey: .userId)
        via = try container.decode(String.self, forKey: .via)
        transfer = try container.decodeIfPresent(AccountPolicy.TransferPolicy.self, forKey: .transfer) ?? .move
        claimedAtMs = try container.decodeIfPresent(Int64.self, forKey: .claimedAtMs)
    }

    /// Receipt uploads are the stronger claim at the same instant: a restore follows the purchase.
    var isUpload: Bool { via == UserLink.receiptUpload }
}

/// Service Apple keeps giving during a billing grace period: `[from, until)`; `from` is the end of
/// the period that failed to renew (nil: membership takes the latest period end it knows).
public struct GracePeriodGrant: Codable, Sendable, Equatable {
    public var productId: String?
    public var group: String?
    public var fromMs: Int64?
    public var untilMs: Int64

    public init(productId: String?, group: String?, fromMs: Int64?, untilMs: Int64) {
        self.productId = productId
        self.group = group
        self.fromMs = fromMs
        self.untilMs = untilMs
    }
}

/// Apple said the billing grace period is over at `atMs` (GRACE_PERIOD_EXPIRED): a grace
/// window that contains the instant ends there, even if it was granted longer.
public struct GraceEnd: Codable, Sendable, Equatable {
    public var productId: String?
    public var group: String?
    public var atMs: Int64

    public init(productId: String?, group: String?, atMs: Int64) {
        self.productId = productId
        self.group = group
        self.atMs = atMs
    }
}
