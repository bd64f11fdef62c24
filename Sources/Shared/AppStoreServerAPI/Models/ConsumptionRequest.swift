/// Send Consumption Information (v2, 2025): what StoreLedger tells Apple when a customer asks
/// for a refund (CONSUMPTION_REQUEST). https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest
public struct ConsumptionRequest: Codable, Sendable, Equatable {
    /// Apple requires the customer's consent to share consumption data; without it the request is refused.
    public var customerConsented: Bool
    /// Thousandths of a percent consumed, 0...100000 (consumables and non-renewing subscriptions).
    public var consumptionPercentage: Int32?
    public var deliveryStatus: String
    public var refundPreference: String?
    public var sampleContentProvided: Bool

    public init(customerConsented: Bool, consumptionPercentage: Int32? = nil, deliveryStatus: DeliveryStatus,
                refundPreference: RefundPreference? = nil, sampleContentProvided: Bool) {
        self.customerConsented = customerConsented
        self.consumptionPercentage = consumptionPercentage
        self.deliveryStatus = deliveryStatus.rawValue
        self.refundPreference = refundPreference?.rawValue
        self.sampleContentProvided = sampleContentProvided
    }

    /// Why we will not send it, or nil.
    public var problem: String? {
        if !customerConsented { return "customerConsented must be true: Apple accepts consumption data only with the customer's consent" }
        if let percentage = consumptionPercentage, !(0...100_000).contains(percentage) {
            return "consumptionPercentage \(percentage) is outside 0...100000"
        }
        if DeliveryStatus(rawValue: deliveryStatus) == nil { return "unknown deliveryStatus" }
        if let preference = refundPreference, RefundPreference(rawValue: preference) == nil { return "unknown refundPreference" }
        return nil
    }
}

/// https://developer.apple.com/documentation/appstoreserverapi/deliverystatus
public enum DeliveryStatus: String, Codable, Sendable, CaseIterable {
    case delivered = "DELIVERED"
    case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
    case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
    case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
    case undeliveredOther = "UNDELIVERED_OTHER"
}

/// https://developer.apple.com/documentation/appstoreserverapi/refundpreference
public enum RefundPreference: String, Codable, Sendable, CaseIterable {
    case decline = "DECLINE"
    case grantFull = "GRANT_FULL"
    case grantProrated = "GRANT_PRORATED"
}
