/// Apple's transaction-level enums, typed beside the raw strings `TransactionFacts` keeps (an
/// unknown value stays raw and is never a decoding failure).

/// V2 `revocationType`. https://developer.apple.com/documentation/appstoreserverapi/revocationtype
public enum RevocationType: String, Sendable, CaseIterable {
    case refundFull = "REFUND_FULL"
    /// Part of the price refunded; `revocationPercentage` says how much.
    case refundProrated = "REFUND_PRORATED"
    /// The purchaser stopped sharing it through Family Sharing.
    case familyRevoke = "FAMILY_REVOKE"
}

/// V2 `offerDiscountType`. https://developer.apple.com/documentation/appstoreserverapi/offerdiscounttype
public enum OfferDiscountType: String, Sendable, CaseIterable {
    case freeTrial = "FREE_TRIAL"
    case payAsYouGo = "PAY_AS_YOU_GO"
    case payUpFront = "PAY_UP_FRONT"
    case oneTime = "ONE_TIME"
}

extension TransactionFacts {
    public var typedRevocationType: RevocationType? { revocationType.flatMap(RevocationType.init(rawValue:)) }
    public var typedOfferDiscountType: OfferDiscountType? { offerDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
    /// A family member's access to what the organizer bought (`inAppOwnershipType`, V2 and verifyReceipt).
    /// https://developer.apple.com/documentation/appstoreserverapi/inappownershiptype
    public var isFamilyShared: Bool { inAppOwnershipType == "FAMILY_SHARED" }
}
