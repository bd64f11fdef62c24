import Foundation
import Postgres
import Simulator
import XCTest

/// Contract: `storeledger doctor` passes every check against the simulated App Store (settings,
/// roots, a token from the signer, the endpoint, the test notification delivered to ingest and
/// seen by the dedupe stage). `support extend` moves one subscription's renewal date at Apple,
/// records the action with admin and reason, and the refresh that follows shows the new expiry in
/// the ledger (cause server-api). `support mass-extend` reaches every active subscriber of the
/// product, waits for Apple's status and records it.
final class SupportActionTests: XCTestCase {
    func testDoctorPassesAndExtensionsReachAppleTheLedgerAndTheRecord() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        let doctor = try RecoverNotificationsTests.run(["doctor", "--json", "--environment", "Production"], environment: api.cliEnvironment)
        struct Checks: Decodable { struct Check: Decodable { var name: String; var ok: Bool; var detail: String }; var doctor: [Check] }
        let checks = try JSONDecoder().decode(Checks.self, from: Data(doctor.utf8)).doctor
        print("[support] \(doctor)")
        XCTAssertEqual(checks.map(\.name), ["configuration", "roots", "key", "endpoint Production", "delivery Production", "pipeline Production"])
        XCTAssertTrue(checks.allSatisfy(\.ok), doctor)

        let day: Int64 = 86_400_000
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        var subscriptions: [(user: String, otid: String)] = []
        for index in 0..<2 {
            let userId = StoreState.userUUID(seed: 0x5099, index: index)
            let first = try api.subscriber(userId, atMs: nowMs - 10 * day)
            let subscribed = try api.sim.store.read {
                try api.sim.emitter.v2($0, otid: first.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: first.purchaseMs)
            }
            XCTAssertEqual(try HTTP.post(api.sim.ingestURL + Delivery.notificationPath, body: Data(subscribed.body)).status, 200)
            subscriptions.append((userId, first.originalTransactionId))
        }
        let checker = MembershipChecker(ingestURL: api.sim.ingestURL)
        func expectations() -> [UserExpectation] { api.sim.store.read { state in subscriptions.map { Oracle.expectation(for: state.users[$0.user]!, in: state) } } }
        try waitUntil("both purchases are in the ledger", timeout: 120, interval: 0.5) { checker.check(expectations()).isEmpty }
        let expiry = { (otid: String) in api.sim.store.read { try! $0.subscription(otid).latest!.expiresMs! } }

        let otid = subscriptions[0].otid
        let before = expiry(otid)
        let output = try RecoverNotificationsTests.run(["support", "extend", "--original-transaction-id", otid, "--days", "7", "--reason-code", "1",
                                                        "--admin", "alice@support", "--reason", "compensation for an outage", "--json"],
                                                       environment: api.cliEnvironment)
        print("[support] \(output)")
        XCTAssertEqual(expiry(otid), before + 7 * day, "Apple moved the renewal date")
        XCTAssertTrue(output.contains(#""succeeded":true"#), output)
        try waitUntil("the ledger shows the extension", timeout: 120, interval: 0.5) { checker.check(expectations()).isEmpty }
        let database = try api.sim.cluster.database()
        defer { database.close() }
        let extensions = try database.query("""
            SELECT count(*)::bigint AS n FROM ledger WHERE subscription_key = \(otid) AND kind = 'extend' AND cause->>'source' = 'server-api'
            """).first!.int64("n")
        XCTAssertEqual(extensions, 1)
        let action = try XCTUnwrap(try database.query("SELECT kind, admin, reason, request->>'extendByDays' AS days FROM support_actions WHERE target = \(otid)").first)
        XCTAssertEqual(try action.string("kind"), "extend")
        XCTAssertEqual(try action.string("admin"), "alice@support")
        XCTAssertEqual(try action.string("reason"), "compensation for an outage")
        XCTAssertEqual(try action.string("days"), "7")

        // A request id the status request could not carry in its path is refused before Apple is asked:
        // Apple would extend every subscriber and the outcome would be unreadable.
        let unchanged = subscriptions.map { expiry($0.otid) }
        XCTAssertThrowsError(try RecoverNotificationsTests.run(["support", "mass-extend", "--product", "vip.a.1m", "--days", "3", "--reason-code", "3",
                                                                "--environment", "Production", "--admin", "bob@support", "--reason", "service outage",
                                                                "--request-id", "promo 2026/11"], environment: api.cliEnvironment))
        // Every subscriber, for good: the environment is named, never assumed.
        XCTAssertThrowsError(try RecoverNotificationsTests.run(["support", "mass-extend", "--product", "vip.a.1m", "--days", "3", "--reason-code", "3",
                                                                "--admin", "bob@support", "--reason", "service outage"], environment: api.cliEnvironment))
        XCTAssertEqual(subscriptions.map { expiry($0.otid) }, unchanged)

        let others = subscriptions.map { expiry($0.otid) }
        let mass = try RecoverNotificationsTests.run(["support", "mass-extend", "--product", "vip.a.1m", "--days", "3", "--reason-code", "3",
                                                      "--environment", "Production", "--admin", "bob@support", "--reason", "service outage", "--json"],
                                                     environment: api.cliEnvironment)
        print("[support] \(mass)")
        XCTAssertEqual(subscriptions.map { expiry($0.otid) }, others.map { $0 + 3 * day }, "every active subscriber of the product")
        XCTAssertTrue(mass.contains(#""complete":true"#), mass)
        let massRow = try XCTUnwrap(try database.query("""
            SELECT admin, outcome->>'succeededCount' AS succeeded FROM support_actions WHERE target = 'product:vip.a.1m@Production'
            """).first)
        XCTAssertEqual(try massRow.string("admin"), "bob@support")
        XCTAssertGreaterThanOrEqual(Int(try massRow.string("succeeded")) ?? 0, 2)
    }
}
