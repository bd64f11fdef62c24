@testable import Domain
import TestSupport
import XCTest

/// The ledger is the truth: folding it gives exactly the stored grants; feeding the scenario set
/// again changes nothing; any order converges to the same membership (S15).
final class ProjectionTests: XCTestCase {
    func testProjectionRebuiltFromTheLedgerEqualsTheStoredState() {
        var t = Transcript()
        for event in ScenarioSet.events(prefix: "p") { t.feed(event) }
        let fromLedger = LedgerProjection(entries: t.ledger)
        let fromStates = LedgerProjection(states: Array(t.book.subscriptions.values))
        XCTAssertEqual(fromLedger, fromStates)
        XCTAssertEqual(fromLedger.entitlements["user:user-p"]?["vip"],
                       Interval.union(t.book.states(ofUser: "user-p").flatMap { $0.entitlement(group: "vip") }))
        XCTAssertEqual(fromLedger.balances["user:user-p"]?["coins"], nil, "credited then refunded")
        XCTAssertEqual(fromLedger.entitlements["user:user-p"]?["lifetime"], [interval(t0, nil)])
    }

    func testFeedingTheScenarioSetTwiceWritesNothing() {
        var t = Transcript()
        let events = ScenarioSet.events(prefix: "twice")
        for event in events { t.feed(event) }
        let ledger = t.ledger
        let states = t.book
        // Same inputs again (seen) and, harder, as new deliveries with other ids (not seen: facts decide).
        for event in events { t.feed(event) }
        for var event in events {
            event.eventId += "-redelivered"
            t.feed(event)
        }
        XCTAssertEqual(LedgerProjection(entries: t.ledger), LedgerProjection(entries: ledger))
        XCTAssertEqual(t.book.subscriptions.mapValues(\.granted), states.subscriptions.mapValues(\.granted))
        XCTAssertTrue(t.ledger.dropFirst(ledger.count).allSatisfy { $0.kind == .record || $0.kind == .renewal },
                      "new deliveries only add evidence: \(t.ledger.dropFirst(ledger.count).map(\.reason))")
    }

    func testAnyOrderConvergesToTheSameMembership() {
        let events = ScenarioSet.events(prefix: "o")
        var reference = Transcript()
        for event in events { reference.feed(event) }
        let expected = LedgerProjection(entries: reference.ledger)
        let expectedViews = groupMemberships(of: reference.book.states(ofUser: "user-o"))
        var generator = SeededGenerator(seed: 42)
        for _ in 0..<25 {
            var t = Transcript()
            for event in events.shuffled(using: &generator) { t.feed(event) }
            XCTAssertEqual(LedgerProjection(entries: t.ledger), expected)
            XCTAssertEqual(groupMemberships(of: t.book.states(ofUser: "user-o")), expectedViews)
            for key in reference.book.subscriptions.keys {
                XCTAssertEqual(t.state(key).renewal?.autoRenewProductId, reference.state(key).renewal?.autoRenewProductId, key)
                XCTAssertEqual(t.state(key).granted, reference.state(key).granted, key)
            }
        }
    }

    /// The union covers exactly the instants its inputs cover, as sorted, disjoint, non-touching
    /// intervals: checked at every boundary and its neighbours over random lists, empty and
    /// open-ended intervals included.
    func testIntervalUnionCoversWhatItsInputsCover() {
        var generator = SplitMix64(seed: 0x0A11_0F)
        for _ in 0..<2_000 {
            let inputs = (0..<Int.random(in: 0...7, using: &generator)).map { _ -> Interval in
                let start = Int64.random(in: 0...40, using: &generator)
                let end: Int64? = Int.random(in: 0..<8, using: &generator) == 0 ? nil : Int64.random(in: 0...44, using: &generator)
                return interval(start, end)
            }
            let union = Interval.union(inputs)
            for (a, b) in zip(union, union.dropFirst()) {
                XCTAssertLessThan(a.endOrMax, b.startMs, "\(inputs) → \(union)")
            }
            XCTAssertFalse(union.contains { $0.isEmpty }, "\(inputs) → \(union)")
            let probes = Set(inputs.flatMap { [$0.startMs - 1, $0.startMs, $0.startMs + 1] + ($0.endMs.map { [$0 - 1, $0, $0 + 1] } ?? [10_000]) })
            for at in probes {
                XCTAssertEqual(union.contains { $0.contains(at) }, inputs.contains { $0.contains(at) }, "at \(at): \(inputs) → \(union)")
            }
        }
    }

