@testable import Ingest
import Domain
import XCTest

/// The timeline model from ledger transcripts: lanes, cuts at their instant with their cause,
/// grace and billing retry, the pending change at the renewal, and the window around it all.
final class MembershipTimelineTests: XCTestCase {
    typealias F = TimelineFixtures

    func testS5RefundIsACutAtTheCancellationWithItsCause() throws {
        let timeline = F.s5()
        XCTAssertEqual(timeline.lanes.map(\.group), ["vip"])
        let lane = try XCTUnwrap(timeline.lanes.first)
        XCTAssertEqual(lane.granted, [F.interval(F.t0, F.t0 + 10 * F.day)])
        XCTAssertEqual(lane.cuts, [MembershipTimeline.CutMark(
            atMs: F.t0 + 10 * F.day, removed: F.interval(F.t0 + 10 * F.day, F.t0 + F.month), kind: "refund",
            cause: "V1 notification · CANCEL · transaction tx-50 · Sandbox", entryId: 2)])
        XCTAssertEqual(lane.environments, ["Sandbox"])
        XCTAssertEqual(lane.autoRenew, false)
        XCTAssertNil(lane.pending)
        XCTAssertEqual(timeline.ledger.map(\.entryId), [1, 2, 3], "the evidence reads oldest first whatever order it came in")
    }

    func testS3CrossgradeShowsTheCutAndThePendingChangeAtTheRenewal() throws {
        let lane = try XCTUnwrap(F.s3().lanes.first)
        XCTAssertEqual(lane.granted, [F.interval(F.t0, F.t0 + F.day + F.month)], "one period after the switch, never two")
        XCTAssertEqual(lane.cuts.map(\.kind), ["crossgrade"])
        XCTAssertEqual(lane.cuts.first?.atMs, F.t0 + F.day)
        XCTAssertEqual(lane.pending, MembershipTimeline.PendingMark(atMs: F.t0 + F.day + F.month, product: "vip.standard.3m",
                                                                   change: "crossgrade"))
    }

    func testS6RefundAfterThePeriodIsARecordMarkAtItsInstantAndCutsNothing() throws {
        let lane = try XCTUnwrap(F.s6().lanes.first)
        XCTAssertEqual(lane.granted, [F.interval(F.t0, F.t0 + 2 * F.month)], "nothing deducted")
        XCTAssertEqual(lane.cuts, [])
        XCTAssertEqual(lane.records.map(\.atMs), [F.t0 + F.month + 5 * F.day])
        XCTAssertEqual(lane.records.map(\.entryId), [3])
        XCTAssertTrue(lane.records.first?.reason.contains("nothing deducted (R11)") == true)
    }

    func testGraceIsShadedFromItsLedgerGrantAndBillingRetryReachesTheWindowEdge() throws {
        let timeline = F.graceThenRetry()
        let lane = try XCTUnwrap(timeline.lanes.first)
        let graceEnd = F.t0 + F.month + 6 * F.day
        XCTAssertEqual(lane.shades.filter { $0.kind == .grace },
                       [MembershipTimeline.Shade(kind: .grace, startMs: F.t0 + F.month, endMs: graceEnd)])
        let retry = try XCTUnwrap(lane.shades.first { $0.kind == .billingRetry })
        XCTAssertEqual(retry.startMs, graceEnd, "billing retry follows the grace period")
        XCTAssertEqual(retry.endMs, timeline.window.endMs)
        XCTAssertGreaterThan(timeline.window.endMs, F.now, "an unfinished retry continues past now")
    }

    func testWindowCoversEveryIntervalAndFractionIsClamped() {
        let timeline = F.s5()
        XCTAssertLessThan(timeline.window.startMs, F.t0)
        XCTAssertGreaterThan(timeline.window.endMs, F.t0 + F.month, "the removed part of the period is inside the window")
        XCTAssertEqual(timeline.window.fraction(Int64.min), 0)
        XCTAssertEqual(timeline.window.fraction(Int64.max), 1)
        XCTAssertEqual(MembershipTimeline.Window(startMs: 5, endMs: 5).fraction(9), 0, "a degenerate window never divides by zero")
    }

    func testAUserWithNothingStillHasAWindowAroundNow() {
        let timeline = MembershipTimeline(userId: "nobody", memberships: [], ledger: [], nowMs: F.now)
        XCTAssertTrue(timeline.lanes.isEmpty)
        XCTAssertLessThan(timeline.window.startMs, F.now)
        XCTAssertGreaterThan(timeline.window.endMs, F.now)
    }

    func testAFullyRefundedGroupKeepsItsLaneFromTheLedger() throws {
        let cut = F.line(2, .cut, interval: F.interval(F.t0, F.t0 + F.month), before: [F.interval(F.t0, F.t0 + F.month)], after: [],
                         cutKind: "refund", reason: "full refund", cause: F.cause("REFUND", transaction: "tx-9", source: .notificationV2))
        let grant = F.line(1, .grant, interval: F.interval(F.t0, F.t0 + F.month), before: [], after: [F.interval(F.t0, F.t0 + F.month)],
                           reason: "granted", cause: F.cause("SUBSCRIBED", transaction: "tx-9", subtype: "INITIAL_BUY", source: .notificationV2))
        let timeline = MembershipTimeline(userId: "u", memberships: [], ledger: [grant, cut], nowMs: F.now)
        let lane = try XCTUnwrap(timeline.lanes.first)
        XCTAssertEqual(lane.granted, [], "what is left after the last line")
        XCTAssertEqual(lane.cuts.first?.cause, "V2 notification · REFUND · transaction tx-9 · Sandbox")
        XCTAssertEqual(MembershipTimeline.describe(grant.cause), "V2 notification · SUBSCRIBED/INITIAL_BUY · transaction tx-9 · Sandbox")
    }
}
