import Foundation
@testable import Domain
import XCTest

/// Issue 17's pure pieces: the webhook retry schedule and signature header, the reconciliation
/// and metrics arithmetic on hand-made finance facts.
final class WebhookAndReportTests: XCTestCase {
    /// The webhooks file may name only some of the retry fields.
    func testARetryPolicyWithSomeFieldsTakesTheDefaultsForTheRest() throws {
        let partial = try JSONDecoder().decode(WebhookRetryPolicy.self, from: Data(#"{"baseDelayMs":200,"maxDelayMs":1000}"#.utf8))
        XCTAssertEqual(partial, WebhookRetryPolicy(baseDelayMs: 200, maxDelayMs: 1000))
        XCTAssertEqual(try JSONDecoder().decode(WebhookRetryPolicy.self, from: Data("{}".utf8)), WebhookRetryPolicy())
        XCTAssertThrowsError(try JSONDecoder().decode(WebhookRetryPolicy.self, from: Data(#"{"baseDelayMs":"soon"}"#.utf8)))
    }

    func testRetryBacksOffExponentiallyUpToTheCapAndGivesUpAfter72Hours() {
        let policy = WebhookRetryPolicy()
        let first: Int64 = 1_000_000
        XCTAssertEqual(policy.afterFailure(attempts: 1, firstAttemptMs: first, nowMs: first), .retry(atMs: first + 10_000))
        XCTAssertEqual(policy.afterFailure(attempts: 3, firstAttemptMs: first, nowMs: first + 100), .retry(atMs: first + 100 + 40_000))
        XCTAssertEqual(policy.afterFailure(attempts: 30, firstAttemptMs: first, nowMs: first + 5_000), .retry(atMs: first + 5_000 + 3_600_000),
                       "capped at an hour")
        let nearEnd = first + 72 * 3_600_000 - 60_000
        XCTAssertEqual(policy.afterFailure(attempts: 80, firstAttemptMs: first, nowMs: nearEnd), .retry(atMs: first + 72 * 3_600_000),
                       "the last try lands inside the window")
        XCTAssertEqual(policy.afterFailure(attempts: 81, firstAttemptMs: first, nowMs: first + 72 * 3_600_000), .giveUp)
    }

    func testSignatureHeaderRoundTrips() {
        let value = WebhookSignature.headerValue(timestamp: 1_700_000_000, mac: [0x01, 0xab, 0xff])
        XCTAssertEqual(value, "t=1700000000,v1=01abff")
        XCTAssertEqual(WebhookSignature.parse(value)?.timestamp, 1_700_000_000)
        XCTAssertEqual(WebhookSignature.parse("t=5, v1=aa,v1=bb")?.signatures, ["aa", "bb"])
        XCTAssertNil(WebhookSignature.parse("v1=aa"))
        XCTAssertEqual(WebhookSignature.signedPayload(timestamp: 7, body: Array("{}".utf8)), Array("7.{}".utf8))
    }

    let day: Int64 = 86_400_000
    let jan1: Int64 = 1_735_689_600_000   // 2025-01-01T00:00:00Z

    func testReconciliationCountsOffersAndTheTimeARefundCut() {
        let trial = FinanceTransaction(subscriptionKey: "s", purchaseId: "p1", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                       environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 7 * day, offerType: 1,
                                       offerDiscountType: "FREE_TRIAL", priceMilli: 0, currency: "USD")
        var renewal = FinanceTransaction(subscriptionKey: "s", purchaseId: "p2", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                         environment: "Production", purchaseMs: jan1 + 7 * day, expiresMs: jan1 + 37 * day,
                                         priceMilli: 9_990, currency: "USD", isRenewal: true)
        renewal.cancellationMs = jan1 + 17 * day
        renewal.cutKind = "refund"
        let promo = FinanceTransaction(subscriptionKey: "t", purchaseId: "q", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                       environment: "Sandbox", purchaseMs: jan1 + 7 * day, offerType: 2, offerIdentifier: "winback",
                                       offerDiscountType: "PAY_UP_FRONT")
        let rows = Reconciliation.rows([trial, renewal, promo], from: "2025-01-01", to: "2025-01-31")
        XCTAssertEqual(rows.map(\.day), ["2025-01-01", "2025-01-08", "2025-01-08", "2025-01-18"])
        XCTAssertEqual(rows[0].freeTrials, 1)
        XCTAssertEqual(rows[0].purchases, 1)
        XCTAssertEqual(rows[1].environment, "Production")
        XCTAssertEqual(rows[1].renewals, 1)
        XCTAssertEqual(rows[1].grossMilli, 9_990)
        XCTAssertEqual(rows[2].environment, "Sandbox", "sandbox apart")
        XCTAssertEqual(rows[2].promotionalOffers, ["winback": 1])
        XCTAssertEqual(rows[2].introPayUpFront, 0, "a promotional offer is no intro offer")
        XCTAssertEqual(rows[3].refunds, 1)
        XCTAssertEqual(rows[3].refundTimeCutMs, 20 * day)
        XCTAssertEqual(rows[0].csvLine, "2025-01-01,Production,vip.1m,USD,1,0,1,0,0,0,,,0,0,0,0,0,0")
        XCTAssertEqual(csvField("a,\"b\""), "\"a,\"\"b\"\"\"")
        // Formulas are neutralised; numbers, negative ones too, stay numbers.
        XCTAssertEqual(csvField("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"")
        XCTAssertEqual(["+1+1", "@SUM(A1)", "-cmd", "\tx"].map(csvField), ["'+1+1", "'@SUM(A1)", "'-cmd", "'\tx"])
        XCTAssertEqual(["-4990", "-0.5", "12", "vip.1m", ""].map(csvField), ["-4990", "-0.5", "12", "vip.1m", ""])
    }

    func testMetricsActiveTrialsConversionMRRAndChurn() {
        let trial = FinanceTransaction(subscriptionKey: "s", purchaseId: "p1", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                       environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 2 * day, isTrial: true,
                                       grantedStartMs: jan1, grantedEndMs: jan1 + 2 * day)
        let paid = FinanceTransaction(subscriptionKey: "s", purchaseId: "p2", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                      environment: "Production", purchaseMs: jan1 + 2 * day, expiresMs: jan1 + 32 * day, priceMilli: 9_990,
                                      currency: "EUR", isRenewal: true, durationDays: 30, grantedStartMs: jan1 + 2 * day,
                                      grantedEndMs: jan1 + 32 * day)
        let rows = SubscriptionMetrics.rows([trial, paid], renewals: ["s": RenewalStanding(autoRenewStatus: false, isInBillingRetry: nil, expirationIntent: "1")],
                                            from: "2025-01-01", to: "2025-02-28", nowMs: jan1 + 100 * day)
        let byDay = Dictionary(uniqueKeysWithValues: rows.map { ($0.day, $0) })
        XCTAssertEqual(byDay["2025-01-01"]?.newSubscriptions, 1)
        XCTAssertEqual(byDay["2025-01-01"]?.activeTrials, 1)
        XCTAssertEqual(byDay["2025-01-03"]?.trialsEnded, 1)
        XCTAssertEqual(byDay["2025-01-03"]?.trialsConverted, 1)
        XCTAssertEqual(byDay["2025-01-03"]?.trialConversionRate, 1)
        XCTAssertEqual(byDay["2025-01-03"]?.mrrMilli, ["EUR": 9_990])
        XCTAssertEqual(byDay["2025-01-03"]?.activeTrials, 0)
        XCTAssertEqual(byDay["2025-02-01"]?.activeSubscriptions, 1)
        XCTAssertEqual(byDay["2025-02-02"]?.activeSubscriptions, 0, "the period ends at the day's start: not active at its end")
        XCTAssertEqual(byDay["2025-02-02"]?.churnedVoluntary, 1)
        XCTAssertEqual(byDay["2025-02-02"]?.churnedBilling, 0)
    }

    /// A free trial charges nothing (refund rate = refunds / charges); an offer paid up front is one
    /// charge for its whole period, so it counts in MRR spread over that period, not the product's.
    func testChargesLeaveTrialsOutAndPayUpFrontSpreadsOverTheWholeOffer() {
        let trial = FinanceTransaction(subscriptionKey: "t", purchaseId: "p1", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                       environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 7 * day, isTrial: true,
                                       grantedStartMs: jan1, grantedEndMs: jan1 + 7 * day)
        let upFront = FinanceTransaction(subscriptionKey: "u", purchaseId: "p2", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                         environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 90 * day, isIntro: true,
                                         offerDiscountType: "PAY_UP_FRONT", priceMilli: 9_000, currency: "EUR", durationDays: 30,
                                         grantedStartMs: jan1, grantedEndMs: jan1 + 90 * day)
        let rows = SubscriptionMetrics.rows([trial, upFront], renewals: [:], from: "2025-01-01", to: "2025-01-31", nowMs: jan1 + 100 * day)
        let first = rows.first { $0.day == "2025-01-01" }
        XCTAssertEqual(first?.charges, 1, "the trial is no charge")
        XCTAssertEqual(first?.newSubscriptions, 2)
        XCTAssertEqual(first?.mrrMilli, ["EUR": 3_000], "9.00 for three months is 3.00 a month")
    }

    /// A report's days are the only ones walked, with the same rows as a wider report's; a trial whose
    /// end has not come yet has not ended.
    func testAReportCoversItsDaysOnlyAndAFutureTrialEndIsNoEnd() {
        let long = FinanceTransaction(subscriptionKey: "l", purchaseId: "p1", productId: "vip.1y", productKind: "auto-renewable", group: "vip",
                                      environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 3_650 * day, priceMilli: 99_000,
                                      currency: "EUR", durationDays: 365, grantedStartMs: jan1, grantedEndMs: jan1 + 3_650 * day)
        let trial = FinanceTransaction(subscriptionKey: "t", purchaseId: "p2", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                       environment: "Production", purchaseMs: jan1 + 25 * day, expiresMs: jan1 + 32 * day, isTrial: true,
                                       grantedStartMs: jan1 + 25 * day, grantedEndMs: jan1 + 32 * day)
        let now = jan1 + 27 * day
        let oneDay = SubscriptionMetrics.rows([long, trial], renewals: [:], from: "2025-01-10", to: "2025-01-10", nowMs: now)
        let month = SubscriptionMetrics.rows([long, trial], renewals: [:], from: "2025-01-01", to: "2025-02-28", nowMs: now)
        XCTAssertEqual(oneDay, month.filter { $0.day == "2025-01-10" })
        XCTAssertEqual(oneDay.first?.activeSubscriptions, 1)
        XCTAssertEqual(month.reduce(0) { $0 + $1.trialsEnded }, 0, "the trial ends on 2025-02-02, after now")
    }

    /// A trial whose user lapsed and bought again later did not convert, even once that purchase renews.
    func testATrialFollowedByALapseIsNotConverted() {
        func period(_ id: String, _ start: Int64, _ length: Int64, trial: Bool = false, renewal: Bool = false) -> FinanceTransaction {
            FinanceTransaction(subscriptionKey: "s", purchaseId: id, productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                               environment: "Production", purchaseMs: start, expiresMs: start + length, isTrial: trial,
                               priceMilli: trial ? nil : 9_990, currency: trial ? nil : "EUR", isRenewal: renewal, durationDays: 30,
                               grantedStartMs: start, grantedEndMs: start + length)
        }
        let list = [period("trial", jan1, 7 * day, trial: true), period("again", jan1 + 45 * day, 30 * day),
                    period("renewed", jan1 + 75 * day, 30 * day, renewal: true)]
        let rows = SubscriptionMetrics.rows(list, renewals: [:], from: "2025-01-01", to: "2025-06-30", nowMs: jan1 + 200 * day)
        let ended = rows.first { $0.day == "2025-01-08" }
        XCTAssertEqual(ended?.trialsEnded, 1)
        XCTAssertEqual(ended?.trialsConverted, 0)
    }

    /// A family member's access (FAMILY_SHARED) is no sale: the organizer's purchase is the one Apple pays
    /// for. It shows in the reconciliation only when taken back, as a revocation (also when a receipt
    /// shows it as a cancellation like a refund), and never in the metrics.
    func testAFamilyMembersAccessIsNoSaleAndCountsOnlyWhenRevoked() {
        let organizer = FinanceTransaction(subscriptionKey: "o", purchaseId: "p", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                           environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 30 * day, priceMilli: 9_990,
                                           currency: "USD", durationDays: 30, grantedStartMs: jan1, grantedEndMs: jan1 + 30 * day)
        var member = FinanceTransaction(subscriptionKey: "m", purchaseId: "q", productId: "vip.1m", productKind: "auto-renewable", group: "vip",
                                        environment: "Production", purchaseMs: jan1, expiresMs: jan1 + 30 * day, priceMilli: 9_990,
                                        currency: "USD", durationDays: 30, grantedStartMs: jan1, grantedEndMs: jan1 + 10 * day,
                                        isFamilyShared: true)
        member.cancellationMs = jan1 + 10 * day
        member.cutKind = "revoke"
        var shownAsRefund = member   // a receipt's view of the same member: cancelled, no REVOKE notification
        shownAsRefund.subscriptionKey = "m2"
        shownAsRefund.cutKind = "refund"
        let rows = Reconciliation.rows([organizer, member, shownAsRefund], from: "2025-01-01", to: "2025-01-31")
        XCTAssertEqual(rows.count, 2)
        XCTAssertEqual(rows[0].day, "2025-01-01")
        XCTAssertEqual(rows[0].purchases, 1, "the organizer's purchase only")
        XCTAssertEqual(rows[0].grossMilli, 9_990)
        XCTAssertEqual(rows[1].day, "2025-01-11")
        XCTAssertEqual(rows[1].revocations, 2)
        XCTAssertEqual(rows[1].refunds, 0, "Apple refunds the organizer, not the members")
        XCTAssertEqual(rows[1].purchases, 0)
        XCTAssertEqual(rows[1].grossMilli, 0)

        let metrics = SubscriptionMetrics.rows([organizer, member], renewals: [:], from: "2025-01-05", to: "2025-01-05", nowMs: jan1 + 40 * day)
        XCTAssertEqual(metrics.count, 1)
        XCTAssertEqual(metrics.first?.activeSubscriptions, 1, "the member's access is no paid subscription")
        XCTAssertEqual(metrics.first?.mrrMilli, ["USD": 9_990])
    }

    /// The report routes and the CLI accept only real calendar days (the operator route checks them at the edge).
    func testUTCDayStartAcceptsOnlyRealCalendarDays() {
        XCTAssertEqual(utcDayStartMs("1970-01-01"), 0)
        XCTAssertEqual(utcDayStartMs("2025-01-01"), 1_735_689_600_000)
        XCTAssertEqual(utcDayStartMs("2024-02-29"), 1_709_164_800_000)
        XCTAssertEqual(utcDayStartMs("2000-03-01"), 951_868_800_000)
        for day in ["2025-02-29", "2025-02-30", "2025-13-01", "2025-00-10", "2025-1-01", "25-01-01", "2025-01-01T", "２０２５-01-01",
                    "+025-01-01", "2025/01/01", ""] {
            XCTAssertNil(utcDayStartMs(day), day)
        }
        for ms in stride(from: Int64(0), to: 4_102_444_800_000, by: 86_400_000 * 37) {
            XCTAssertEqual(utcDayStartMs(utcDay(ms)), ms / 86_400_000 * 86_400_000)
            XCTAssertEqual(utcDayText(ms), utcDay(ms))
        }
        // Every year a schema-valid date can name: 0000-9999, padded both ways.
        for day in ["0000-01-01", "0001-03-01", "0999-12-31", "1969-12-31", "9999-12-31"] {
            XCTAssertEqual(utcDayStartMs(day).map(utcDayText), day)
        }
    }
}
