/// Apple's notification vocabulary as typed values, in the shape of Apple's App Store Server
/// Library: the raw string stays in `NotificationMeta.type` / `subtype` (an unknown value is kept
/// and recorded, never a decoding failure) and these enums sit beside it. V1 and V2 name different
/// things alike (V1 CANCEL covers what V2 splits into REFUND and DID_CHANGE_RENEWAL_PREF/UPGRADE),
/// so each version has its own enum.

/// V1 `notification_type`. https://developer.apple.com/documentation/appstoreservernotifications/notification_type
public enum NotificationTypeV1: String, Sendable, CaseIterable {
    case initialBuy = "INITIAL_BUY"
    case cancel = "CANCEL"
    case consumptionRequest = "CONSUMPTION_REQUEST"
    case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
    case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
    case didFailToRenew = "DID_FAIL_TO_RENEW"
    case didRecover = "DID_RECOVER"
    case didRenew = "DID_RENEW"
    case interactiveRenewal = "INTERACTIVE_RENEWAL"
    case priceIncreaseConsent = "PRICE_INCREASE_CONSENT"
    case refund = "REFUND"
    case revoke = "REVOKE"
    /// Retired by Apple in favour of DID_RECOVER; archived bodies still carry it.
    case renewal = "RENEWAL"
}

/// V2 `notificationType`. https://developer.apple.com/documentation/appstoreservernotifications/notificationtype
public enum NotificationTypeV2: String, Sendable, CaseIterable {
    case subscribed = "SUBSCRIBED"
    case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
    case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
    case offerRedeemed = "OFFER_REDEEMED"
    case didRenew = "DID_RENEW"
    case expired = "EXPIRED"
    case didFailToRenew = "DID_FAIL_TO_RENEW"
    case gracePeriodExpired = "GRACE_PERIOD_EXPIRED"
    case priceIncrease = "PRICE_INCREASE"
    case refund = "REFUND"
    case refundDeclined = "REFUND_DECLINED"
    case refundReversed = "REFUND_REVERSED"
    case consumptionRequest = "CONSUMPTION_REQUEST"
    case renewalExtended = "RENEWAL_EXTENDED"
    case renewalExtension = "RENEWAL_EXTENSION"
    case revoke = "REVOKE"
    case test = "TEST"
    case externalPurchaseToken = "EXTERNAL_PURCHASE_TOKEN"
    case oneTimeCharge = "ONE_TIME_CHARGE"
    /// The app's consent was rescinded; the payload carries `appData` instead of `data`.
    case rescindConsent = "RESCIND_CONSENT"
    case metadataUpdate = "METADATA_UPDATE"
    case migration = "MIGRATION"
    case priceChange = "PRICE_CHANGE"
}

/// V2 `subtype`. https://developer.apple.com/documentation/appstoreservernotifications/subtype
public enum NotificationSubtype: String, Sendable, CaseIterable {
    case initialBuy = "INITIAL_BUY"
    case resubscribe = "RESUBSCRIBE"
    case downgrade = "DOWNGRADE"
    case upgrade = "UPGRADE"
    case autoRenewEnabled = "AUTO_RENEW_ENABLED"
    case autoRenewDisabled = "AUTO_RENEW_DISABLED"
    case voluntary = "VOLUNTARY"
    case billingRetry = "BILLING_RETRY"
    case priceIncrease = "PRICE_INCREASE"
    case gracePeriod = "GRACE_PERIOD"
    case pending = "PENDING"
    case accepted = "ACCEPTED"
    case billingRecovery = "BILLING_RECOVERY"
    case productNotForSale = "PRODUCT_NOT_FOR_SALE"
    case summary = "SUMMARY"
    case failure = "FAILURE"
    case unreported = "UNREPORTED"
    case activeTokenReminder = "ACTIVE_TOKEN_REMINDER"
    case created = "CREATED"
}

/// A notification's type, typed by the version that sent it; `unknown` keeps a value this version
/// does not know (recorded in the ledger as such).
public enum NotificationType: Sendable, Equatable {
    case v1(NotificationTypeV1)
    case v2(NotificationTypeV2)
    case unknown(String)

