/// V2 `commitmentInfo` of a transaction: a subscription committed to for several billing periods
/// (e.g. a year paid monthly, `billingPlanType` MONTHLY). Finance needs which period of how many this
/// charge is, the committed total and when the commitment ends (R10, R19).
/// https://developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload
public struct CommitmentInfo: Codable, Sendable, Equatable {
    /// This charge's number within the commitment (1-based).
    public var billingPeriodNumber: Int?
    public var totalBillingPeriods: Int?
    public var commitmentExpiresDateMs: Int64?
    /// The whole commitment's price, in milli-units of the transaction's currency.
    public var commitmentPrice: Int64?

    public init(billingPeriodNumber: Int? = nil, totalBillingPeriods: Int? = nil, commitmentExpiresDateMs: Int64? = nil,
                commitmentPrice: Int64? = nil) {
        self.billingPeriodNumber = billingPeriodNumber
        self.totalBillingPeriods = totalBillingPeriods
        self.commitmentExpiresDateMs = commitmentExpiresDateMs
        self.commitmentPrice = commitmentPrice
    }
}