    func testIntervalArithmetic() {
        XCTAssertEqual(Interval.union([interval(5, 10), interval(0, 5), interval(20, nil), interval(30, 40)]),
                       [interval(0, 10), interval(20, nil)])
        XCTAssertEqual(Interval.subtract(interval(3, 6), from: [interval(0, 10)]), [interval(0, 3), interval(6, 10)])
        XCTAssertEqual(Interval.subtract(interval(5, nil), from: [interval(0, nil)]), [interval(0, 5)])
        XCTAssertEqual(GrantDelta.between(granted: interval(0, 10), target: interval(0, 4)), [.remove(interval(4, 10))])
        XCTAssertEqual(GrantDelta.between(granted: interval(0, 4), target: interval(0, nil)), [.add(interval(4, nil))])
        XCTAssertEqual(TimeText.iso(t0), "2020-06-27T00:02:39Z")
        XCTAssertEqual(TimeText.iso(951_782_400_123), "2000-02-29T00:00:00.123Z")
        XCTAssertEqual(TimeText.iso(-1), "1969-12-31T23:59:59.999Z")
        XCTAssertEqual(TimeText.iso(1_000), "1970-01-01T00:00:01Z")
        XCTAssertEqual(TimeText.iso(4_102_444_799_010), "2099-12-31T23:59:59.010Z")
        // Years outside four digits are written as they are, unpadded.
        XCTAssertEqual(TimeText.iso(-62_135_596_800_000), "1-01-01T00:00:00Z")
        XCTAssertEqual(TimeText.iso(253_402_300_800_000), "10000-01-01T00:00:00Z")
    }
}

/// xorshift64*: a deterministic shuffle for reproducible orders.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
}

/// The per-user view's current product (support and the signer read it): the latest purchase that
/// still grants something across the user's subscriptions, else the latest at all.
final class CurrentProductTests: XCTestCase {
    private func state(_ key: String, _ purchases: [(id: String, product: String, start: Int64, granted: Bool)]) -> SubscriptionState {
        var state = SubscriptionState(subscriptionKey: key, userId: "u")
        for p in purchases {
            state.grants[p.id] = PurchaseGrant(purchaseId: p.id, transactionId: p.id, originalTransactionId: key, productId: p.product,
                                              productKind: .autoRenewable, group: "vip", startMs: p.start, endMs: p.start + 100)
            if p.granted { state.granted[p.id] = Interval(startMs: p.start, endMs: p.start + 100) }
        }
        return state
    }

    func testTheLatestGrantingPurchaseWinsOverALaterOneThatGrantsNothing() {
        let a = state("a", [("a1", "vip.1m", 1_000, true), ("a2", "vip.1m", 2_000, true)])
        let b = state("b", [("b1", "vip.plus.1m", 3_000, false)])   // refunded whole: grants nothing
        let view = groupMemberships(of: [b, a])
        XCTAssertEqual(view.map(\.currentProduct), ["vip.1m"])
        XCTAssertEqual(view.first?.currentSubscriptionKey, "a")
        XCTAssertEqual(view.first?.subscriptionKeys, ["a", "b"])
    }

    func testWithNothingGrantingTheLatestPurchaseAtAllIsCurrent() {
        let a = state("a", [("a1", "vip.1m", 1_000, false)])
        let b = state("b", [("b1", "vip.plus.1m", 3_000, false), ("b0", "vip.year", 2_000, false)])
        XCTAssertEqual(groupMemberships(of: [a, b]).first?.currentProduct, "vip.plus.1m")
    }

    func testEqualStartsAreOrderedByPurchaseId() {
        let a = state("a", [("p-2", "vip.year", 1_000, true), ("p-1", "vip.1m", 1_000, true)])
        XCTAssertEqual(groupMemberships(of: [a]).first?.currentProduct, "vip.year")
    }
}
