@testable import Domain
import XCTest

/// R1, R2, S1, S2, S14: one purchase, one identity, one grant — whatever path and copy it arrives by.
final class IdentityAndDedupeTests: XCTestCase {
    func testR1RestoreOnNewDeviceIsTheSamePurchaseKeptAsAlias() {
        var t = Transcript()
        XCTAssertEqual(t.feed(Apple.v1("INITIAL_BUY", otid: "s1", [Apple.period("100", otid: "s1", start: t0)])).entries.kinds, [.grant])
        // S1: the restore brings the same purchase back with transaction_id + 1.
        var restored = Apple.period("101", otid: "s1", start: t0)
        restored.webOrderLineItemId = "w100"
        let step = t.feed(Apple.receipt(user: nil, otid: "s1", [restored], id: "restore"))
        XCTAssertTrue(step.entries.isEmpty)
        XCTAssertEqual(t.known["s1"]?.count, 1)
        XCTAssertEqual(t.known["s1"]?.first?.aliases, ["100", "101"])
        XCTAssertEqual(t.ledger.kinds, [.grant])
    }

    func testS14MillisecondsDifferBetweenCopiesIsOneGrant() {
        var t = Transcript()
        let copyA = Apple.tx("100", otid: "s1", purchase: t0 + 123, expires: t0 + month)
        let copyB = Apple.tx("100", otid: "s1", purchase: t0 + 987, expires: t0 + month)
        t.feed(Apple.v1("INITIAL_BUY", otid: "s1", [copyA]))
        t.feed(Apple.receipt(user: nil, otid: "s1", [copyB], id: "copy"))
        XCTAssertEqual(t.ledger.kinds, [.grant])
        // The grant starts at the purchase second, which both copies share.
        XCTAssertEqual(t.ledger.first?.interval?.startMs, t0)
    }

