import Foundation
import Postgres
import Simulator
import XCTest

/// Contract: when Apple sends CONSUMPTION_REQUEST for a purchase the ledger granted, the
/// `storeledger worker consumption` process (tokens from the signer) answers Send Consumption
/// Information within the simulator's deadline with the values the policy computes from the
/// ledger: consent, DELIVERED, the elapsed share of the granted period, GRANT_PRORATED between the
/// configured thresholds, no sample content. The answer is recorded in `consumption_answers`
/// (and served by ingest's admin read); Apple's retry of the same notification answers nothing new.
final class ConsumptionAnswerTests: XCTestCase {
    func testAConsumptionRequestIsAnsweredInTimeWithThePolicyValuesAndOnlyOnce() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        try api.sim.cluster.supervisor.start(.init(role: "consumption", arguments: ["worker", "consumption"],
                                                   environment: api.cliEnvironment.merging([
                                                       "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "3000",
                                                       "STORELEDGER_CONSUMPTION_DECLINE_FROM_PERCENT": "60",
                                                   ]) { $1 }, onExit: .restart))
        let day: Int64 = 86_400_000
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let userId = StoreState.userUUID(seed: 0x16C, index: 3)
        let purchase = try api.subscriber(userId, atMs: nowMs - 10 * day)
        let subscribed = try api.sim.store.read {
            try api.sim.emitter.v2($0, otid: purchase.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: purchase.purchaseMs)
        }
        XCTAssertEqual(try HTTP.post(api.sim.ingestURL + Delivery.notificationPath, body: Data(subscribed.body)).status, 200)
        let checker = MembershipChecker(ingestURL: api.sim.ingestURL)
        let expectation = api.sim.store.read { Oracle.expectation(for: $0.users[userId]!, in: $0) }
        try waitUntil("the purchase is in the ledger", timeout: 120, interval: 0.5) { checker.check([expectation]).isEmpty }

        // Apple asks, and retries once (the same signed notification).
        let askedMs = Int64(Date().timeIntervalSince1970 * 1000)
        let request = try api.sim.store.read {
            try api.sim.emitter.v2($0, otid: purchase.originalTransactionId, type: "CONSUMPTION_REQUEST", transaction: purchase, atMs: askedMs,
                                   consumptionRequestReason: "UNSATISFIED_WITH_PURCHASE")
        }
        api.server.state.consumptionRequested(transactionId: purchase.transactionId, atMs: askedMs)
        for _ in 0..<2 { XCTAssertEqual(try HTTP.post(api.sim.ingestURL + Delivery.notificationPath, body: Data(request.body)).status, 200) }
        try waitUntil("Apple has the answer", timeout: Double(ServerAPIState.consumptionDeadlineMs) / 1000 + 30, interval: 0.2) {
            api.server.state.consumptionAnswer(for: purchase.transactionId) != nil
        }
        let (answer, inTime) = try XCTUnwrap(api.server.state.consumptionAnswer(for: purchase.transactionId))
        print("[consumption] answered after \(answer.receivedMs - askedMs) ms: \(answer.body)")
        XCTAssertTrue(inTime, "answered within the simulator's deadline")

        // The policy's values, from the ledger's grant [purchase, expiry) in whole seconds.
        let start = purchase.purchaseMs / 1000 * 1000, end = try XCTUnwrap(purchase.expiresMs) / 1000 * 1000
        let share = Double(askedMs - start) / Double(end - start) * 100_000
        XCTAssertEqual(answer.body["customerConsented"] as? Bool, true)
        XCTAssertEqual(answer.body["deliveryStatus"] as? String, "DELIVERED")
        XCTAssertNil(answer.body["consumptionPercentage"], "Apple takes no percentage for an auto-renewable subscription")
        XCTAssertEqual(answer.body["refundPreference"] as? String, "GRANT_PRORATED", "\(Int(share / 1000)) % is between 10 % and 60 %")
        XCTAssertEqual(answer.body["sampleContentProvided"] as? Bool, false)

        let database = try api.sim.cluster.database()
        defer { database.close() }
        let rows = try database.query("""
            SELECT outcome, user_id, request_reason, policy, request->>'refundPreference' AS preference, facts->>'delivered' AS delivered
            FROM consumption_answers WHERE transaction_id = \(purchase.transactionId)
            """)
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(try rows.first?.string("outcome"), "sent")
        XCTAssertEqual(try rows.first?.string("user_id"), userId)
        XCTAssertEqual(try rows.first?.string("request_reason"), "UNSATISFIED_WITH_PURCHASE")
        XCTAssertEqual(try rows.first?.string("policy"), "ledger-v1")
        XCTAssertEqual(try rows.first?.string("preference"), "GRANT_PRORATED")
        XCTAssertEqual(try rows.first?.string("delivered"), "true")
        Thread.sleep(forTimeInterval: 3)
        XCTAssertEqual(api.server.state.consumptionAnswers.filter { $0.transactionId == purchase.transactionId }.count, 1,
                       "Apple's retry of the request answers nothing new")
    }
}
