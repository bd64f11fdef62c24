@testable import Domain
import XCTest

/// STYLE.md practice 12: no arithmetic reachable from input traps. Every numeric field of the
/// decoded event is driven to Int64/Int extremes through the pure path the stages run (dedupe →
/// classify → membership apply) with catalog numbers at their extremes too; the path must return
/// values, never trap (a trap in a worker is a crash loop on redelivery).
final class OverflowSafetyTests: XCTestCase {
    static let extremes: [Int64] = [.min, .min + 1, -1, 0, 1, .max - 1, .max]

    func testPurchaseSecondIsFloorDivisionForEveryInt64() {
        // The input that crash-looped `worker dedupe`: purchase_date_ms "-9223372036854775808".
        XCTAssertEqual(PurchaseIdentity.second(ofMs: .min), -9_223_372_036_854_776)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: .max), 9_223_372_036_854_775)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: -1), -1)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: -1000), -1)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: -1001), -2)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: 999), 0)
        XCTAssertEqual(PurchaseIdentity.second(ofMs: t0 + 999), t0 / 1000)
        // The second's first millisecond saturates where floor(ms / 1000) * 1000 leaves Int64.
        XCTAssertEqual(PurchaseIdentity.secondStartMs(ofMs: .min), .min)
        XCTAssertEqual(PurchaseIdentity.secondStartMs(ofMs: .max), 9_223_372_036_854_775_000)
        XCTAssertEqual(PurchaseIdentity.secondStartMs(ofMs: -1), -1000)
    }

    func testSaturatingArithmeticPinsAtTheLimits() {
        XCTAssertEqual(Int64.max.saturatingAdding(1), .max)
        XCTAssertEqual(Int64.min.saturatingAdding(-1), .min)
        XCTAssertEqual(Int64(5).saturatingAdding(-7), -2)
        XCTAssertEqual(Int64.min.saturatingSubtracting(1), .min)
        XCTAssertEqual(Int64.max.saturatingSubtracting(-1), .max)
        XCTAssertEqual(Int64(5).saturatingSubtracting(7), -2)
        XCTAssertEqual(Int64.max.saturatingMultiplied(by: 2), .max)
        XCTAssertEqual(Int64.min.saturatingMultiplied(by: 2), .min)
        XCTAssertEqual(Int64.min.saturatingMultiplied(by: -1), .max)
        XCTAssertEqual(Int64(-3).saturatingMultiplied(by: 4), -12)
        XCTAssertEqual(Int.max.saturatingMultiplied(by: Int.max), .max)
        XCTAssertEqual(Int64.min.distanceMagnitude(to: .max), UInt64.max)
        XCTAssertEqual(Int64.max.distanceMagnitude(to: .min), UInt64.max)
        XCTAssertEqual(Int64(-2).distanceMagnitude(to: 3), 5)
        XCTAssertEqual(Int64.min.floorDivided(by: 86_400), -106_751_991_167_301)
        XCTAssertEqual(Int64.min.floorModulo(1000), 192)
        XCTAssertEqual(Int64(-1).floorModulo(1000), 999)
    }

    func testTimeTextWritesEveryInt64() {
        XCTAssertEqual(TimeText.iso(0), "1970-01-01T00:00:00Z")
        XCTAssertEqual(TimeText.iso(-1), "1969-12-31T23:59:59.999Z")
        XCTAssertEqual(TimeText.iso(t0), "2020-06-27T00:02:39Z")
        XCTAssertEqual(TimeText.iso(4_102_444_800_000), "2100-01-01T00:00:00Z")
        XCTAssertTrue(TimeText.iso(.min).hasSuffix(".192Z"), TimeText.iso(.min))
        XCTAssertTrue(TimeText.iso(.max).hasSuffix(".807Z"), TimeText.iso(.max))
    }

    /// Every Int64 field of every transaction, the notification and the renewal at each extreme,
    /// through dedupe, classify and apply: values come out, and the path is deterministic.
    func testExtremeDatesInEveryFieldRunThroughThePurePath() {
        for value in Self.extremes {
            var t = Transcript(catalog: Self.extremeCatalog)
            let renewal = RenewalFacts(originalTransactionId: "s1", productId: "vip.a.1m", autoRenewProductId: "vip.b.1m",
                                       autoRenewStatus: true, isInBillingRetryPeriod: true, gracePeriodExpiresDateMs: value,
                                       renewalDateMs: value, renewalPrice: value, offerType: Int(truncatingIfNeeded: value))
            var event = Apple.v1("DID_FAIL_TO_RENEW", otid: "s1", Self.transactions(value), statusChange: value,
                                 renewal: renewal, id: "extreme-\(value)")
            event.receivedAtMs = value
            event.notification?.signedDateMs = value
            event.notification?.status = Int(truncatingIfNeeded: value)
            let step = t.feed(event)
            XCTAssertFalse(step.commands.isEmpty, "value \(value)")
            // Replaying the same decoded event changes nothing (dedupe remembers it).
            XCTAssertTrue(t.feed(event).entries.isEmpty)
            for entry in step.entries { XCTAssertFalse(entry.reason.isEmpty) }
        }
    }

    /// Mixed extremes: one transaction at Int64.min, its copy at Int64.max, cancellations across the
    /// range (distances between them overflow a naive subtraction).
    func testMixedExtremesAcrossCopiesAndCancellations() {
        var t = Transcript(catalog: Self.extremeCatalog)
        let low = Apple.tx("1", otid: "s1", purchase: .min, expires: .max, cancel: .max)
        let high = Apple.tx("2", otid: "s1", product: "vip.b.1m", purchase: .max, expires: .min, cancel: .min, upgraded: true)
        t.feed(Apple.v1("CANCEL", otid: "s1", [low, high], id: "mixed-1"))
        t.feed(Apple.v1("DID_RENEW", otid: "s1", [high, low], autoRenew: false, id: "mixed-2"))
        t.feed(Apple.receipt(user: "u1", otid: "s1", [low], id: "mixed-3"))
        XCTAssertNotNil(t.book.subscriptions["s1"])
        XCTAssertEqual(t.state("s1").userId, "u1")
    }

    /// Quantity and credits at Int.max: the credit saturates instead of trapping, and a refund
    /// debits it back without overflowing the balance.
    func testExtremeQuantityAndCreditsSaturate() {
        var t = Transcript(catalog: Self.extremeCatalog)
        let buy = Apple.tx("c1", otid: "c1", product: "coins.max", purchase: t0, quantity: .max)
        t.feed(Apple.receipt(user: "u1", otid: "c1", [buy], id: "coins-1"))
        XCTAssertEqual(t.ledger.last?.kind, .credit)
        XCTAssertEqual(t.ledger.last?.amount, .max)
        let second = Apple.tx("c2", otid: "c2", product: "coins.max", purchase: t0 + 1000, quantity: .min)
        t.feed(Apple.receipt(user: "u1", otid: "c2", [second], id: "coins-2"))
        XCTAssertEqual(t.user("u1").first { $0.group == "coins" }?.balance, .max, "the balance saturates")
        var refunded = buy
        refunded.cancellationDateMs = t0 + 5000
        t.feed(Apple.v1("REFUND", otid: "c1", [refunded], autoRenew: nil, id: "coins-refund"))
        XCTAssertEqual(t.ledger.last?.kind, .debit)
        XCTAssertEqual(t.ledger.last?.amount, .max)
        let projection = LedgerProjection(entries: t.ledger)
        XCTAssertNotNil(projection.balances["user:u1"]?["coins"])
    }

    /// A catalog at the limits a loader without bounds would accept.
    static let extremeCatalog = Catalog(
        bundleId: "com.example.app",
        products: [
            CatalogProduct(id: "vip.a.1m", kind: .autoRenewable, group: "vip", level: .max, durationDays: .max),
            CatalogProduct(id: "vip.b.1m", kind: .autoRenewable, group: "vip", level: .min, durationDays: .max),
            CatalogProduct(id: "pass", kind: .nonRenewing, group: "pass", durationDays: .max),
            CatalogProduct(id: "coins.max", kind: .consumable, group: "coins", credits: .max),
        ],
        groups: [SubscriptionGroup(id: "vip")])

    static func transactions(_ value: Int64) -> [TransactionFacts] {
        var auto = Apple.tx("a\(value)", otid: "s1", purchase: value, expires: value, web: "w\(value)", cancel: value, reason: "0")
        auto.originalPurchaseDateMs = value
        auto.price = value
        auto.offerType = Int(truncatingIfNeeded: value)
        auto.revocationPercentage = Int(truncatingIfNeeded: value)
        auto.quantity = Int(truncatingIfNeeded: value)
        var pass = Apple.tx("p\(value)", otid: "s1", product: "pass", purchase: value, cancel: value)
        pass.quantity = Int(truncatingIfNeeded: value)
        let unknown = Apple.tx("u\(value)", otid: "s1", product: "not.in.catalog", purchase: value, expires: value)
        let switched = Apple.tx("b\(value)", otid: "s1", product: "vip.b.1m", purchase: value, upgraded: true)
        return [auto, pass, unknown, switched]
    }
}