    func testR1TwoCustomersSameProductSameSecondNeverMerge() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "alice", [Apple.period("1", otid: "alice", start: t0)]))
        t.feed(Apple.v1("INITIAL_BUY", otid: "bob", [Apple.period("2", otid: "bob", start: t0)]))
        XCTAssertEqual(t.ledger.kinds, [.grant, .grant])
        XCTAssertNotEqual(t.ledger[0].purchaseId, t.ledger[1].purchaseId)
    }

    func testR1DifferentWebOrderIdsInOneSecondAreTwoPurchaseEvents() {
        let a = Apple.tx("1", otid: "s1", purchase: t0, expires: t0 + month, web: "W1")
        let b = Apple.tx("2", otid: "s1", purchase: t0 + 400, expires: t0 + month, web: "W2")
        let result = dedupe(event: Apple.v1("INITIAL_BUY", otid: "s1", [a, b]), known: [])
        XCTAssertEqual(result.changes.count, 2)
        XCTAssertEqual(result.changes.map(\.purchaseId), ["s1|com.example.app|vip.a.1m|1593216159",
                                                         "s1|com.example.app|vip.a.1m|1593216159|w:W2"])
    }

    func testR1SameWebOrderIdMatchesACopyWhoseSecondDrifted() {
        let a = Apple.tx("1", otid: "s1", purchase: t0, expires: t0 + month, web: "W1")
        let b = Apple.tx("2", otid: "s1", purchase: t0 + 1_200, expires: t0 + month, web: "W1")
        let first = dedupe(event: Apple.v1("INITIAL_BUY", otid: "s1", [a]), known: [])
        let second = dedupe(event: Apple.receipt(user: nil, otid: "s1", [b], id: "x"), known: first.updated)
        XCTAssertTrue(second.changes.isEmpty)
        XCTAssertEqual(second.updated.first?.aliases, ["1", "2"])
    }

    /// S1 with the restore seen first: its copy says the purchase was made at the restore, the original
    /// copy (same web order line item) says earlier. One grant, from the earliest, in either order.
    func testS1RestoreCopyFirstStillGrantsFromTheOriginalPurchase() {
        let original = Apple.tx("100", otid: "s1", purchase: t0, expires: t0 + month, web: "w100")
        let restored = Apple.tx("101", otid: "s1", purchase: t0 + 5 * day, expires: t0 + month, web: "w100")
        let buy = Apple.v1("INITIAL_BUY", otid: "s1", [original])
        let restore = Apple.receipt(user: nil, otid: "s1", [restored], id: "restore")
        for events in [[buy, restore], [restore, buy]] {
            var t = Transcript()
            for event in events { t.feed(event) }
            XCTAssertEqual(t.entitlement("s1"), [interval(t0, t0 + month)], "\(events.map(\.eventId))")
            XCTAssertEqual(t.known["s1"]?.count, 1)
        }
    }

    /// R18 keys as readers write them: the environment after `@` in any case or V1's name.
    func testSubscriptionKeysTakeTheEnvironmentInAnySpelling() {
        XCTAssertEqual(SubscriptionKey.normalized("2000@sandbox"), "2000@Sandbox")
        XCTAssertEqual(SubscriptionKey.normalized("2000@LOCAL-TESTING"), "2000@LocalTesting")
        XCTAssertEqual(SubscriptionKey.normalized("2000@PROD"), "2000", "Production's key is the bare id")
        XCTAssertEqual(SubscriptionKey.normalized("2000@Xcode"), "2000@Xcode")
        XCTAssertEqual(SubscriptionKey.normalized("2000@Staging"), "2000@Staging", "an unknown environment stays as given")
        XCTAssertEqual(SubscriptionKey.normalized("2000"), "2000")
    }

    func testS2ClientUploadV1AndV2OfTheSameRenewalGrantOnce() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s2", [Apple.period("10", otid: "s2", start: t0)]))
        let renewal = Apple.period("11", otid: "s2", start: t0 + month)
        t.feed(Apple.receipt(user: nil, otid: "s2", [Apple.period("10", otid: "s2", start: t0), renewal], id: "upload"))
        t.feed(Apple.v1("DID_RENEW", otid: "s2", [Apple.period("10", otid: "s2", start: t0), renewal]))
        var v2Copy = renewal
        v2Copy.purchaseDateMs += 250   // V2 carries its own milliseconds
        t.feed(Apple.v2("DID_RENEW", uuid: "u-1", otid: "s2", [v2Copy], signed: t0 + month + 1000))
        XCTAssertEqual(t.ledger.filter { $0.kind == .grant }.count, 2, "one grant per period")
        XCTAssertEqual(t.entitlement("s2"), [interval(t0, t0 + 2 * month)])
    }

    func testV2NotificationUUIDIsTheSeenKeyWhateverTheBytes() {
        let first = Apple.v2("DID_RENEW", uuid: "ABC-1", otid: "s", [], signed: 1)
        var retry = first
        retry.eventId = "v2:digest-of-other-bytes"
        XCTAssertEqual(seenKey(of: first), "uuid:abc-1")
        XCTAssertEqual(seenKey(of: first), seenKey(of: retry))
        XCTAssertEqual(seenKey(of: Apple.v1("DID_RENEW", otid: "s", [], id: "v1:123")), "v1:123")
        var t = Transcript()
        t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "U1", otid: "s", [Apple.period("1", otid: "s", start: t0)], signed: t0))
        var again = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "U1", otid: "s", [Apple.period("1", otid: "s", start: t0)], signed: t0)
        again.eventId = "v2:other"
        XCTAssertNil(t.feed(again).unique, "Apple's retry of a V2 notification is dropped at dedupe")
    }

    func testR2NewFactsAreAChangeNotADuplicate() {
        let period = Apple.period("1", otid: "s", start: t0)
        let first = dedupe(event: Apple.v1("INITIAL_BUY", otid: "s", [period]), known: [])
        var cancelled = period
        cancelled.cancellationDateMs = t0 + 5 * day
        cancelled.cancellationReason = "0"
        let second = dedupe(event: Apple.v1("CANCEL", otid: "s", [cancelled]), known: first.updated)
        XCTAssertEqual(second.changes.map(\.kind), [.changed])
        XCTAssertEqual(second.changes.first?.transaction.cancellationDateMs, t0 + 5 * day)
        var extended = period
        extended.expiresDateMs = t0 + month + 7 * day   // RENEWAL_EXTENDED
        let third = dedupe(event: Apple.v2("RENEWAL_EXTENDED", uuid: "x", otid: "s", [extended], signed: t0 + day),
                           known: second.updated)
        XCTAssertEqual(third.changes.first?.transaction.expiresDateMs, t0 + month + 7 * day)
        XCTAssertEqual(third.changes.first?.transaction.cancellationDateMs, t0 + 5 * day, "an older copy never forgets a cancellation")
    }

    func testMergeCommutesSoCopiesConvergeInAnyOrder() {
        var a = Apple.period("1", otid: "s", start: t0 + 10)
        a.isTrialPeriod = true
        var b = Apple.period("1", otid: "s", start: t0 + 900)
        b.cancellationDateMs = t0 + 3 * day
        b.cancellationReason = "1"
        var c = Apple.period("2", otid: "s", start: t0 + 500)
        c.webOrderLineItemId = "w1"
        c.expiresDateMs = t0 + month + day
        c.isUpgraded = true
        let copies = [a, b, c]
        var results: Set<String> = []
        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            var known: [KnownPurchase] = []
            for index in order {
                known = dedupe(event: Apple.receipt(user: nil, otid: "s", [copies[index]], id: "\(index)"), known: known).updated
            }
            XCTAssertEqual(known.count, 1)
            var facts = known[0].facts
            facts.transactionId = "-"   // the first copy's id is kept; the aliases hold them all
            results.insert("\(facts)")
        }
        XCTAssertEqual(results.count, 1)
    }

    func testREFUNDREVERSEDReinstatesAPurchase() {
        var t = Transcript()
        var refunded = Apple.period("1", otid: "s", start: t0)
        refunded.cancellationDateMs = t0 + 10 * day
        t.feed(Apple.v2("REFUND", uuid: "r", otid: "s", [refunded], signed: t0 + 10 * day))
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + 10 * day)])
        t.feed(Apple.v2("REFUND_REVERSED", uuid: "rr", otid: "s", [Apple.period("1", otid: "s", start: t0)], signed: t0 + 12 * day))
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + month)])
        XCTAssertEqual(t.ledger.kinds, [.grant, .extend])
    }
}
