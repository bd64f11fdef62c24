import Domain
import Foundation
import XCTest

/// Contract: the scenarios S16–S20 of real App Store traffic's odd shapes (R14–R18) run through the
/// real system — ingest, broker, the four stage workers, PostgreSQL — with V1 bodies in Apple's real
/// shape and V2 bodies signed with Apple's published test chain. Each scenario is played in Apple's
/// natural order (asserting the ledger's story step by step) and shuffled (asserting the same final
/// membership). One cluster serves the class; every run uses its own subscriptions and waits for
/// effects instead of sleeping.
final class StrangeTrafficScenarioTests: XCTestCase {
    nonisolated(unsafe) static var world: ScenarioWorld?
    nonisolated(unsafe) static var startError: Error?
    static let run = String(Int.random(in: 100_000...999_999))

    override class func setUp() {
        super.setUp()
        do { world = try ScenarioWorld() } catch { startError = error }
    }

    override class func tearDown() {
        world?.stop()
        world = nil
        super.tearDown()
    }

    private func running() throws -> ScenarioWorld {
        guard let world = Self.world else { throw Self.startError ?? ClusterError("scenario cluster did not start") }
        return world
    }

    typealias Tx = ScenarioBodies.Tx
    let t0 = ScenarioBodies.t0
    let day = ScenarioBodies.day
    let month = ScenarioBodies.month

    private func key(_ name: String) -> String { "8\(Self.run)\(name)" }
    private func interval(_ start: Int64, _ end: Int64?) -> Interval { Interval(startMs: start, endMs: end) }

    // MARK: S16 — REFUND, REFUND_REVERSED, then Apple's retry of the REFUND (R14)

