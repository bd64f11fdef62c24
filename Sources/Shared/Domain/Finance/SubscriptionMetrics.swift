import CivilCalendar
import Foundation

/// Subscription metrics per day, environment and product, from the same finance facts as the
/// reconciliation (auto-renewable purchases only).
public struct MetricsRow: Codable, Sendable, Equatable {
    public var day: String
    public var environment: String
    public var productId: String
    /// Subscriptions whose granted period covers the day's last millisecond (paid and trial).
    public var activeSubscriptions = 0
    public var activeTrials = 0
    /// Monthly recurring revenue of the paid active subscriptions, per currency, milli-units
    /// (price × 30 / period days), as Apple priced them.
    public var mrrMilli: [String: Int64] = [:]
    /// First purchases of a subscription.
    public var newSubscriptions = 0
    /// Free trials whose period ended this day, and how many of them were followed by a paid renewal.
    public var trialsEnded = 0
    public var trialsConverted = 0
    /// Subscriptions whose entitlement ended this day for good: renewal turned off (voluntary) or a
    /// failed charge (billing: billing retry or Apple's billing expiration intent).
    public var churnedVoluntary = 0
    public var churnedBilling = 0
    public var refunds = 0
    /// Purchases and renewals charged this day (free trials charge nothing).
    public var charges = 0

    public var refundRate: Double? { charges == 0 ? nil : Double(refunds) / Double(charges) }
    public var trialConversionRate: Double? { trialsEnded == 0 ? nil : Double(trialsConverted) / Double(trialsEnded) }

    public init(day: String, environment: String, productId: String) {
        self.day = day
        self.environment = environment
        self.productId = productId
    }

    public static let csvHeader = "day,environment,product_id,active_subscriptions,active_trials,mrr_milli,new_subscriptions,trials_ended,trials_converted,trial_conversion_rate,churned_voluntary,churned_billing,refunds,charges,refund_rate"

    public var csvLine: String {
        let mrr = mrrMilli.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
        func rate(_ value: Double?) -> String { value.map { String(format: "%.4f", $0) } ?? "" }
        return [day, environment, productId, "\(activeSubscriptions)", "\(activeTrials)", mrr, "\(newSubscriptions)", "\(trialsEnded)",
                "\(trialsConverted)", rate(trialConversionRate), "\(churnedVoluntary)", "\(churnedBilling)", "\(refunds)", "\(charges)",
                rate(refundRate)].map(csvField).joined(separator: ",")
    }
}

/// How a subscription's renewal stood last (from its state), for churn.
public struct RenewalStanding: Sendable, Equatable {
    public var autoRenewStatus: Bool?
    public var isInBillingRetry: Bool?
    public var expirationIntent: String?
    public init(autoRenewStatus: Bool?, isInBillingRetry: Bool?, expirationIntent: String?) {
        self.autoRenewStatus = autoRenewStatus
        self.isInBillingRetry = isInBillingRetry
        self.expirationIntent = expirationIntent
    }
    /// Apple's expirationIntent 2 = billing error.
    var isBilling: Bool { isInBillingRetry == true || expirationIntent == "2" }
}

public enum SubscriptionMetrics {
    /// - Parameters:
    ///   - renewals: per subscription key, its latest renewal facts (churn kind).
    ///   - nowMs: entitlements ending after this have not churned yet.
    public static func rows(_ all: [FinanceTransaction], renewals: [String: RenewalStanding], from: String, to: String,
                            nowMs: Int64) -> [MetricsRow] {
        // A family member's access is no paid subscription of its own (FinanceTransaction.isFamilyShared).
        let transactions = all.filter { $0.productKind == ProductKind.autoRenewable.rawValue && !$0.isFamilyShared }
        // The days a report covers: a period's days outside them are not walked at all (a one-day
        // report over years of history walked every day of every period).
        let firstDayMs = utcDayStartMs(from) ?? Int64.min / 2
        let afterLastDayMs = (utcDayStartMs(to) ?? Int64.max / 2).saturatingAdding(CivilDate.dayMs)
        var rows: [String: MetricsRow] = [:]
        func update(_ day: String, _ environment: String, _ product: String, _ change: (inout MetricsRow) -> Void) {
            guard day >= from, day <= to else { return }
            let key = "\(day)|\(environment)|\(product)"
            var row = rows[key] ?? MetricsRow(day: day, environment: environment, productId: product)
            change(&row)
            rows[key] = row
        }
        let bySubscription = Dictionary(grouping: transactions, by: \.subscriptionKey)
            .mapValues { $0.sorted { ($0.purchaseMs, $0.purchaseId) < ($1.purchaseMs, $1.purchaseId) } }
        for (key, list) in bySubscription {
            for (index, t) in list.enumerated() {
                let day = utcDay(t.purchaseMs)
                update(day, t.environment, t.productId) { row in
                    if !t.isFreeTrial { row.charges += 1 }   // a free trial charges nothing
                    if index == 0 && !t.isRenewal { row.newSubscriptions += 1 }
                }
                if t.cutKind == "refund", let cut = t.cancellationMs { update(utcDay(cut), t.environment, t.productId) { $0.refunds += 1 } }
                // A trial ends once: not before its end has come (a report reaching into the future).
                if t.isFreeTrial, let end = t.expiresMs, end <= nowMs {
                    // Converted: the next period is paid and follows the trial (its renewal, a billing
                    // recovery, or a switch made during the trial); a purchase after a lapse is not.
                    let next = list.indices.contains(index + 1) ? list[index + 1] : nil
                    let converted = next.map { !$0.isFreeTrial && ($0.isRenewal || $0.purchaseMs <= end + CivilDate.dayMs) } ?? false
                    update(utcDay(end), t.environment, t.productId) { row in
                        row.trialsEnded += 1
                        if converted { row.trialsConverted += 1 }
                    }
                }
                // Active at the end of each day its granted period covers.
                if let start = t.grantedStartMs, let end = t.grantedEndMs, end > start {
                    var dayStart = max(start.floorDivided(by: CivilDate.dayMs) * CivilDate.dayMs, firstDayMs)
                    while dayStart < min(end, afterLastDayMs) {
                        let last = dayStart + CivilDate.dayMs - 1
                        if last >= start && last < end {
                            update(utcDay(dayStart), t.environment, t.productId) { row in
                                row.activeSubscriptions += 1
                                if t.isFreeTrial {
                                    row.activeTrials += 1
                                } else if let price = t.priceMilli, let currency = t.currency, let days = t.chargedDays, days > 0 {
                                    row.mrrMilli[currency, default: 0] += price * 30 / days
                                }
                            }
                        }
                        dayStart += CivilDate.dayMs
                    }
                }
            }
            // Churn: the subscription's last granted end, once it has passed.
            if let last = list.filter({ $0.grantedEndMs != nil }).max(by: { $0.grantedEndMs! < $1.grantedEndMs! }),
               let end = last.grantedEndMs, end <= nowMs {
                let standing = renewals[key]
                update(utcDay(end), last.environment, last.productId) { row in
                    if standing?.isBilling == true { row.churnedBilling += 1 } else { row.churnedVoluntary += 1 }
                }
            }
        }
        return rows.values.sorted { ($0.day, $0.environment, $0.productId) < ($1.day, $1.environment, $1.productId) }
    }
}
