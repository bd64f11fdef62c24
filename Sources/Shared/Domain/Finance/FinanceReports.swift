import CivilCalendar
import Foundation

/// Finance reconciliation and subscription metrics (issue 17, R10), as pure functions over the
/// per-purchase finance facts (`finance_transactions`, migration 6) so they are tested without
/// PostgreSQL. Days are UTC calendar days (`YYYY-MM-DD`).
public struct FinanceTransaction: Sendable, Equatable {
    public var subscriptionKey: String
    public var purchaseId: String
    public var productId: String
    public var productKind: String
    public var group: String
    public var environment: String
    public var purchaseMs: Int64
    public var expiresMs: Int64?
    public var cancellationMs: Int64?
    public var cutKind: String?
    public var isTrial: Bool
    public var isIntro: Bool
    public var promotionalOfferId: String?
    public var offerCodeRefName: String?
    /// V2 offerType: 1 intro, 2 promotional, 3 offer code, 4 win-back.
    public var offerType: Int?
    public var offerIdentifier: String?
    public var offerDiscountType: String?
    /// Apple's price in milli-units of `currency` (V2 only).
    public var priceMilli: Int64?
    public var currency: String?
    public var isRenewal: Bool
    public var durationDays: Int?
    /// What the ledger granted for the purchase.
    public var grantedStartMs: Int64?
    public var grantedEndMs: Int64?
    /// A family member's access to what the organizer bought (`inAppOwnershipType` FAMILY_SHARED, from V2 or verifyReceipt):
    /// no sale of its own, so it counts in neither the reconciliation's sales nor the metrics.
    public var isFamilyShared: Bool

    /// The days one charge pays for: the product's period, or, for an offer paid up front (one
    /// charge for several periods), the whole period Apple sold.
    var chargedDays: Int64? {
        if offerDiscountType == "PAY_UP_FRONT", let expiresMs, expiresMs > purchaseMs {
            return max(1, (expiresMs - purchaseMs) / CivilDate.dayMs)
        }
        return durationDays.map(Int64.init)
    }

    public init(subscriptionKey: String, purchaseId: String, productId: String, productKind: String, group: String,
                environment: String, purchaseMs: Int64, expiresMs: Int64? = nil, cancellationMs: Int64? = nil,
                cutKind: String? = nil, isTrial: Bool = false, isIntro: Bool = false, promotionalOfferId: String? = nil,
                offerCodeRefName: String? = nil, offerType: Int? = nil, offerIdentifier: String? = nil,
                offerDiscountType: String? = nil, priceMilli: Int64? = nil, currency: String? = nil, isRenewal: Bool = false,
                durationDays: Int? = nil, grantedStartMs: Int64? = nil, grantedEndMs: Int64? = nil, isFamilyShared: Bool = false) {
        self.subscriptionKey = subscriptionKey
        self.purchaseId = purchaseId
        self.productId = productId
        self.productKind = productKind
        self.group = group
        self.environment = environment
        self.purchaseMs = purchaseMs
        self.expiresMs = expiresMs
        self.cancellationMs = cancellationMs
        self.cutKind = cutKind
        self.isTrial = isTrial
        self.isIntro = isIntro
        self.promotionalOfferId = promotionalOfferId
        self.offerCodeRefName = offerCodeRefName
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.offerDiscountType = offerDiscountType
        self.priceMilli = priceMilli
        self.currency = currency
        self.isRenewal = isRenewal
        self.durationDays = durationDays
        self.grantedStartMs = grantedStartMs
        self.grantedEndMs = grantedEndMs
        self.isFamilyShared = isFamilyShared
    }

    public var isFreeTrial: Bool { isTrial || offerDiscountType == "FREE_TRIAL" }
    /// Introductory price (not free): V1 `is_in_intro_offer_period`, V2 offerType 1.
    public var isIntroPrice: Bool { !isFreeTrial && (isIntro || offerType == 1) }
    public var promotionalOffer: String? { promotionalOfferId ?? (offerType == 2 ? offerIdentifier : nil) }
    public var offerCode: String? { offerCodeRefName ?? (offerType == 3 ? offerIdentifier : nil) }
    public var isWinBack: Bool { offerType == 4 }

    /// The time a refund or revocation took back: from the cut (or the start, for a full refund)
    /// to the end of the period; 0 for open-ended purchases and consumables.
    public var timeCutMs: Int64 {
        guard let cut = cancellationMs, let end = expiresMs else { return 0 }
        return max(0, end - max(cut, purchaseMs))
    }
}

public func utcDay(_ ms: Int64) -> String { String(TimeText.iso(ms).prefix(10)) }

/// Midnight UTC of the day `YYYY-MM-DD` (years 0000-9999) in ms, or nil when it is not a real calendar day.
public func utcDayStartMs(_ text: String) -> Int64? {
    let bytes = Array(text.utf8)
    guard bytes.count == 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-") else { return nil }
    func number(_ range: Range<Int>) -> Int64? {
        var value: Int64 = 0
        for byte in bytes[range] {
            guard (48...57).contains(byte) else { return nil }
            value = value * 10 + Int64(byte - 48)
        }
        return value
    }
    guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
          (1...12).contains(month), (1...31).contains(day) else { return nil }
    let days = CivilDate.days(year: year, month: month, day: day)
    // 2025-02-30 is a day in March: refused by the round trip.
    guard CivilDate.date(days: days) == (year, month, day) else { return nil }
    return days * CivilDate.dayMs
}

