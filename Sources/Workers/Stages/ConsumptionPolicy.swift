import AppStoreServerAPI
import Configuration
import Domain
import Foundation
import Store

/// How StoreLedger answers Apple's CONSUMPTION_REQUEST (a customer asked for a refund): pure,
/// from the ledger's facts about the purchase and its owner (docs/app-store-server-api.md,
/// "Consumption answers"). Every threshold is configuration; the defaults are the policy below.
///
/// - `customerConsented`: the app's terms record the customer's consent to share consumption data.
///   Apple accepts nothing without it, so with `false` no answer is sent (recorded as not-sent).
/// - `deliveryStatus`: DELIVERED when the ledger granted the purchase, else UNDELIVERED_OTHER.
/// - `consumptionPercentage` (milli-percent): for a non-renewing subscription, the share of its
///   period elapsed when Apple asked; 0 for anything undelivered; none for one-time products
///   (StoreLedger cannot see use) and never for an auto-renewable subscription: Apple refuses it
///   there (ConsumptionPercentageAutoRenewableSubscriptionError) and works the share out itself.
/// - `refundPreference`: GRANT_FULL when nothing was delivered or less than `grantFullBelowPercent`
///   of the period was consumed; DECLINE from `declineFromPercent` on, or when the customer already
///   had `declineAfterRefunds` refunds; GRANT_PRORATED between (GRANT_FULL instead where Apple would
///   need a share above 0 and none was consumed); none when the share is unknown.
/// - `sampleContentProvided`: the customer had a free trial or introductory offer in the group.
/// https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest
public struct ConsumptionPolicy: Sendable, Codable, Equatable {
    public var name = "ledger-v1"
    public var customerConsented = true
    public var grantFullBelowPercent = 10
    public var declineFromPercent = 50
    public var declineAfterRefunds = 2

    public init() {}

    /// From the consumption settings (`ConsumptionConfiguration`; bounds checked by the reader).
    public init(_ settings: ConsumptionConfiguration) throws {
        customerConsented = settings.customerConsented ?? customerConsented
        grantFullBelowPercent = settings.grantFullBelowPercent ?? grantFullBelowPercent
        declineFromPercent = settings.declineFromPercent ?? declineFromPercent
        declineAfterRefunds = settings.declineAfterRefunds ?? declineAfterRefunds
        guard grantFullBelowPercent <= declineFromPercent else {
            throw ConsumptionPolicyError("the grant-full threshold must not exceed the decline threshold")
        }
        if let name = settings.policyName { self.name = String(name.prefix(64)) }
    }

    /// What the ledger says, as recorded beside the answer (the evidence behind each value).
    public struct Assessment: Sendable, Codable, Equatable {
        public var delivered: Bool
        /// Milli-percent of the granted period elapsed at the request; nil when not time-based.
        public var consumedMilliPercent: Int32?
        public var lifetimePurchases: Int
        public var lifetimeRefunds: Int
        public var accountTenureDays: Int?
        public var sampleContentProvided: Bool
    }

    public func assess(_ facts: ServerAPIStore.PurchaseFacts?, requestedAtMs: Int64) -> Assessment {
        guard let facts else {
            return Assessment(delivered: false, consumedMilliPercent: nil, lifetimePurchases: 0, lifetimeRefunds: 0,
                              accountTenureDays: nil, sampleContentProvided: false)
        }
        var consumed: Int32?
        if let start = facts.grantedStartMs, let end = facts.grantedEndMs, end > start {
            // Dates come from the ledger, bounded at decode; clamp before dividing so no value traps.
            let elapsed = min(max(requestedAtMs, start), end) - start
            consumed = Int32((Double(elapsed) / Double(end - start) * 100_000).rounded(.down))
        }
        let tenure = facts.firstPurchaseMs.map { Int(max(0, requestedAtMs.saturatingSubtracting($0)) / 86_400_000) }
        return Assessment(delivered: facts.grantedStartMs != nil || facts.credited, consumedMilliPercent: consumed, lifetimePurchases: facts.lifetimePurchases,
                          lifetimeRefunds: facts.lifetimeRefunds, accountTenureDays: tenure, sampleContentProvided: facts.hadTrialOrIntro)
    }

    /// The body to send, or nil when the policy sends nothing (no consent). `autoRenewable`: the
    /// purchase is an auto-renewable subscription period, for which Apple takes no percentage.
    public func request(for assessment: Assessment, autoRenewable: Bool) -> ConsumptionRequest? {
        guard customerConsented else { return nil }
        guard assessment.delivered else {
            return ConsumptionRequest(customerConsented: true, consumptionPercentage: autoRenewable ? nil : 0, deliveryStatus: .undeliveredOther,
                                      refundPreference: .grantFull, sampleContentProvided: assessment.sampleContentProvided)
        }
        var preference: RefundPreference?
        if assessment.lifetimeRefunds >= declineAfterRefunds {
            preference = .decline
        } else if let consumed = assessment.consumedMilliPercent {
            let percent = Int(consumed) / 1000
            preference = percent < grantFullBelowPercent ? .grantFull : percent >= declineFromPercent ? .decline : .grantProrated
            // Apple takes GRANT_PRORATED with a stated share only when that share is above 0.
            if preference == .grantProrated, !autoRenewable, consumed == 0 { preference = .grantFull }
        }
        return ConsumptionRequest(customerConsented: true, consumptionPercentage: autoRenewable ? nil : assessment.consumedMilliPercent,
                                  deliveryStatus: .delivered, refundPreference: preference, sampleContentProvided: assessment.sampleContentProvided)
    }
}

public struct ConsumptionPolicyError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
