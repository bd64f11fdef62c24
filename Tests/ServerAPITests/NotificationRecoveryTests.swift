import AppStoreServerAPI
import AppleDecoding
import Foundation
@testable import Simulator
@testable import Stages
import XCTest

/// Contract: the recovery plan feeds each notificationUUID once, skips what the pipeline already
/// saw, and writes Apple's own body (`{"signedPayload": ...}`) so decode cannot tell it from a POST.
final class NotificationRecoveryTests: XCTestCase {
    func testPlanFeedsEachUnseenUUIDOnceAndSkipsSeenOnesAndRepeats() throws {
        let h = try ServerAPIHarness(pageSize: 4)
        let purchase = try h.subscriber("plan-user", daysAgo: 20)
        var uuids: [String] = []
        for index in 0..<5 {
            let renewal = try h.store.mutate { try $0.renew(purchase.originalTransactionId, chargeMs: h.nowMs - Int64(10 - index) * 86_400_000) }
            let delivery = try h.store.read { try h.emitter.v2($0, otid: purchase.originalTransactionId, type: "DID_RENEW", transaction: renewal, atMs: renewal.purchaseMs) }
            h.server.state.record(delivery, delivered: false)
            if index == 4 { h.server.state.record(delivery, delivered: false) }  // Apple lists one twice
            let payload = try XCTUnwrap(ServerAPIState.claims(try XCTUnwrap(ServerAPIState.facts(delivery.body)?.signedPayload)))
            uuids.append(try XCTUnwrap(payload["notificationUUID"] as? String))
        }
        let walk = try h.client().notificationHistory(NotificationHistoryRequest(startDate: h.nowMs - 30 * 86_400_000, endDate: h.nowMs,
                                                                                 onlyFailures: true)).value()
        XCTAssertEqual(walk.entries.count, 6)

        let plan = NotificationRecovery.plan(walk.entries, alreadySeen: [uuids[1].uppercased().lowercased()])
        XCTAssertEqual(plan.toFeed.map(\.notificationUUID), [uuids[0], uuids[2], uuids[3], uuids[4]])
        XCTAssertEqual(plan.alreadyIngested, 1)
        XCTAssertEqual(plan.duplicatesInHistory, 1)
        XCTAssertEqual(plan.withoutUUID, 0)
        let body = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(plan.toFeed[0].rawBody)) as? [String: String])
        XCTAssertEqual(body, ["signedPayload": walk.entries[0].signedPayload])
        XCTAssertTrue(NotificationRecovery.isJSONSafe(walk.entries[0].signedPayload))
        XCTAssertFalse(NotificationRecovery.isJSONSafe("a\"b"))
    }

    /// More failures in the window than one walk reaches (2 pages of 4 here, 50 of 20 at Apple): the
    /// pass halves the window until each walk completes, instead of reading the first pages again
    /// on every pass and never the rest.
    func testAPassReachesEveryFailureOfAWindowBusierThanOneWalk() throws {
        let h = try ServerAPIHarness(pageSize: 4)
        let purchase = try h.subscriber("busy-user", daysAgo: 40)
        var uuids: Set<String> = []
        for index in 0..<30 {
            let renewal = try h.store.mutate { try $0.renew(purchase.originalTransactionId, chargeMs: h.nowMs - Int64(35 - index) * 86_400_000) }
            let delivery = try h.store.read { try h.emitter.v2($0, otid: purchase.originalTransactionId, type: "DID_RENEW", transaction: renewal, atMs: renewal.purchaseMs) }
            h.server.state.record(delivery, delivered: false)
            let payload = try XCTUnwrap(ServerAPIState.claims(try XCTUnwrap(ServerAPIState.facts(delivery.body)?.signedPayload)))
            uuids.insert(try XCTUnwrap(payload["notificationUUID"] as? String))
        }
        let client = h.client(maxPages: 2)
        let window = (from: h.nowMs - 40 * 86_400_000, to: h.nowMs)
        let oneWalk = try client.notificationHistory(NotificationHistoryRequest(startDate: window.from, endDate: window.to,
                                                                                onlyFailures: true)).value()
        XCTAssertTrue(oneWalk.truncated)
        XCTAssertEqual(oneWalk.entries.count, 8)

        let report = try XCTUnwrap(RecoveryPass.recover(client: client, environments: [.production], from: window.from, to: window.to,
                                                        onlyFailures: true, producer: nil, database: nil).first)
        XCTAssertTrue(report.complete, report.summary)
        XCTAssertEqual(report.found, 30)
        XCTAssertEqual(Set(report.uuids), uuids)
    }
}