/// `YYYY-MM-DD` of the UTC day that starts at `ms` (years padded to four digits, as the reports take them).
public func utcDayText(_ ms: Int64) -> String {
    let (year, month, day) = CivilDate.date(days: ms.floorDivided(by: CivilDate.dayMs))
    func padded(_ value: Int64, _ width: Int) -> String {
        let digits = String(value.magnitude)
        return (value < 0 ? "-" : "") + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
    return "\(padded(year, 4))-\(padded(month, 2))-\(padded(day, 2))"
}

public struct ReconcileRow: Codable, Sendable, Equatable {
    public var day: String
    public var environment: String
    public var productId: String
    /// As Apple reported it (nil: Apple did not say, e.g. V1-only facts).
    public var currency: String?
    public var purchases = 0
    public var renewals = 0
    public var freeTrials = 0
    public var introPayAsYouGo = 0
    public var introPayUpFront = 0
    public var introOther = 0
    public var promotionalOffers: [String: Int] = [:]
    public var offerCodes: [String: Int] = [:]
    public var winBackOffers = 0
    public var refunds = 0
    public var refundTimeCutMs: Int64 = 0
    public var revocations = 0
    public var revocationTimeCutMs: Int64 = 0
    /// Sum of Apple's prices of the day's purchases and renewals, milli-units of `currency`.
    public var grossMilli: Int64 = 0

    public init(day: String, environment: String, productId: String, currency: String?) {
        self.day = day
        self.environment = environment
        self.productId = productId
        self.currency = currency
    }

    public static let csvHeader = "day,environment,product_id,currency,purchases,renewals,free_trials,intro_pay_as_you_go,intro_pay_up_front,intro_other,promotional_offers,offer_codes,win_back_offers,refunds,refund_time_cut_ms,revocations,revocation_time_cut_ms,gross_milli"

    public var csvLine: String {
        func map(_ counts: [String: Int]) -> String { counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";") }
        return [day, environment, productId, currency ?? "", "\(purchases)", "\(renewals)", "\(freeTrials)", "\(introPayAsYouGo)",
                "\(introPayUpFront)", "\(introOther)", map(promotionalOffers), map(offerCodes), "\(winBackOffers)", "\(refunds)",
                "\(refundTimeCutMs)", "\(revocations)", "\(revocationTimeCutMs)", "\(grossMilli)"].map(csvField).joined(separator: ",")
    }
}

/// RFC 4180 quoting where needed (product ids and offer ids are Apple's text).
/// A CSV cell. Text a spreadsheet would run as a formula (starting with `=`, `+`, `@`, a tab or a
/// carriage return, or `-` not starting a number) gets a leading apostrophe, as OWASP advises: the
/// ids in these reports come from Apple and the catalog, but an operator opens the file in a spreadsheet.
public func csvField(_ text: String) -> String {
    var cell = text
    if let first = text.utf8.first {
        let formula = first == UInt8(ascii: "=") || first == UInt8(ascii: "+") || first == UInt8(ascii: "@")
            || first == 0x09 || first == 0x0D || (first == UInt8(ascii: "-") && Double(text) == nil)
        if formula { cell = "'" + text }
    }
    guard cell.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return cell }
    return "\"" + cell.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

public enum Reconciliation {
    /// Per day, environment, product and currency: purchases and renewals on their purchase day,
    /// refunds and revocations on the day of the cut. Days outside `[from, to]` are left out. A family
    /// member's access is no sale (Apple pays for the organizer's purchase only): it counts only as a
    /// revocation when taken back.
    public static func rows(_ transactions: [FinanceTransaction], from: String, to: String) -> [ReconcileRow] {
        var rows: [String: ReconcileRow] = [:]
        func update(_ day: String, _ t: FinanceTransaction, _ change: (inout ReconcileRow) -> Void) {
            guard day >= from, day <= to else { return }
            let key = "\(day)|\(t.environment)|\(t.productId)|\(t.currency ?? "")"
            var row = rows[key] ?? ReconcileRow(day: day, environment: t.environment, productId: t.productId, currency: t.currency)
            change(&row)
            rows[key] = row
        }
        for t in transactions {
            if !t.isFamilyShared { update(utcDay(t.purchaseMs), t) { countSale(t, in: &$0) } }
            if let cut = t.cancellationMs, t.cutKind == "refund" || t.cutKind == "revoke" {
                update(utcDay(cut), t) { row in
                    // Apple refunds the organizer; a member's access it takes back. Classify cuts a member's
                    // copy as a revocation; ledgers cut before it did may still say refund.
                    if t.cutKind == "refund", !t.isFamilyShared {
                        row.refunds += 1
                        row.refundTimeCutMs += t.timeCutMs
                    } else {
                        row.revocations += 1
                        row.revocationTimeCutMs += t.timeCutMs
                    }
                }
            }
        }
        return rows.values.sorted { ($0.day, $0.environment, $0.productId, $0.currency ?? "") < ($1.day, $1.environment, $1.productId, $1.currency ?? "") }
    }

    /// A purchase or renewal on its purchase day: the count, its offers and Apple's price.
    private static func countSale(_ t: FinanceTransaction, in row: inout ReconcileRow) {
        if t.isRenewal { row.renewals += 1 } else { row.purchases += 1 }
        if t.isFreeTrial { row.freeTrials += 1 }
        if t.isIntroPrice {
            switch t.offerDiscountType {
            case "PAY_AS_YOU_GO": row.introPayAsYouGo += 1
            case "PAY_UP_FRONT": row.introPayUpFront += 1
            default: row.introOther += 1
            }
        }
        if let offer = t.promotionalOffer { row.promotionalOffers[offer, default: 0] += 1 }
        if let code = t.offerCode { row.offerCodes[code, default: 0] += 1 }
        if t.isWinBack { row.winBackOffers += 1 }
        row.grossMilli = row.grossMilli.saturatingAdding(t.priceMilli ?? 0)
    }
}
