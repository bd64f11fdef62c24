import AppStoreServerAPI
import AppleDecoding
import Foundation
@testable import Simulator
import XCTest

/// Contract: when the App Store (here the simulator told to misbehave) breaks its contract — a
/// cursor that never advances, a page far over Apple's size, a 5,000-byte cursor, another app's
/// bundle id, a 200 that is not JSON, negative counts — the client ends with a bounded walk or an
/// `.invalidResponse` failure: it never loops, crashes or returns unverified data.
final class HostileAnswerTests: XCTestCase {
    func world() throws -> (ServerAPIHarness, SimTransaction, AppStoreServerAPIClient) {
        let h = try ServerAPIHarness(pageSize: 2)
        let first = try h.subscriber("hostile-user", daysAgo: 100)
        for _ in 0..<3 { _ = try h.store.mutate { try $0.renew(first.originalTransactionId) } }
        return (h, first, h.client(retry: RetryPolicy(maxAttempts: 1)))
    }

    func testACursorThatNeverAdvancesEndsTheWalkAsTruncated() throws {
        let (h, first, client) = try world()
        h.server.state.misbehave(.repeatCursor)
        let walk = try client.transactionHistory(transactionId: first.transactionId).value()
        XCTAssertTrue(walk.truncated)
        XCTAssertEqual(walk.pages, 2, "the repeated cursor is noticed on the second page")
        let refunds = try client.refundHistory(transactionId: first.transactionId).value()
        XCTAssertTrue(refunds.truncated)

        let delivery = try h.store.read { try h.emitter.v2($0, otid: first.originalTransactionId, type: "DID_RENEW", atMs: h.nowMs - 1000) }
        h.server.state.record(delivery, delivered: false)
        let history = try client.notificationHistory(NotificationHistoryRequest(startDate: h.nowMs - 86_400_000, endDate: h.nowMs)).value()
        XCTAssertTrue(history.truncated)
        XCTAssertLessThanOrEqual(history.pages, 2)
    }

    func testOversizedPagesLongCursorsForeignAppsAndNonJSONAreInvalidResponses() throws {
        let (h, first, client) = try world()
        for misbehavior: ServerAPIState.Misbehavior in [.inflatePage(APILimits.maxItemsPerPage + 1), .longCursor, .foreignBundle, .notJSON] {
            h.server.state.misbehave(misbehavior)
            let failure = try client.transactionHistoryPage(transactionId: first.transactionId).failure()
            XCTAssertEqual(failure.kind, .invalidResponse, "\(misbehavior): \(failure)")
        }
        h.server.state.misbehave(.notJSON)
        XCTAssertEqual(try client.transactionInfo(transactionId: first.transactionId).failure().kind, .invalidResponse)
        h.server.state.misbehave(nil)
        XCTAssertNoThrow(try client.transactionHistoryPage(transactionId: first.transactionId).get(), "behaving again, answers are fine")
    }

    func testNegativeExtensionCountsAreRefused() throws {
        let (h, _, client) = try world()
        let request = MassExtendRenewalDateRequest(extendByDays: 1, extendReasonCode: .other, requestIdentifier: "neg-1", productId: "vip.a.1m")
        XCTAssertEqual(try client.extendRenewalDateForAllActiveSubscribers(request).value(), "neg-1")
        h.server.state.misbehave(.negativeCounts)
        XCTAssertEqual(try client.massExtensionStatus(productId: "vip.a.1m", requestIdentifier: "neg-1").failure().kind, .invalidResponse)
    }
}