    private func s16Inputs(_ world: ScenarioWorld, otid: String) throws -> (subscribe: Data, refund: Data, reversed: Data, purchase: Tx) {
        let a = Tx.period("\(otid)0", otid: otid, start: t0)
        let renewal = ScenarioBodies.V2Signer.renewal(otid: otid, product: a.product)
        return (try world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a, renewal: renewal),
                try world.signer.notification("REFUND", signedMs: t0 + 10 * day, transaction: a.cancelled(at: t0 + 10 * day, reason: "0"),
                                              revocationType: "REFUND_FULL"),
                try world.signer.notification("REFUND_REVERSED", signedMs: t0 + 12 * day, transaction: a),
                a)
    }

    func testS16RefundReversedThenTheRefundRetriedKeepsTheFullPeriod() throws {
        let world = try running()
        let otid = key("16")
        let inputs = try s16Inputs(world, otid: otid)
        try world.notify(inputs.subscribe)
        try world.subscription(otid) { $0.grants.count == 1 }
        try world.notify(inputs.refund)
        try world.subscription(otid) { $0.kinds.contains("cut") }
        try world.notify(inputs.reversed)
        try world.subscription(otid) { $0.kinds.contains("extend") }
        // Apple's retry: the same signed payload (same notificationUUID, old signedDate).
        try world.notify(inputs.refund)
        try world.waitSeen(otid, inputs: 3, deliveries: 4)
        let view = try world.subscription(otid) { _ in true }
        XCTAssertEqual(view.kinds, ["grant", "cut", "extend"], "the retry cuts nothing")
        XCTAssertEqual(view.ledger[1].interval, interval(t0 + 10 * day, t0 + month))
        XCTAssertEqual(view.ledger[2].interval, interval(t0 + 10 * day, t0 + month))
        XCTAssertEqual(view.ledger[2].cause.notificationType, "REFUND_REVERSED")
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)])
    }

    func testS16ShuffledTheRefundsFirstDeliveryLostItsRetryArrivesAfterTheReversal() throws {
        let world = try running()
        let otid = key("17")
        let inputs = try s16Inputs(world, otid: otid)
        try world.notify(inputs.reversed)
        try world.notify(inputs.refund)
        try world.notify(inputs.subscribe)
        try world.waitSeen(otid, inputs: 3)
        let view = try world.subscription(otid) { $0.group()?.intervals == [self.interval(self.t0, self.t0 + self.month)] }
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)], "the reversal stands")
        XCTAssertEqual(view.kinds.filter { $0 == "cut" }.count, view.kinds.filter { $0 == "extend" }.count,
                       "a cut, if any, was given back")
    }

    // MARK: S17 — V1 CANCEL with the cancellation only at the top level (R15)

    private func s17Inputs(otid: String) throws -> (buy: [String: Any], cancel: [String: Any], cancelAt: Int64) {
        let a = Tx.period("\(otid)0", otid: otid, start: t0)
        let cancelAt = t0 + 6 * day + 789
        // latest_receipt_info still shows the purchase uncancelled; the top level names it.
        var cancel = try ScenarioBodies.v1("CANCEL", otid: otid, [a], autoRenew: false)
        cancel["cancellation_date_ms"] = String(cancelAt)
        cancel["cancellation_date"] = ScenarioBodies.appleDate(cancelAt)
        cancel["cancellation_reason"] = "0"
        cancel["web_order_line_item_id"] = a.web
        cancel["original_transaction_id"] = otid
        return (try ScenarioBodies.v1("INITIAL_BUY", otid: otid, [a]), cancel, cancelAt)
    }

    func testS17V1CancelWithTheCancellationOnlyAtTheTopLevelCutsAtThatDate() throws {
        let world = try running()
        let otid = key("20")
        let inputs = try s17Inputs(otid: otid)
        try world.notify(inputs.buy)
        try world.subscription(otid) { $0.grants.count == 1 }
        try world.notify(inputs.cancel)
        let view = try world.subscription(otid) { $0.kinds.contains("cut") }
        let cut = try XCTUnwrap(view.ledger.first { $0.kind == "cut" })
        let second = inputs.cancelAt / 1000 * 1000
        XCTAssertEqual(cut.interval, interval(second, t0 + month), "cut at the top-level date, at second precision")
        XCTAssertEqual(cut.cutKind, "refund")
        XCTAssertEqual(cut.cause.notificationType, "CANCEL")
        XCTAssertEqual(view.group()?.intervals, [interval(t0, second)])
    }

    func testS17ShuffledCancelBeforeThePurchase() throws {
        let world = try running()
        let otid = key("21")
        let inputs = try s17Inputs(otid: otid)
        try world.notify(inputs.cancel)
        try world.notify(inputs.buy)
        try world.waitSeen(otid, inputs: 2)
        let second = inputs.cancelAt / 1000 * 1000
        let view = try world.subscription(otid) { $0.group()?.intervals == [self.interval(self.t0, second)] }
        XCTAssertFalse(view.kinds.contains("extend"))
    }

    func testS17TopLevelCancelThatMatchesNoPurchaseIsRecorded() throws {
        let world = try running()
        let otid = key("22")
        var inputs = try s17Inputs(otid: otid)
        inputs.cancel["web_order_line_item_id"] = "999999"
        let unified = inputs.cancel["unified_receipt"] as! [String: Any]
        inputs.cancel["unified_receipt"] = unified.merging(["latest_receipt_info": [[String: Any]]()]) { $1 }
        try world.notify(inputs.buy)
        try world.subscription(otid) { $0.grants.count == 1 }
        try world.notify(inputs.cancel)
        let view = try world.subscription(otid) { $0.kinds.contains("record") }
        let record = try XCTUnwrap(view.ledger.first { $0.kind == "record" })
        XCTAssertTrue(record.reason.contains("names no purchase"), record.reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)], "nothing cut")
    }

    // MARK: S18 — one V1 body, two subscriptions (R16)

    private func s18Inputs(type: String, a: String, b: String) throws -> [[String: Any]] {
        let ta = Tx.period("\(a)0", otid: a, start: t0)
        let tb = Tx.period("\(b)0", otid: b, product: "vip.plus.1m", start: t0)
        // The Apple ID's body about `a` also carries `b` in unified_receipt, with its own renewal info.
        var body = try ScenarioBodies.v1(type, otid: a, [ta], autoRenew: false, statusChangeMs: t0 + 3 * day)
        let (_, template) = try ScenarioBodies.template()
        var unified = body["unified_receipt"] as! [String: Any]
        unified["latest_receipt_info"] = (unified["latest_receipt_info"] as! [[String: Any]]) + [ScenarioBodies.receiptInfo(tb, template: template)]
        var pending = unified["pending_renewal_info"] as! [[String: Any]]
        if type == "DID_FAIL_TO_RENEW" { pending[0]["is_in_billing_retry_period"] = "1" }
        pending.append(["original_transaction_id": b, "product_id": tb.product, "auto_renew_product_id": tb.product,
                        "auto_renew_status": "1", "is_in_billing_retry_period": "0"])
        unified["pending_renewal_info"] = pending
        body["unified_receipt"] = unified
        return [try ScenarioBodies.v1("INITIAL_BUY", otid: a, [ta]), try ScenarioBodies.v1("INITIAL_BUY", otid: b, [tb]), body]
    }

    private func assertOnlyTheNamedSubscriptionChanged(_ world: ScenarioWorld, a: String, b: String, type: String) throws {
        let viewA = try world.subscription(a) { $0.group()?.autoRenewStatus == false }
        let viewB = try world.subscription(b) { $0.group()?.autoRenewStatus != nil }
        try world.waitSeen(b, inputs: 2)
        XCTAssertEqual(viewA.group()?.autoRenewStatus, false, type)
        XCTAssertEqual(try world.subscription(b)?.group()?.autoRenewStatus, true, "\(type): the other subscription keeps auto-renew on")
        XCTAssertNotEqual(try world.subscription(b)?.group()?.isInBillingRetry, true, "\(type): the other one is not in billing retry")
        if type == "DID_FAIL_TO_RENEW" { XCTAssertEqual(viewA.group()?.isInBillingRetry, true) }
        XCTAssertEqual(viewB.group()?.intervals, [interval(t0, t0 + month)])
    }

    func testS18RenewalStatusChangeAboutOneOfTwoSubscriptionsChangesOnlyThatOne() throws {
        let world = try running()
        for (index, type) in ["DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW"].enumerated() {
            let a = key("3\(index)a"), b = key("3\(index)b")
            let inputs = try s18Inputs(type: type, a: a, b: b)
            try world.notify(inputs[0])
            try world.notify(inputs[1])
            try world.subscription(b) { $0.grants.count == 1 }
            try world.subscription(a) { $0.grants.count == 1 }
            try world.notify(inputs[2])
            try assertOnlyTheNamedSubscriptionChanged(world, a: a, b: b, type: type)
        }
    }

    func testS18Shuffled() throws {
        let world = try running()
        let a = key("35a"), b = key("35b")
        let inputs = try s18Inputs(type: "DID_CHANGE_RENEWAL_STATUS", a: a, b: b)
        for index in [2, 1, 0] { try world.notify(inputs[index]) }
        try world.waitSeen(a, inputs: 2)
        try assertOnlyTheNamedSubscriptionChanged(world, a: a, b: b, type: "shuffled")
    }

    // MARK: S19 — bought on account A, restored on account B, renewed (R17)

    private func s19Inputs(otid: String) throws -> (buy: [String: Any], restore: Data, renew: [String: Any], a: String, b: String) {
        let a = "aaaaaaaa-0000-4000-8000-\(Self.run)\(otid.suffix(6))"
        let b = "bbbbbbbb-0000-4000-8000-\(Self.run)\(otid.suffix(6))"
        let first = Tx.period("\(otid)0", otid: otid, start: t0, token: a)
        let renewal = Tx.period("\(otid)1", otid: otid, start: t0 + month, token: a)
        // B uploads the restored receipt with its id printed in upper case.
        return (try ScenarioBodies.v1("INITIAL_BUY", otid: otid, [first]),
                try ScenarioBodies.receiptUpload(user: b.uppercased(), [first]),
                try ScenarioBodies.v1("DID_RENEW", otid: otid, [first, renewal]), a, b)
    }

    func testS19BoughtOnAccountARestoredOnBRenewedBKeepsIt() throws {
        let world = try running()
        let otid = key("40")
        let inputs = try s19Inputs(otid: otid)
        try world.notify(inputs.buy)
        try world.subscription(otid) { $0.userId == inputs.a }
        try world.upload(inputs.restore)
        try world.subscription(otid) { $0.userId == inputs.b }
        try world.notify(inputs.renew)
        try world.subscription(otid) { $0.grants.count == 2 }
        try world.waitSeen(otid, inputs: 3)
        let view = try world.subscription(otid) { _ in true }
        XCTAssertEqual(view.userId, inputs.b, "the renewal repeating A's token is no new claim")
        XCTAssertEqual(view.kinds.filter { $0 == "unlink" }.count, 1, "moved once, from A to B")
        let user = try world.user(inputs.b.uppercased()) { $0.group()?.intervals.count == 1 }
        XCTAssertEqual(user.userId, inputs.b, "a UUID user id is one user in any case")
        XCTAssertEqual(user.group()?.intervals, [interval(t0, t0 + 2 * month)])
        XCTAssertNil(try world.user(inputs.a)?.group(), "A holds nothing")
    }

    func testS19Shuffled() throws {
        let world = try running()
        let otid = key("41")
        let inputs = try s19Inputs(otid: otid)
        try world.notify(inputs.renew)
        try world.upload(inputs.restore)
        try world.notify(inputs.buy)
        try world.waitSeen(otid, inputs: 3)
        let view = try world.subscription(otid) { $0.userId == inputs.b && $0.group()?.intervals == [self.interval(self.t0, self.t0 + 2 * self.month)] }
        XCTAssertEqual(view.userId, inputs.b)
    }

    // MARK: S20 — the same original_transaction_id in Sandbox and Production (R18)

    private struct EnvironmentView: Decodable {
        struct Line: Decodable { var kind: String; var environment: String?; var reason: String }
        var subscriptionKey: String
        var environment: String?
        var ledger: [Line]
    }

    private func s20Inputs(otid: String) throws -> [[String: Any]] {
        let production = Tx.period("\(otid)0", otid: otid, start: t0, token: "cccccccc-0000-4000-8000-\(Self.run)000020")
        let sandbox = Tx.period("\(otid)0", otid: otid, start: t0 + day, token: "dddddddd-0000-4000-8000-\(Self.run)000020")
        return [try ScenarioBodies.v1("INITIAL_BUY", otid: otid, [production], environment: "PROD"),
                try ScenarioBodies.v1("INITIAL_BUY", otid: otid, [sandbox], environment: "Sandbox"),
                try ScenarioBodies.v1("CANCEL", otid: otid, [sandbox.cancelled(at: t0 + 2 * day, reason: "0")], autoRenew: false,
                                      environment: "Sandbox")]
    }

    private func assertTwoSubscriptions(_ world: ScenarioWorld, otid: String) throws {
        let production = try world.subscription(otid, environment: "Production") { $0.grants.count == 1 }
        let refunded = [interval(t0 + day, t0 + 2 * day)]
        let sandbox = try world.subscription(otid, environment: "Sandbox") { $0.group()?.intervals == refunded }
        XCTAssertEqual(production.subscriptionKey, otid)
        XCTAssertEqual(sandbox.subscriptionKey, "\(otid)@Sandbox")
        XCTAssertEqual(production.group()?.intervals, [interval(t0, t0 + month)], "the Sandbox refund never touches Production")
        XCTAssertNotEqual(production.userId, sandbox.userId)
        for (key, environment) in [(otid, "Production"), ("\(otid)@Sandbox", "Sandbox")] {
            let response = try HTTP.get("\(world.cluster.ingestURL)/v1/subscriptions/\(key)")
            let view = try JSONDecoder().decode(EnvironmentView.self, from: response.body)
            XCTAssertEqual(view.environment, environment)
            XCTAssertTrue(view.ledger.allSatisfy { $0.environment == environment }, "\(view.ledger.map(\.environment))")
        }
        XCTAssertTrue(sandbox.grants.first?.reason.contains("Sandbox purchase") ?? false, sandbox.grants.first?.reason ?? "")
    }

    func testS20SameOriginalTransactionIdInSandboxAndProductionAreTwoSubscriptions() throws {
        let world = try running()
        let otid = key("50")
        let inputs = try s20Inputs(otid: otid)
        try world.notify(inputs[0])
        try world.subscription(otid, environment: "Production") { $0.grants.count == 1 }
        try world.notify(inputs[1])
        try world.subscription(otid, environment: "Sandbox") { $0.grants.count == 1 }
        try world.notify(inputs[2])
        try assertTwoSubscriptions(world, otid: otid)
    }

    func testS20Shuffled() throws {
        let world = try running()
        let otid = key("51")
        let inputs = try s20Inputs(otid: otid)
        for index in [2, 0, 1] { try world.notify(inputs[index]) }
        try assertTwoSubscriptions(world, otid: otid)
    }
}
