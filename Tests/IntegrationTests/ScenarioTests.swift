import Domain
import Foundation
import Postgres
import XCTest

/// Contract: each scenario of DOMAIN.md (S1–S10, S13–S15) runs through the real system — ingest,
/// broker, the four stage workers, PostgreSQL — with V1 bodies built from Apple's real shape and,
/// where the scenario exists in V2, bodies signed with Apple's published test chain. Each test
/// asserts the final membership intervals and the ledger entries (count, kind, before/after,
/// cause) through the read API. One cluster serves the class; every test uses its own
/// subscriptions and waits for effects instead of sleeping.
final class ScenarioTests: XCTestCase {
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

    /// A subscription id unique to this run and test.
    private func key(_ name: String) -> String { "7\(Self.run)\(name)" }
    private func interval(_ start: Int64, _ end: Int64?) -> Interval { Interval(startMs: start, endMs: end) }

    // MARK: S1, S2, S14 — one purchase, one grant

    func testS1RestoreOnANewDeviceGrantsOnce() throws {
        let world = try running()
        let key = key("01")
        let purchase = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [purchase]))
        try world.subscription(key) { $0.grants.count == 1 }
        // The app restores on a new device: same purchase, transaction_id + 1, uploaded with the user id.
        var restored = purchase
        restored.id = "\(key)1"
        try world.upload(ScenarioBodies.receiptUpload(user: "u\(key)", [restored]))
        let view = try world.subscription(key) { $0.userId == "u\(key)" }
        try world.waitSeen(key, inputs: 2)
        XCTAssertEqual(view.kinds, ["grant", "link"])
        XCTAssertEqual(view.grants.first?.interval, interval(t0, t0 + month))
        let db = try world.cluster.database()
        defer { db.close() }
        let aliases = try db.query("SELECT transaction_id FROM transaction_aliases WHERE subscription_key = \(ScenarioWorld.key(key)) ORDER BY transaction_id")
            .map { try $0.string("transaction_id") }
        XCTAssertEqual(aliases, ["\(key)0", "\(key)1"], "every transaction id is kept as an alias (R1)")
    }

    func testS2ClientUploadV1AndV2OfTheSameRenewalGrantOnce() throws {
        let world = try running()
        let key = key("02")
        let first = Tx.period("\(key)0", otid: key, start: t0)
        let renewal = Tx.period("\(key)1", otid: key, start: t0 + month)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [first]))
        try world.subscription(key) { $0.grants.count == 1 }
        // The same renewal three ways, in no particular order.
        try world.upload(ScenarioBodies.receiptUpload(user: "u\(key)", [first, renewal]))
        try world.notify(ScenarioBodies.v1("DID_RENEW", otid: key, [first, renewal]))
        var v2Copy = renewal
        v2Copy.purchaseMs += 250   // V2 carries its own milliseconds (S14)
        try world.notify(world.signer.notification("DID_RENEW", signedMs: renewal.purchaseMs + 1_000, transaction: v2Copy,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: renewal.product)))
        try world.waitSeen(key, inputs: 4)
        let view = try world.subscription(key) { $0.grants.count >= 2 && $0.userId != nil }
        XCTAssertEqual(view.grants.count, 2, "one grant per period: \(view.kinds)")
        XCTAssertEqual(Set(view.grants.compactMap(\.cause.transactionId)), ["\(key)0", "\(key)1"])
        XCTAssertFalse(view.kinds.contains("cut"))
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + 2 * month)])
    }

    func testS14MillisecondsDifferBetweenTwoCopiesOneGrant() throws {
        let world = try running()
        let key = key("14")
        let copyA = Tx(id: "\(key)0", otid: key, purchaseMs: t0 + 123, expiresMs: t0 + month, web: "9\(key)")
        var copyB = copyA
        copyB.purchaseMs = t0 + 987
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [copyA]))
        try world.upload(ScenarioBodies.receiptUpload(user: "u\(key)", [copyB]))
        try world.waitSeen(key, inputs: 2)
        let view = try world.subscription(key) { $0.grants.count == 1 && $0.userId != nil }
        XCTAssertEqual(view.kinds.filter { $0 != "link" }, ["grant"])
        XCTAssertEqual(view.grants[0].interval, interval(t0, t0 + month), "granted from the purchase second")
    }

    // MARK: S3, S4 — switching within the group

    func testS3CrossgradeRightAfterBuyingEndsOnePeriodAfterTheSwitchNeverTwo() throws {
        let world = try running()
        let key = key("03")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]))
        try world.subscription(key) { $0.grants.count == 1 }
        let switchAt = t0 + day
        let b = Tx.period("\(key)1", otid: key, product: "vip.plus.1m", start: switchAt)
        try world.notify(ScenarioBodies.v1("CANCEL", otid: key, [a.cancelled(at: switchAt, upgraded: true), b],
                                           autoRenew: true, autoRenewProduct: "vip.plus.1m"))
        let view = try world.subscription(key) { $0.kinds.contains("cut") && $0.grants.count == 2 }
        XCTAssertEqual(view.kinds, ["grant", "cut", "grant", "renewal"])
        let cut = view.ledger[1]
        XCTAssertEqual(cut.interval, interval(switchAt, t0 + month))
        XCTAssertEqual(cut.before, [interval(t0, t0 + month)])
        XCTAssertEqual(cut.after, [interval(t0, switchAt)])
        XCTAssertEqual(cut.cutKind, "crossgrade")
        XCTAssertEqual(cut.cause.notificationType, "CANCEL")
        XCTAssertEqual(cut.cause.transactionId, a.id)
        XCTAssertTrue(cut.reason.contains("R3 a"), cut.reason)
        XCTAssertEqual(view.ledger[2].after, [interval(t0, switchAt + month)])
        XCTAssertEqual(view.group()?.expiresMs, switchAt + month, "one period after the switch")
        XCTAssertNotEqual(view.group()?.expiresMs, t0 + 2 * month, "never two months")
        XCTAssertEqual(view.group()?.currentProduct, "vip.plus.1m")
    }

    func testS3V2CrossgradeTheNewTransactionSupersedesTheOldOne() throws {
        let world = try running()
        let key = key("33")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: a.product)))
        try world.subscription(key) { $0.grants.count == 1 }
        let switchAt = t0 + day
        let b = Tx.period("\(key)1", otid: key, product: "vip.plus.1m", start: switchAt)
        try world.notify(world.signer.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", signedMs: switchAt, transaction: b,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: b.product)))
        let view = try world.subscription(key) { $0.kinds.contains("cut") }
        XCTAssertEqual(view.kinds, ["grant", "grant", "cut", "renewal"])
        XCTAssertEqual(view.ledger[2].interval, interval(switchAt, t0 + month))
        XCTAssertEqual(view.ledger[2].cutKind, "crossgrade")
        XCTAssertEqual(view.ledger[2].cause.notificationSubtype, "UPGRADE")
        XCTAssertEqual(view.group()?.intervals, [interval(t0, switchAt + month)])
    }

    func testS4CancelAndSwitchDeductsLikeS3AndTurnsRenewalOff() throws {
        let world = try running()
        let key = key("04")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]))
        try world.subscription(key) { $0.grants.count == 1 }
        let switchAt = t0 + day
        let b = Tx.period("\(key)1", otid: key, product: "vip.plus.1m", start: switchAt)
        try world.notify(ScenarioBodies.v1("CANCEL", otid: key, [a.cancelled(at: switchAt, upgraded: true), b],
                                           autoRenew: false, autoRenewProduct: "vip.plus.1m", statusChangeMs: switchAt))
        let view = try world.subscription(key) { $0.kinds.contains("cut") && $0.kinds.contains("renewal") }
        XCTAssertEqual(view.kinds, ["grant", "cut", "grant", "renewal"])
        XCTAssertEqual(view.ledger[1].cutKind, "cancelAndSwitch")
        XCTAssertEqual(view.ledger[1].interval, interval(switchAt, t0 + month))
        XCTAssertTrue(view.ledger[1].reason.contains("R3 b"), view.ledger[1].reason)
        XCTAssertTrue(view.ledger[3].reason.contains("auto-renew off"), view.ledger[3].reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, switchAt + month)])
        XCTAssertEqual(view.group()?.autoRenewStatus, false)
    }

    // MARK: S5, S6 — refunds

    func testS5RefundMidPeriodIsCutAtTheCancellationWithEvidence() throws {
        let world = try running()
        let key = key("05")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]))
        try world.subscription(key) { $0.grants.count == 1 }
        let refundAt = t0 + 10 * day
        try world.notify(ScenarioBodies.v1("CANCEL", otid: key, [a.cancelled(at: refundAt, reason: "0")], autoRenew: false,
                                           statusChangeMs: refundAt))
        let view = try world.subscription(key) { $0.kinds.contains("cut") }
        XCTAssertEqual(view.kinds, ["grant", "cut", "renewal"])
        let cut = view.ledger[1]
        XCTAssertEqual(cut.interval, interval(refundAt, t0 + month))
        XCTAssertEqual(cut.before, [interval(t0, t0 + month)])
        XCTAssertEqual(cut.after, [interval(t0, refundAt)])
        XCTAssertEqual(cut.cutKind, "refund")
        XCTAssertEqual(cut.cause.source, .notificationV1)
        XCTAssertEqual(cut.cause.notificationType, "CANCEL")
        XCTAssertEqual(cut.cause.transactionId, a.id)
        XCTAssertNotNil(cut.cause.rawPosition, "the evidence points at the raw input")
        XCTAssertTrue(cut.reason.contains("refund by Apple support, cancellation_reason 0"), cut.reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, refundAt)])
    }

    func testS5V2RefundMidPeriod() throws {
        let world = try running()
        let key = key("55")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a))
        try world.subscription(key) { $0.grants.count == 1 }
        let refundAt = t0 + 10 * day
        try world.notify(world.signer.notification("REFUND", signedMs: refundAt, transaction: a.cancelled(at: refundAt, reason: "1"),
                                                   revocationType: "REFUND_FULL"))
        let view = try world.subscription(key) { $0.kinds.contains("cut") }
        XCTAssertEqual(view.kinds, ["grant", "cut"])
        XCTAssertEqual(view.ledger[1].cutKind, "refund")
        XCTAssertEqual(view.ledger[1].cause.source, .notificationV2)
        XCTAssertEqual(view.ledger[1].cause.notificationType, "REFUND")
        XCTAssertNotNil(view.ledger[1].cause.notificationUUID)
        XCTAssertTrue(view.ledger[1].reason.contains("an issue in the app"), view.ledger[1].reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, refundAt)])
    }

    func testS6RefundAfterThePeriodEndedIsRecordedNothingDeducted() throws {
        let world = try running()
        let key = key("06")
        let p1 = Tx.period("\(key)0", otid: key, start: t0)
        let p2 = Tx.period("\(key)1", otid: key, start: t0 + month)
        try world.notify(ScenarioBodies.v1("DID_RENEW", otid: key, [p1, p2]))
        try world.subscription(key) { $0.grants.count == 2 }
        let refundAt = t0 + month + 5 * day
        try world.notify(ScenarioBodies.v1("CANCEL", otid: key, [p1.cancelled(at: refundAt, reason: "1"), p2]))
        let view = try world.subscription(key) { $0.kinds.contains("record") }
        XCTAssertEqual(view.kinds, ["grant", "grant", "record"])
        let record = view.ledger[2]
        XCTAssertEqual(record.before, record.after, "nothing deducted")
        XCTAssertEqual(record.cutKind, "refund")
        XCTAssertEqual(record.interval, interval(refundAt, refundAt), "the refund's instant, for support's timeline")
        // A bounded read: the newest lines, oldest first, and whether older ones were left out.
        let url = "\(world.cluster.ingestURL)/v1/subscriptions/\(ScenarioWorld.key(key, "Sandbox"))"
        let newest = try JSONSerialization.jsonObject(with: try HTTP.get(url + "?limit=2").body) as? [String: Any]
        XCTAssertEqual((newest?["ledger"] as? [[String: Any]])?.map { $0["kind"] as? String }, ["grant", "record"])
        XCTAssertEqual(newest?["ledgerTruncated"] as? Bool, true)
        XCTAssertEqual(try HTTP.get(url + "?limit=0").status, 400)
        XCTAssertEqual(record.purchaseId, view.ledger[0].purchaseId)
        XCTAssertEqual(record.cause.notificationType, "CANCEL")
        XCTAssertTrue(record.reason.contains("nothing deducted (R11)"), record.reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + 2 * month)])
    }

    func testS6V2RefundAfterThePeriodEnded() throws {
        let world = try running()
        let key = key("66")
        let p1 = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: p1))
        try world.subscription(key) { $0.grants.count == 1 }
        let refundAt = t0 + month + 5 * day
        try world.notify(world.signer.notification("REFUND", signedMs: refundAt, transaction: p1.cancelled(at: refundAt, reason: "0")))
        let view = try world.subscription(key) { $0.kinds.contains("record") }
        XCTAssertEqual(view.kinds, ["grant", "record"])
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)])
    }

    // MARK: S7, S8, S9 — levels and durations (R5)

    func testS7CrossgradeToAnotherDurationContinuesUntilTheRenewalThenA3() throws {
        let world = try running()
        let key = key("07")
        let a1 = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a1]))
        try world.subscription(key) { $0.grants.count == 1 }
        try world.notify(ScenarioBodies.v1("DID_CHANGE_RENEWAL_PREF", otid: key, [a1], autoRenewProduct: "vip.standard.3m",
                                           statusChangeMs: t0 + 5 * day))
        let pending = try world.subscription(key) { $0.group()?.pendingProduct != nil }
        XCTAssertEqual(pending.group()?.pendingProduct, "vip.standard.3m")
        XCTAssertEqual(pending.group()?.pendingChange, "crossgrade-at-renewal")
        XCTAssertEqual(pending.group()?.currentProduct, "vip.standard.1m")
        XCTAssertEqual(pending.group()?.intervals, [interval(t0, t0 + month)], "A1 continues until the renewal")
        let a3 = Tx.period("\(key)1", otid: key, product: "vip.standard.3m", start: t0 + month, length: 90 * day)
        try world.notify(ScenarioBodies.v1("DID_RENEW", otid: key, [a1, a3], autoRenewProduct: "vip.standard.3m"))
        let view = try world.subscription(key) { $0.grants.count == 2 && $0.group()?.pendingProduct == nil }
        XCTAssertEqual(view.kinds, ["grant", "renewal", "grant", "renewal"], "the pending change became the current product")
        XCTAssertEqual(view.ledger[2].interval, interval(t0 + month, t0 + month + 90 * day))
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month + 90 * day)])
        XCTAssertEqual(view.group()?.currentProduct, "vip.standard.3m")
        XCTAssertNil(view.group()?.pendingProduct)
    }

    func testS7V2CrossgradeToAnotherDurationWaitsForTheRenewal() throws {
        let world = try running()
        let key = key("77")
        let a1 = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a1,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: a1.product)))
        try world.subscription(key) { $0.grants.count == 1 }
        // Apple files a different-duration crossgrade under DOWNGRADE: it waits for the renewal.
        try world.notify(world.signer.notification("DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", signedMs: t0 + 5 * day,
                                                   transaction: a1,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: a1.product,
                                                                                             renewsAs: "vip.standard.3m")))
        let pending = try world.subscription(key) { $0.group()?.pendingProduct != nil }
        XCTAssertEqual(pending.group()?.pendingChange, "crossgrade-at-renewal")
        XCTAssertEqual(pending.group()?.intervals, [interval(t0, t0 + month)])
        let a3 = Tx.period("\(key)1", otid: key, product: "vip.standard.3m", start: t0 + month, length: 90 * day)
        try world.notify(world.signer.notification("DID_RENEW", signedMs: t0 + month, transaction: a3,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: a3.product)))
        let view = try world.subscription(key) { $0.grants.count == 2 && $0.group()?.pendingProduct == nil }
        XCTAssertFalse(view.kinds.contains("cut"))
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month + 90 * day)])
        XCTAssertEqual(view.group()?.currentProduct, "vip.standard.3m")
    }

    func testS8UpgradeMidPeriodIsImmediateOldPurchaseCutAtTheSwitch() throws {
        let world = try running()
        let key = key("08")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]))
        try world.subscription(key) { $0.grants.count == 1 }
        let upgradeAt = t0 + 10 * day
        let premium = Tx.period("\(key)1", otid: key, product: "vip.premium.1m", start: upgradeAt)
        try world.notify(ScenarioBodies.v1("INTERACTIVE_RENEWAL", otid: key, [a, premium], autoRenewProduct: "vip.premium.1m"))
        try world.subscription(key) { $0.kinds.contains("cut") }
        // Apple's CANCEL for the upgraded purchase confirms it: evidence, no second deduction.
        try world.notify(ScenarioBodies.v1("CANCEL", otid: key, [a.cancelled(at: upgradeAt, upgraded: true), premium],
                                           autoRenewProduct: "vip.premium.1m"))
        let view = try world.subscription(key) { $0.kinds.contains("record") }
        XCTAssertEqual(view.kinds, ["grant", "grant", "cut", "renewal", "record"])
        let cut = view.ledger[2]
        XCTAssertEqual(cut.interval, interval(upgradeAt, t0 + month))
        XCTAssertEqual(cut.cutKind, "upgrade")
        XCTAssertEqual(cut.cause.notificationType, "INTERACTIVE_RENEWAL")
        XCTAssertEqual(cut.after, [interval(t0, upgradeAt + month)])
        XCTAssertTrue(view.ledger[4].reason.contains("already applied"), view.ledger[4].reason)
        XCTAssertEqual(view.group()?.intervals, [interval(t0, upgradeAt + month)])
        XCTAssertEqual(view.group()?.currentProduct, "vip.premium.1m")
    }

    func testS8V2UpgradeIsImmediate() throws {
        let world = try running()
        let key = key("88")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a))
        try world.subscription(key) { $0.grants.count == 1 }
        let upgradeAt = t0 + 10 * day
        let premium = Tx.period("\(key)1", otid: key, product: "vip.premium.1m", start: upgradeAt)
        try world.notify(world.signer.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", signedMs: upgradeAt, transaction: premium,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: premium.product)))
        let view = try world.subscription(key) { $0.kinds.contains("cut") }
        XCTAssertEqual(view.ledger.first { $0.kind == "cut" }?.cutKind, "upgrade")
        XCTAssertEqual(view.group()?.intervals, [interval(t0, upgradeAt + month)])
    }

    func testS9DowngradeTakesEffectAtTheNextRenewal() throws {
        let world = try running()
        let key = key("09")
        let premium = Tx.period("\(key)0", otid: key, product: "vip.premium.1m", start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [premium]))
        try world.subscription(key) { $0.grants.count == 1 }
        try world.notify(ScenarioBodies.v1("DID_CHANGE_RENEWAL_PREF", otid: key, [premium], autoRenewProduct: "vip.basic.1m",
                                           statusChangeMs: t0 + 3 * day))
        let pending = try world.subscription(key) { $0.kinds.contains("renewal") }
        XCTAssertEqual(pending.group()?.pendingChange, "downgrade")
        XCTAssertEqual(pending.group()?.intervals, [interval(t0, t0 + month)])
        let basic = Tx.period("\(key)1", otid: key, product: "vip.basic.1m", start: t0 + month)
        try world.notify(ScenarioBodies.v1("DID_RENEW", otid: key, [premium, basic], autoRenewProduct: "vip.basic.1m"))
        let view = try world.subscription(key) { $0.grants.count == 2 && $0.group()?.pendingProduct == nil }
        XCTAssertEqual(view.kinds, ["grant", "renewal", "grant", "renewal"])
        XCTAssertFalse(view.kinds.contains("cut"), "nothing is cut by a downgrade")
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + 2 * month)])
        XCTAssertEqual(view.group()?.currentProduct, "vip.basic.1m")
    }

    func testS9V2DowngradeIsPendingUntilTheRenewal() throws {
        let world = try running()
        let key = key("99")
        let premium = Tx.period("\(key)0", otid: key, product: "vip.premium.1m", start: t0)
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: premium,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: premium.product)))
        try world.subscription(key) { $0.grants.count == 1 }
        try world.notify(world.signer.notification("DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", signedMs: t0 + 3 * day,
                                                   transaction: premium,
                                                   renewal: ScenarioBodies.V2Signer.renewal(otid: key, product: premium.product,
                                                                                             renewsAs: "vip.basic.1m")))
        let view = try world.subscription(key) { $0.group()?.pendingProduct != nil }
        XCTAssertEqual(view.group()?.pendingProduct, "vip.basic.1m")
        XCTAssertEqual(view.group()?.pendingChange, "downgrade")
        XCTAssertFalse(view.kinds.contains("cut"))
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)])
    }

    // MARK: S10, R6 — users

    func testS10StorefrontChangeNewOriginalTransactionIdSameUser() throws {
        let world = try running()
        let user = "00000000-0000-4000-8000-\(Self.run)000010"
        let us = key("10"), jp = key("11"), v2 = key("12")
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: us, [Tx.period("\(us)0", otid: us, start: t0, token: user)]))
        try world.user(user) { $0.group()?.intervals.count == 1 }
        let later = t0 + month + 3 * day
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: jp, [Tx.period("\(jp)0", otid: jp, start: later, token: user)]))
        let view = try world.user(user) { $0.subscriptions.count == 2 && $0.group()?.intervals.count == 2 }
        XCTAssertEqual(view.subscriptions, [us, jp].map { ScenarioWorld.key($0) }.sorted())
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month), interval(later, later + month)])
        XCTAssertEqual(view.group()?.currentSubscriptionKey, ScenarioWorld.key(jp))
        // The same account in V2 (appAccountToken in the signed transaction).
        let third = t0 + 3 * month
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: third,
                                                   transaction: Tx.period("\(v2)0", otid: v2, start: third, token: user)))
        let all = try world.user(user) { $0.subscriptions.count == 3 }
        XCTAssertEqual(all.group()?.intervals.count, 3)
        let ledger = try world.userLedger(user)
        XCTAssertEqual(ledger.entries.filter { $0.kind == "link" }.count, 3)
        XCTAssertEqual(ledger.entries.filter { $0.kind == "grant" }.count, 3)
        // Newest first; the storefront grant shows the user's membership before and after, across subscriptions.
        let jpGrant = try XCTUnwrap(ledger.entries.first { $0.kind == "grant" && $0.subscriptionKey == ScenarioWorld.key(jp) })
        XCTAssertEqual(jpGrant.before, [interval(t0, t0 + month)])
        XCTAssertEqual(jpGrant.after, [interval(t0, t0 + month), interval(later, later + month)])
        XCTAssertEqual(ledger.entries.first?.subscriptionKey, ScenarioWorld.key(v2))
    }

    func testEventsOfAnUnlinkedSubscriptionAreAppliedWhenTheLinkArrives() throws {
        let world = try running()
        let key = key("20")
        let user = "late-\(key)"
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]))
        try world.subscription(key) { $0.grants.count == 1 }
        XCTAssertNil(try world.user(user), "no user yet")
        try world.upload(ScenarioBodies.receiptUpload(user: user, [a]))
        let view = try world.user(user) { $0.group() != nil }
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + month)])
        let ledger = try world.userLedger(user)
        XCTAssertEqual(ledger.entries.map(\.kind), ["link", "grant"], "newest first, the pre-link grant included")
        XCTAssertEqual(ledger.entries[0].before, [])
        XCTAssertEqual(ledger.entries[0].after, [interval(t0, t0 + month)])
    }

    func testR13ConsumableCreditedOnceRefundDebitsLifetimeIsOpenEnded() throws {
        let world = try running()
        let coins = key("30"), lifetime = key("31")
        let user = "buyer-\(coins)"
        let coinTx = Tx(id: coins, otid: coins, product: "coins.100", purchaseMs: t0)
        let lifetimeTx = Tx(id: lifetime, otid: lifetime, product: "lifetime", purchaseMs: t0)
        try world.upload(ScenarioBodies.receiptUpload(user: user, [coinTx, lifetimeTx]))
        let bought = try world.user(user) { $0.group("coins")?.balance == 100 && $0.group("lifetime") != nil }
        XCTAssertEqual(bought.group("lifetime")?.intervals, [interval(t0, nil)])
        XCTAssertEqual(bought.group("lifetime")?.openEnded, true)
        try world.upload(ScenarioBodies.receiptUpload(user: user, [coinTx]))   // uploaded again: credited once
        try world.waitSeen(coins, inputs: 2)
        try world.notify(ScenarioBodies.v1("REFUND", otid: coins, [coinTx.cancelled(at: t0 + day, reason: "0")], autoRenew: nil))
        let refunded = try world.user(user) { $0.group("coins")?.balance == 0 }
        XCTAssertEqual(refunded.group("coins")?.balance, 0)
        let entries = try XCTUnwrap(try world.subscription(coins)).ledger
        XCTAssertEqual(entries.map(\.kind), ["link", "credit", "debit"])
        XCTAssertEqual(entries.map(\.amount), [nil, 100, 100])
    }

    // MARK: S13, S15

    func testS13SandboxReceiptSentToProductionIsRetriedOnSandbox() throws {
        let world = try running()
        let key = key("13")
        let before = world.stub.answered
        try world.upload(ScenarioBodies.receiptUpload(user: "sandbox-\(key)", [Tx.period("\(key)0", otid: key, start: t0)]))
        let view = try world.subscription(key) { $0.grants.count == 1 }
        XCTAssertEqual(view.userId, "sandbox-\(key)")
        XCTAssertEqual(view.grants[0].cause.source, .verifyReceipt)
        let after = world.stub.answered
        XCTAssertEqual((after["/production/verifyReceipt 21007"] ?? 0) - (before["/production/verifyReceipt 21007"] ?? 0), 1,
                       "production first, answered 21007")
        XCTAssertEqual((after["/sandbox/verifyReceipt 0"] ?? 0) - (before["/sandbox/verifyReceipt 0"] ?? 0), 1, "then sandbox")
    }

    func testS15RefundBeforeThePurchaseIsSeenConvergesToTheInOrderState() throws {
        let world = try running()
        let reversed = key("15"), inOrder = key("16")
        func bodies(_ key: String) throws -> (buy: [String: Any], refund: [String: Any]) {
            let a = Tx.period("\(key)0", otid: key, start: t0)
            return (try ScenarioBodies.v1("INITIAL_BUY", otid: key, [a]),
                    try ScenarioBodies.v1("CANCEL", otid: key, [a.cancelled(at: t0 + 7 * day, reason: "1")], autoRenew: false,
                                          statusChangeMs: t0 + 7 * day))
        }
        let late = try bodies(reversed), normal = try bodies(inOrder)
        try world.notify(late.refund)
        try world.subscription(reversed) { !$0.grants.isEmpty }
        try world.notify(late.buy)
        try world.notify(normal.buy)
        try world.subscription(inOrder) { !$0.grants.isEmpty }
        try world.notify(normal.refund)
        try world.waitSeen(reversed, inputs: 2)
        try world.waitSeen(inOrder, inputs: 2)
        let lateView = try world.subscription(reversed) { _ in true }
        let normalView = try world.subscription(inOrder) { $0.kinds.contains("cut") }
        XCTAssertEqual(lateView.kinds, ["grant"], "granted only up to the refund, nothing to correct later")
        XCTAssertEqual(normalView.kinds, ["grant", "cut", "renewal"])
        XCTAssertEqual(lateView.group()?.intervals, [interval(t0, t0 + 7 * day)])
        XCTAssertEqual(lateView.group()?.intervals, normalView.group()?.intervals)
        // The ledgers differ as histories but fold to the same grants.
        let db = try world.cluster.database()
        defer { db.close() }
        let folded = { (otid: String) throws -> [Interval] in
            let key = ScenarioWorld.key(otid)
            return LedgerProjection(entries: try ScenarioDatabase.ledger(db, where: "subscription_key = \(key)"))
                .subscriptions[key]?.purchases.values.flatMap(\.intervals) ?? []
        }
        XCTAssertEqual(try folded(reversed), try folded(inOrder))
    }

    func testS15V2RefundBeforeSubscribed() throws {
        let world = try running()
        let key = key("17")
        let a = Tx.period("\(key)0", otid: key, start: t0)
        try world.notify(world.signer.notification("REFUND", signedMs: t0 + 7 * day, transaction: a.cancelled(at: t0 + 7 * day, reason: "0")))
        try world.subscription(key) { !$0.grants.isEmpty }
        try world.notify(world.signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", signedMs: t0, transaction: a))
        try world.waitSeen(key, inputs: 2)
        let view = try world.subscription(key) { _ in true }
        XCTAssertEqual(view.kinds, ["grant"])
        XCTAssertEqual(view.group()?.intervals, [interval(t0, t0 + 7 * day)])
    }
}
