import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Simulator
import XCTest

/// Contract: `storeledger worker recover --interval 2` finds on its own, within a few passes, the
/// notifications Apple failed to deliver (its history), feeds them once with provenance
/// `recovered` (the ledger's cause says so), leaves the delivered ones alone, makes the customer
/// right, and reports through its admin port (ready, `storeledger_recovery_fed_total`).
final class ScheduledRecoveryTests: XCTestCase {
    func testTheRecoverWorkerFeedsLostNotificationsOnItsOwnOnceWithProvenance() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        let day: Int64 = 86_400_000
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let userId = StoreState.userUUID(seed: 0x5C4ED, index: 2)
        let otid = try api.subscriber(userId, atMs: nowMs - 40 * day).originalTransactionId
        // The purchase reached us; the renewal never did.
        let subscribed = try api.sim.store.read { try api.sim.emitter.v2($0, otid: otid, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: nowMs - 40 * day) }
        XCTAssertEqual(try HTTP.post(api.sim.ingestURL + Delivery.notificationPath, body: Data(subscribed.body)).status, 200)
        api.server.state.record(subscribed, delivered: true)
        let renewal = try api.sim.store.mutate { try $0.renew(otid) }
        let renewed = try api.sim.store.read { try api.sim.emitter.v2($0, otid: otid, type: "DID_RENEW", transaction: renewal, atMs: renewal.purchaseMs) }
        api.server.state.record(renewed, delivered: false)
        let checker = MembershipChecker(ingestURL: api.sim.ingestURL)
        let expectation = api.sim.store.read { Oracle.expectation(for: $0.users[userId]!, in: $0) }
        Thread.sleep(forTimeInterval: 3)
        XCTAssertFalse(checker.check([expectation]).isEmpty, "without the renewal the customer is wrong")

        let adminPort = try FreePort.loopback()
        try api.sim.cluster.supervisor.start(.init(role: "recover", arguments: ["worker", "recover", "--interval", "2", "--lookback-hours", "1200",
                                                                                "--admin-port", String(adminPort)],
                                                   environment: api.cliEnvironment, onExit: .restart))
        try waitUntil("the recover worker made the customer right", timeout: 240, interval: 0.5) { checker.check([expectation]).isEmpty }
        let database = try api.sim.cluster.database()
        defer { database.close() }
        let provenances = try database.query("""
            SELECT DISTINCT cause->>'provenance' AS provenance FROM ledger
            WHERE subscription_key = \(otid) AND cause->>'notificationType' = 'DID_RENEW'
            """).map { try $0.decode("provenance", as: String?.self) }
        XCTAssertEqual(provenances, ["recovered"])
        // Several passes later the renewal was still fed once: later passes see it in seen_events.
        Thread.sleep(forTimeInterval: 5)
        let metrics = try HTTP.get("http://127.0.0.1:\(adminPort)/metrics").text
        let fed = metrics.split(separator: "\n").filter { $0.hasPrefix("storeledger_recovery_fed_total") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
        XCTAssertEqual(fed, 1, metrics)
        XCTAssertEqual(try HTTP.get("http://127.0.0.1:\(adminPort)/readyz").status, 200)
        let raw = try api.sim.cluster.readTopic(Topic.notificationsRaw, atLeast: 2)
        XCTAssertEqual(raw.filter { record in
            record.headers.contains { $0.name == RecordHeader.provenance && $0.value == Array("recovered".utf8) }
        }.count, 1)
    }
}
