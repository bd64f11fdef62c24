import Domain
import Foundation
@testable import Simulator
import XCTest

/// Contract: the oracle turns the simulator's ground truth into each user's expected entitlement
/// per group with the domain's rules stated simply (charged periods, cut at cancellations, no
/// deduction after the end, grace periods, non-renewing durations, lifetime purchases,
/// consumable balances, every Apple ID and original_transaction_id of the user), at second
/// precision; the checker reads the membership API's JSON the same way and reports differences.
final class OracleTests: XCTestCase {
    let t0: Int64 = 1_740_823_200_123
    let day: Int64 = 86_400_000

    func state() -> StoreState {
        var state = StoreState(config: StoreConfig(bundleId: SimulatorCatalog.bundleId, catalog: SimulatorCatalog.standard, runId: 1))
        state.addUser("u")
        _ = try? state.addAppleID(user: "u")
        return state
    }

    func spans(_ state: StoreState, _ group: String = "vip", environments: Set<SimEnvironment> = Set(SimEnvironment.allCases)) -> [Span] {
        Oracle.expectation(for: state.users["u"]!, in: state, environments: environments).groups[group]?.spans ?? []
    }

    func span(_ startMs: Int64, _ endMs: Int64?) -> Span { Span(startMs: startMs, endMs: endMs) }

    func testSpansFloorToSecondsAndMergeTouchingAndOverlapping() {
        XCTAssertEqual(Span(startMs: 1_999, endMs: 5_001), Span(start: 1, end: 5))
        XCTAssertEqual(Span.union([Span(start: 5, end: 9), Span(start: 1, end: 5), Span(start: 20, end: nil), Span(start: 8, end: 12), Span(start: 3, end: 3)]),
                       [Span(start: 1, end: 12), Span(start: 20, end: nil)])
        // A receipt's copy (.000) and Apple's JSON (.123) of a boundary touch once floored.
        XCTAssertEqual(Span.union([Span(startMs: 0, endMs: 10_000), Span(startMs: 10_123, endMs: 20_000)]), [Span(start: 0, end: 20)])
    }