    public init(raw: String, source: EventSource) {
        let upper = raw.uppercased()
        switch source {
        case .notificationV1: self = NotificationTypeV1(rawValue: upper).map(Self.v1) ?? .unknown(raw)
        case .notificationV2: self = NotificationTypeV2(rawValue: upper).map(Self.v2) ?? .unknown(raw)
        case .appReceipt, .verifyReceipt, .serverAPI: self = .unknown(raw)
        }
    }

    /// How it weighs when Apple states other facts at the same instant (ties of `RenewalState.asOfMs`).
    public enum Role: Sendable, Equatable {
        /// Brings a purchase: any other statement at the same instant came after it.
        case purchase
        /// A renewal or recovery: stated after a failure at the same instant (grace recovery keeps
        /// the original renewal date).
        case renewal
        /// Everything else.
        case change
    }

    public var role: Role {
        switch self {
        case .v1(.initialBuy), .v1(.interactiveRenewal), .v2(.subscribed), .v2(.offerRedeemed), .v2(.oneTimeCharge): return .purchase
        case .v1(.didRenew), .v1(.didRecover), .v1(.renewal), .v2(.didRenew): return .renewal
        default: return .change
        }
    }

    /// A renewal failed: billing retry starts (a V1 body may say so only through its type).
    public var failedRenewal: Bool { self == .v1(.didFailToRenew) || self == .v2(.didFailToRenew) }
    /// Billing recovered.
    public var recovered: Bool { self == .v1(.didRecover) }
    /// A refund: its cancellation is a refund whatever switch markers the body carries.
    public var isRefund: Bool { self == .v1(.refund) || self == .v2(.refund) }
    /// Family Sharing access removed.
    public var isRevoke: Bool { self == .v1(.revoke) || self == .v2(.revoke) }
    /// Apple ended the billing grace period. (EXPIRED/BILLING_RETRY comes when the billing retry
    /// period, which outlasts any grace period, is over: it ends nothing Apple still serves.)
    public var endsGrace: Bool { self == .v2(.gracePeriodExpired) }

    /// Types that inform without changing what a purchase grants: recorded as evidence with this
    /// text. nil for types whose facts act (or that repeat what is known and leave no entry).
    public var information: String? {
        switch self {
        case .v1(let type):
            switch type {
            case .consumptionRequest: return "Apple asks for consumption data about a refund request"
            case .priceIncreaseConsent: return "Apple asks the customer to consent to a price increase"
            case .initialBuy, .cancel, .didChangeRenewalPref, .didChangeRenewalStatus, .didFailToRenew, .didRecover,
                 .didRenew, .interactiveRenewal, .refund, .revoke, .renewal:
                return nil
            }
        case .v2(let type):
            switch type {
            case .consumptionRequest: return "Apple asks for consumption data about a refund request"
            case .refundDeclined: return "Apple declined the customer's refund request"
            case .priceIncrease: return "price increase notice"
            case .test: return "test notification"
            case .renewalExtension: return "renewal-date extension request summary"
            case .externalPurchaseToken: return "external purchase token"
            case .metadataUpdate: return "subscription metadata update"
            case .migration: return "subscription migration"
            case .priceChange: return "price change"
            case .rescindConsent: return "consent rescinded"
            case .expired: return "the subscription expired"
            case .gracePeriodExpired: return "the billing grace period ended without recovery"
            case .subscribed, .didChangeRenewalPref, .didChangeRenewalStatus, .offerRedeemed, .didRenew, .didFailToRenew,
                 .refund, .refundReversed, .renewalExtended, .revoke, .oneTimeCharge:
                return nil
            }
        case .unknown:
            return nil
        }
    }
}

extension NotificationMeta {
    /// Apple's raw `notification_type` / `notificationType`, as the library names it.
    public var rawNotificationType: String { type }
    public var rawSubtype: String? { subtype }
    /// The typed subtype (V2), nil when absent or unknown to this version (the raw value stays).
    public var typedSubtype: NotificationSubtype? { subtype.flatMap { NotificationSubtype(rawValue: $0.uppercased()) } }
}

extension AppleEvent {
    /// The typed notification type, nil for receipts.
    public var notificationType: NotificationType? {
        notification.map { NotificationType(raw: $0.type, source: source) }
    }
}