    func testRenewalsAreContiguousAndARefundCutsAtTheCancellation() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let r = try s.renew(t.originalTransactionId)
        XCTAssertEqual(spans(s), [span(t0, t0 + 60 * day)])
        try s.refund(t.originalTransactionId, transactionId: r.transactionId, atMs: t0 + 40 * day)
        XCTAssertEqual(spans(s), [span(t0, t0 + 40 * day)])
        XCTAssertFalse(s.subscriptions[t.originalTransactionId]!.autoRenew, "a refunded subscription stops renewing")
    }

    func testRefundAfterThePeriodDeductsNothing() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        try s.renew(t.originalTransactionId)
        try s.refund(t.originalTransactionId, transactionId: t.transactionId, atMs: t0 + 45 * day)
        XCTAssertEqual(spans(s), [span(t0, t0 + 60 * day)])
    }

    func testImmediateSwitchCutsTheOldPeriodAndStartsOneFromTheSwitch() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let (old, new) = try s.switchNow(t.originalTransactionId, to: "vip.pro.1m", atMs: t0 + 10 * day)
        XCTAssertEqual(old.cancellationMs, t0 + 10 * day)
        XCTAssertTrue(old.isUpgraded)
        XCTAssertEqual(spans(s), [span(t0, t0 + 40 * day)], "one period after the switch, never two (S3)")
        // Only the cut at the switch makes a later refund of the new period end the service.
        try s.refund(t.originalTransactionId, transactionId: new.transactionId, atMs: t0 + 12 * day)
        XCTAssertEqual(spans(s), [span(t0, t0 + 12 * day)])
    }

    func testPendingChangeLandsAtTheRenewal() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        try s.setRenewalProduct(t.originalTransactionId, productId: "vip.a.3m", atMs: t0 + day)
        let r = try s.renew(t.originalTransactionId)
        XCTAssertEqual(r.productId, "vip.a.3m")
        XCTAssertEqual(r.purchaseMs, t0 + 30 * day)
        XCTAssertEqual(spans(s), [span(t0, t0 + 120 * day)])
    }

    func testGracePeriodIsServedAndRecoveryKeepsOrMovesTheRenewalDate() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let end = t.expiresMs!
        try s.failRenewal(t.originalTransactionId, atMs: end, graceMs: 6 * day)
        XCTAssertEqual(spans(s), [span(t0, end + 6 * day)], "Apple keeps serving through the grace period")
        let recovered = try s.recover(t.originalTransactionId, atMs: end + 2 * day)
        XCTAssertEqual(recovered.expiresMs, end + 30 * day, "recovered in grace: the renewal date does not move")
        XCTAssertEqual(spans(s), [span(t0, end + 30 * day)])

        var late = state()
        let u = try late.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        try late.failRenewal(u.originalTransactionId, atMs: end, graceMs: nil)
        let back = try late.recover(u.originalTransactionId, atMs: end + 10 * day)
        XCTAssertEqual(back.expiresMs, end + 40 * day, "after billing retry the period starts at the recovery")
        XCTAssertEqual(spans(late), [span(t0, end), span(end + 10 * day, end + 40 * day)])
    }

    func testOneTimeProductsAndBalances() throws {
        var s = state()
        let pass = try s.purchase(user: "u", appleId: 0, productId: "pass.30d", atMs: t0)
        let life = try s.purchase(user: "u", appleId: 0, productId: "lifetime.pro", atMs: t0 + day)
        let coins = try s.purchase(user: "u", appleId: 0, productId: "coins.100", atMs: t0)
        try s.purchase(user: "u", appleId: 0, productId: "coins.100", atMs: t0 + 1000)
        XCTAssertNil(pass.expiresMs, "Apple sends no expiry for non-renewing subscriptions")
        XCTAssertEqual(spans(s, "pass"), [span(t0, t0 + 30 * day)])
        XCTAssertEqual(spans(s, "lifetime"), [span(t0 + day, nil)])
        let expectation = Oracle.expectation(for: s.users["u"]!, in: s)
        XCTAssertEqual(expectation.groups["coins.100"]?.balance, 200)
        try s.refund(coins.originalTransactionId, transactionId: coins.transactionId, atMs: t0 + 2 * day)
        try s.refund(life.originalTransactionId, transactionId: life.transactionId, atMs: t0 + 3 * day)
        XCTAssertEqual(Oracle.expectation(for: s.users["u"]!, in: s).groups["coins.100"]?.balance, 100)
        XCTAssertEqual(spans(s, "lifetime"), [span(t0 + day, t0 + 3 * day)])
    }

    func testEveryAppleIdAndStorefrontOfTheUserCounts() throws {
        var s = state()
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let moved = try s.moveStorefront(t.originalTransactionId, to: "CAN", atMs: t0 + 5 * day)
        XCTAssertNotEqual(moved.originalTransactionId, t.originalTransactionId)
        XCTAssertEqual(moved.appAccountToken, t.appAccountToken)
        let second = try s.addAppleID(user: "u", environment: .sandbox)
        try s.purchase(user: "u", appleId: second, productId: "vip.a.1m", atMs: t0 + 100 * day)
        XCTAssertEqual(spans(s), [span(t0, t0 + 60 * day), span(t0 + 100 * day, t0 + 130 * day)])
        XCTAssertEqual(spans(s, environments: [.production]), [span(t0, t0 + 60 * day)], "environments the pipeline refuses are not expected")
    }

    func testIntroVariantIsServedOncePerAccount() throws {
        var s = state()
        XCTAssertEqual(s.servedVariant(user: "u", productId: "vip.a.1m"), "vip.a.1m.intro")
        try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m.intro", atMs: t0, offer: .freeTrial)
        try s.addAppleID(user: "u")
        XCTAssertEqual(s.servedVariant(user: "u", productId: "vip.a.1m"), "vip.a.1m", "a second Apple ID does not make the account eligible again (R8)")
    }

    func testCheckerReadsTheMembershipAPIAndReportsDifferences() {
        let json: [String: Any] = ["groups": [
            ["group": "vip", "intervals": [["startMs": t0, "endMs": t0 + 10 * day], ["startMs": t0 + 10 * day + 400, "endMs": t0 + 30 * day]]],
            ["group": "coins.100", "intervals": [], "balance": 100],
            ["group": "lifetime", "intervals": [["startMs": t0]], "openEnded": true],
        ]]
        let observed = MembershipChecker.parse(json)
        XCTAssertEqual(observed.spans["vip"], [span(t0, t0 + 30 * day)])
        XCTAssertEqual(observed.spans["lifetime"], [span(t0, nil)])
        XCTAssertEqual(observed.balances["coins.100"], 100)
        let expected = UserExpectation(userId: "u", groups: [
            "vip": GroupExpectation(group: "vip", spans: [span(t0, t0 + 30 * day)], balance: nil),
            "coins.100": GroupExpectation(group: "coins.100", spans: [], balance: 100),
            "lifetime": GroupExpectation(group: "lifetime", spans: [span(t0, nil)], balance: nil),
        ])
        XCTAssertTrue(MembershipChecker.compare(expected, observed).isEmpty)
        var wrong = expected
        wrong.groups["vip"]?.spans = [span(t0, t0 + 20 * day)]
        wrong.groups["music"] = GroupExpectation(group: "music", spans: [span(t0, t0 + day)], balance: nil)
        let mismatches = MembershipChecker.compare(wrong, observed)
        XCTAssertEqual(mismatches.map(\.group), ["music", "vip"])
        XCTAssertTrue(mismatches[1].description.contains("expected [2025-03-01T10:00:00Z, 2025-03-21T10:00:00Z)"))
        XCTAssertTrue(MembershipChecker.compare(UserExpectation(userId: "u", groups: [:]), ObservedMembership(spans: [:], balances: ["coins.100": 0])).isEmpty)
    }
}
