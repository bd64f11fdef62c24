@testable import Domain
import XCTest

/// R4, R5, R11, R13 and the scenarios S3–S9, S15 as transcripts: what each event grants or cuts,
/// with before/after and cause on every ledger entry.
final class MembershipTests: XCTestCase {
    let switchAt = t0 + day

    func testS3CrossgradeRightAfterBuyingEndsOnePeriodAfterTheSwitchNeverTwo() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s3", [Apple.period("A", otid: "s3", start: t0)]))
        var a = Apple.period("A", otid: "s3", start: t0)
        a.cancellationDateMs = switchAt
        a.isUpgraded = true
        let b = Apple.period("B", otid: "s3", product: "vip.b.1m", start: switchAt)
        let cancel = t.feed(Apple.v1("CANCEL", otid: "s3", [a, b], autoRenew: true, autoRenewProduct: "vip.b.1m"))
        XCTAssertEqual(cancel.entries.kinds, [.cut, .grant, .renewal])
        XCTAssertTrue(cancel.entries[2].reason.contains("renews as vip.b.1m"), cancel.entries[2].reason)
        let cut = cancel.entries[0]
        XCTAssertEqual(cut.interval, interval(switchAt, t0 + month))
        XCTAssertEqual(cut.before, [interval(t0, t0 + month)])
        XCTAssertEqual(cut.after, [interval(t0, switchAt)])
        XCTAssertEqual(cut.cutKind, .crossgrade)
        XCTAssertEqual(cut.cause.notificationType, "CANCEL")
        XCTAssertEqual(cut.cause.transactionId, "A")
        XCTAssertEqual(cancel.entries[1].after, [interval(t0, switchAt + month)])
        XCTAssertEqual(t.entitlement("s3"), [interval(t0, switchAt + month)], "one period after the switch")
        // Apple's INTERACTIVE_RENEWAL for B adds nothing.
        XCTAssertTrue(t.feed(Apple.v1("INTERACTIVE_RENEWAL", otid: "s3", [a, b], autoRenewProduct: "vip.b.1m")).entries.isEmpty)
    }

    func testS3WhenTheNewPurchaseArrivesFirstTheOldOneIsCutAsSuperseded() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s3", [Apple.period("A", otid: "s3", start: t0)]))
        let b = Apple.period("B", otid: "s3", product: "vip.b.1m", start: switchAt)
        let step = t.feed(Apple.v1("INTERACTIVE_RENEWAL", otid: "s3", [Apple.period("A", otid: "s3", start: t0), b],
                                   autoRenewProduct: "vip.b.1m"))
        XCTAssertEqual(step.entries.kinds, [.grant, .cut, .renewal])
        XCTAssertEqual(step.entries[1].interval, interval(switchAt, t0 + month))
        XCTAssertEqual(step.entries[1].cutKind, .crossgrade)
        XCTAssertTrue(step.entries[1].reason.contains("superseded by vip.b.1m"), step.entries[1].reason)
        // Apple's CANCEL for A then confirms what was already applied: recorded as evidence, nothing deducted twice.
        var a = Apple.period("A", otid: "s3", start: t0)
        a.cancellationDateMs = switchAt
        a.isUpgraded = true
        let confirm = t.feed(Apple.v1("CANCEL", otid: "s3", [a, b], autoRenewProduct: "vip.b.1m"))
        XCTAssertEqual(confirm.entries.kinds, [.record])
        XCTAssertTrue(confirm.entries[0].reason.contains("already applied"), confirm.entries[0].reason)
        XCTAssertNil(confirm.entries[0].interval, "a confirmation marks nothing of its own on support's timeline")
        XCTAssertEqual(t.entitlement("s3"), [interval(t0, switchAt + month)])
    }

    func testS4CancelAndSwitchDeductsLikeS3AndTurnsRenewalOff() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s4", [Apple.period("A", otid: "s4", start: t0)]))
        var a = Apple.period("A", otid: "s4", start: t0)
        a.cancellationDateMs = switchAt
        a.isUpgraded = true
        let b = Apple.period("B", otid: "s4", product: "vip.b.1m", start: switchAt)
        let step = t.feed(Apple.v1("CANCEL", otid: "s4", [a, b], autoRenew: false, autoRenewProduct: "vip.b.1m"))
        XCTAssertEqual(step.entries.kinds, [.cut, .grant, .renewal])
        XCTAssertEqual(step.entries[0].cutKind, .cancelAndSwitch)
        XCTAssertEqual(t.entitlement("s4"), [interval(t0, switchAt + month)])
        XCTAssertEqual(groupMemberships(of: [t.state("s4")]).first?.autoRenewStatus, false)
    }

    func testS5RefundMidPeriodCutsAtTheCancellationWithEvidence() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s5", [Apple.period("A", otid: "s5", start: t0)]))
        var a = Apple.period("A", otid: "s5", start: t0)
        a.cancellationDateMs = t0 + 10 * day
        a.cancellationReason = "0"
        let step = t.feed(Apple.v1("CANCEL", otid: "s5", [a], autoRenew: false))
        XCTAssertEqual(step.entries.kinds, [.cut, .renewal])
        let cut = step.entries[0]
        XCTAssertEqual(cut.interval, interval(t0 + 10 * day, t0 + month))
        XCTAssertEqual(cut.before, [interval(t0, t0 + month)])
        XCTAssertEqual(cut.after, [interval(t0, t0 + 10 * day)])
        XCTAssertEqual(cut.cutKind, .refund)
        XCTAssertEqual(cut.cause.source, .notificationV1)
        XCTAssertEqual(cut.cause.notificationType, "CANCEL")
        XCTAssertEqual(cut.cause.transactionId, "A")
        XCTAssertTrue(cut.reason.contains("refund by Apple support"), cut.reason)
        XCTAssertTrue(cut.reason.contains("2020-07-07T00:02:39Z"), cut.reason)
    }

    func testS6R11RefundAfterThePeriodEndedIsRecordedNothingDeducted() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s6", [Apple.period("A", otid: "s6", start: t0)]))
        t.feed(Apple.v1("DID_RENEW", otid: "s6", [Apple.period("A", otid: "s6", start: t0),
                                                  Apple.period("A2", otid: "s6", start: t0 + month)]))
        var a = Apple.period("A", otid: "s6", start: t0)
        a.cancellationDateMs = t0 + month + 5 * day
        a.cancellationReason = "0"
        let step = t.feed(Apple.v1("CANCEL", otid: "s6", [a]))
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertEqual(step.entries[0].before, step.entries[0].after)
        XCTAssertEqual(step.entries[0].cutKind, .refund)
        XCTAssertEqual(step.entries[0].interval, interval(t0 + month + 5 * day, t0 + month + 5 * day),
                       "the cancellation's instant, an empty interval, so support can place the evidence")
        XCTAssertTrue(step.entries[0].reason.contains("nothing deducted (R11)"), step.entries[0].reason)
        XCTAssertEqual(t.entitlement("s6"), [interval(t0, t0 + 2 * month)])
        // Delivered again: no second record.
        XCTAssertTrue(t.feed(Apple.v1("CANCEL", otid: "s6", [a], id: "again")).entries.filter { $0.kind == .record }.isEmpty)
    }

    /// S6 with S15: the refund arrives before the purchase was seen; the grant and the R11 evidence
    /// are written as in order.
    func testS6RefundAfterThePeriodArrivingFirstIsRecordedToo() {
        var t = Transcript()
        var a = Apple.period("A", otid: "s6f", start: t0)
        a.cancellationDateMs = t0 + month + 5 * day
        a.cancellationReason = "0"
        let step = t.feed(Apple.v1("CANCEL", otid: "s6f", [a]))
        XCTAssertEqual(step.entries.filter { $0.kind != .renewal }.kinds, [.grant, .record])
        XCTAssertTrue(step.entries[1].reason.contains("nothing deducted (R11)"), step.entries[1].reason)
        XCTAssertEqual(t.entitlement("s6f"), [interval(t0, t0 + month)])
        XCTAssertTrue(t.feed(Apple.v1("CANCEL", otid: "s6f", [a], id: "retry")).entries.filter { $0.kind == .record }.isEmpty)
    }

    /// R3 c with R5: a downgrade waiting for the renewal cancels nothing, so a cancellation without a
    /// reason while one is pending is a refund, not a switch.
    func testARefundWhileADowngradeIsPendingIsARefund() {
        var t = Transcript()
        let a = Apple.period("P", otid: "dn", product: "vip.premium.1m", start: t0)
        t.feed(Apple.v1("INITIAL_BUY", otid: "dn", [a]))
        t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "dn", [a], autoRenewProduct: "vip.basic.1m", statusChange: t0 + 2 * day))
        var refunded = a
        refunded.cancellationDateMs = t0 + 5 * day
        let step = t.feed(Apple.v1("CANCEL", otid: "dn", [refunded], autoRenew: false, autoRenewProduct: "vip.basic.1m"))
        let cut = step.entries.first { $0.kind == .cut }
        XCTAssertEqual(cut?.cutKind, .refund, cut?.reason ?? "no cut")
        XCTAssertEqual(t.entitlement("dn"), [interval(t0, t0 + 5 * day)])
    }

    func testS7CrossgradeToAnotherDurationWaitsForTheRenewal() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s7", [Apple.period("A1", otid: "s7", start: t0)]))
        t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s7", [Apple.period("A1", otid: "s7", start: t0)],
                        autoRenewProduct: "vip.a.3m", statusChange: t0 + 5 * day))
        XCTAssertEqual(t.entitlement("s7"), [interval(t0, t0 + month)])
        XCTAssertEqual(groupMemberships(of: [t.state("s7")]).first?.pendingProduct, "vip.a.3m")
        let renew = t.feed(Apple.v1("DID_RENEW", otid: "s7", [Apple.period("A1", otid: "s7", start: t0),
                                                              Apple.period("A3", otid: "s7", product: "vip.a.3m",
                                                                           start: t0 + month, length: 90 * day)],
                                    autoRenewProduct: "vip.a.3m"))
        XCTAssertEqual(renew.entries.kinds, [.grant, .renewal])
        XCTAssertEqual(t.entitlement("s7"), [interval(t0, t0 + month + 90 * day)])
        let view = groupMemberships(of: [t.state("s7")]).first
        XCTAssertEqual(view?.currentProduct, "vip.a.3m")
        XCTAssertNil(view?.pendingProduct)
    }

    func testS8UpgradeMidPeriodIsImmediateAndCutsTheOldPurchaseAtTheSwitch() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s8", [Apple.period("A", otid: "s8", start: t0)]))
        let upgradeAt = t0 + 10 * day
        var a = Apple.period("A", otid: "s8", start: t0)
        a.cancellationDateMs = upgradeAt
        a.isUpgraded = true
        let p = Apple.period("P", otid: "s8", product: "vip.premium.1m", start: upgradeAt)
        let step = t.feed(Apple.v1("CANCEL", otid: "s8", [a, p], autoRenewProduct: "vip.premium.1m"))
        XCTAssertEqual(step.entries.kinds, [.cut, .grant, .renewal])
        XCTAssertEqual(step.entries[0].cutKind, .upgrade)
        XCTAssertEqual(step.entries[0].interval, interval(upgradeAt, t0 + month))
        XCTAssertEqual(t.entitlement("s8"), [interval(t0, upgradeAt + month)])
        XCTAssertEqual(groupMemberships(of: [t.state("s8")]).first?.currentProduct, "vip.premium.1m")
    }

    func testS9DowngradeTakesEffectAtTheNextRenewal() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s9", [Apple.period("P", otid: "s9", product: "vip.premium.1m", start: t0)]))
        let pref = t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s9",
                                   [Apple.period("P", otid: "s9", product: "vip.premium.1m", start: t0)],
                                   autoRenewProduct: "vip.basic.1m", statusChange: t0 + 3 * day))
        XCTAssertEqual(pref.entries.kinds, [.renewal])
        XCTAssertEqual(t.entitlement("s9"), [interval(t0, t0 + month)])
        t.feed(Apple.v1("DID_RENEW", otid: "s9", [Apple.period("P", otid: "s9", product: "vip.premium.1m", start: t0),
                                                  Apple.period("B", otid: "s9", product: "vip.basic.1m", start: t0 + month)],
                        autoRenewProduct: "vip.basic.1m"))
        XCTAssertEqual(t.entitlement("s9"), [interval(t0, t0 + 2 * month)])
        XCTAssertFalse(t.ledger.contains { $0.kind == .cut }, "nothing is cut by a downgrade")
    }

    /// R14 with V1 only: a preference change in a later period is dated by the renewal it lists (V1
    /// gives it no date of its own), and is newer news than that renewal in either arrival order.
    func testS9DowngradeChosenAfterARenewalIsPendingWhateverTheOrder() {
        let premium = Apple.period("P", otid: "s9b", product: "vip.premium.1m", start: t0)
        let renewed = Apple.period("R", otid: "s9b", product: "vip.premium.1m", start: t0 + month)
        let buy = Apple.v1("INITIAL_BUY", otid: "s9b", [premium])
        let renew = Apple.v1("DID_RENEW", otid: "s9b", [premium, renewed])
        let pref = Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s9b", [premium, renewed], autoRenewProduct: "vip.basic.1m")
        for order in [[buy, renew, pref], [buy, pref, renew]] {
            var t = Transcript()
            for event in order { t.feed(event) }
            XCTAssertEqual(t.state("s9b").renewal?.autoRenewProductId, "vip.basic.1m", "order \(order.map { $0.notification?.type ?? "" })")
            XCTAssertEqual(t.state("s9b").renewal?.pendingChange, "downgrade")
            XCTAssertEqual(t.entitlement("s9b"), [interval(t0, t0 + 2 * month)])
        }
    }

    /// A pending change needs a renewal: once auto-renew is off the view names none.
    func testNoPendingChangeOnceAutoRenewIsOff() {
        var t = Transcript()
        let premium = Apple.period("P", otid: "s9c", product: "vip.premium.1m", start: t0)
        t.feed(Apple.v1("INITIAL_BUY", otid: "s9c", [premium]))
        t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s9c", [premium], autoRenewProduct: "vip.basic.1m", statusChange: t0 + day))
        XCTAssertEqual(groupMemberships(of: [t.state("s9c")]).first?.pendingProduct, "vip.basic.1m")
        t.feed(Apple.v1("DID_CHANGE_RENEWAL_STATUS", otid: "s9c", [premium], autoRenew: false, autoRenewProduct: "vip.basic.1m",
                        statusChange: t0 + 2 * day))
        let view = groupMemberships(of: [t.state("s9c")]).first
        XCTAssertEqual(view?.autoRenewStatus, false)
        XCTAssertNil(view?.pendingProduct)
        XCTAssertNil(view?.pendingChange)
    }

    func testS15RefundBeforeThePurchaseIsSeenConvergesToTheInOrderState() {
        var refunded = Apple.period("A", otid: "s15", start: t0)
        refunded.cancellationDateMs = t0 + 7 * day
        refunded.cancellationReason = "1"
        let buy = Apple.v1("INITIAL_BUY", otid: "s15", [Apple.period("A", otid: "s15", start: t0)])
        let refund = Apple.v1("CANCEL", otid: "s15", [refunded], autoRenew: false, statusChange: t0 + 7 * day)
        var inOrder = Transcript()
        inOrder.feed(buy)
        inOrder.feed(refund)
        var reversed = Transcript()
        let first = reversed.feed(refund)
        XCTAssertEqual(first.entries.kinds, [.grant], "granted only up to the refund")
        XCTAssertTrue(reversed.feed(buy).entries.isEmpty, "the late purchase notification adds nothing")
        XCTAssertEqual(inOrder.state("s15"), reversed.state("s15"))
        XCTAssertEqual(LedgerProjection(entries: inOrder.ledger), LedgerProjection(entries: reversed.ledger))
        XCTAssertEqual(reversed.entitlement("s15"), [interval(t0, t0 + 7 * day)])
    }

    func testReplayWritesNothingAndACorrectedReplayWritesOnlyTheDifference() {
        var t = Transcript()
        let event = Apple.v1("INITIAL_BUY", otid: "r", [Apple.tx("N", otid: "r", product: "pass.7d", purchase: t0)])
        let step = t.feed(event)
        XCTAssertEqual(step.entries.first?.interval, interval(t0, t0 + 7 * day))
        // The same commands again (a replay of the commands topic): nothing.
        for command in step.commands { XCTAssertTrue(t.book.apply(command).isEmpty) }
        // A catalog fix (the pass lasts 30 days) and a replay of classify: one compensating entry.
        var fixed = TestCatalog.standard
        fixed.products[fixed.products.firstIndex { $0.id == "pass.7d" }!].durationDays = 30
        let corrected = classify(try! XCTUnwrap(step.unique), catalog: fixed).flatMap { t.book.apply($0) }
        XCTAssertEqual(corrected.kinds, [.extend])
        XCTAssertEqual(corrected.first?.interval, interval(t0 + 7 * day, t0 + 30 * day))
        // And fixing it back shortens it again: history is never edited, the difference is appended.
        let back = classify(step.unique!, catalog: TestCatalog.standard).flatMap { t.book.apply($0) }
        XCTAssertEqual(back.kinds, [.cut])
        XCTAssertEqual(back.first?.interval, interval(t0 + 7 * day, t0 + 30 * day))
    }

    func testR13ConsumablesAreCreditedOncePerTransactionAndARefundDebits() {
        var t = Transcript()
        let coins = Apple.tx("C1", otid: "C1", product: "coins.100", purchase: t0, quantity: 2)
        let credit = t.feed(Apple.receipt(user: "u1", otid: "C1", [coins], id: "c1"))
        XCTAssertEqual(credit.entries.kinds, [.link, .credit])
        XCTAssertEqual(credit.entries[1].amount, 200)
        XCTAssertEqual(credit.entries[1].balanceAfter, 200)
        XCTAssertTrue(t.feed(Apple.receipt(user: "u1", otid: "C1", [coins], id: "c1-again")).entries.isEmpty)
        var refunded = coins
        refunded.cancellationDateMs = t0 + day
        let debit = t.feed(Apple.v1("REFUND", otid: "C1", [refunded], autoRenew: nil))
        XCTAssertEqual(debit.entries.kinds, [.debit])
        XCTAssertEqual(debit.entries[0].amount, 200)
        XCTAssertEqual(debit.entries[0].balanceAfter, 0)
        XCTAssertEqual(t.user("u1").first { $0.group == "coins" }?.balance, 0)
    }

    /// S15 for consumables: the refund is the first copy seen. Nothing is credited, and the ledger
    /// says why rather than claiming a cancellation "already applied".
    func testR13ConsumableFirstSeenRefundedCreditsNothingAndSaysSo() {
        var t = Transcript()
        var refunded = Apple.tx("C2", otid: "C2", product: "coins.100", purchase: t0)
        refunded.cancellationDateMs = t0 + day
        let step = t.feed(Apple.v1("REFUND", otid: "C2", [refunded], autoRenew: nil))
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertTrue(step.entries[0].reason.contains("arrived already cancelled at 2020-06-28T00:02:39Z: nothing credited"),
                      step.entries[0].reason)
        XCTAssertTrue(t.feed(Apple.receipt(user: nil, otid: "C2", [Apple.tx("C2", otid: "C2", product: "coins.100", purchase: t0)],
                                           id: "c2")).entries.isEmpty, "the older copy without the refund credits nothing")
    }

    func testR13NonConsumableIsOpenEndedRestorableAndCutByARefund() {
        var t = Transcript()
        let lifetime = Apple.tx("L", otid: "L", product: "lifetime", purchase: t0)
        XCTAssertEqual(t.feed(Apple.receipt(user: nil, otid: "L", [lifetime], id: "l")).entries.first?.interval, interval(t0, nil))
        let restore = Apple.tx("L2", otid: "L", product: "lifetime", purchase: t0)
        XCTAssertTrue(t.feed(Apple.receipt(user: nil, otid: "L", [restore], id: "l2")).entries.isEmpty)
        var refunded = lifetime
        refunded.cancellationDateMs = t0 + 40 * day
        let cut = t.feed(Apple.v1("REFUND", otid: "L", [refunded], autoRenew: nil))
        XCTAssertEqual(cut.entries.kinds, [.cut])
        XCTAssertEqual(cut.entries[0].interval, interval(t0 + 40 * day, nil))
        XCTAssertEqual(t.entitlement("L", "lifetime"), [interval(t0, t0 + 40 * day)])
    }

    /// A restored non-consumable may carry the restore's own charge date as its purchase date; its
    /// original purchase date is the purchase's. It is the same purchase in either order, and a refund
    /// of it takes the entitlement back.
    func testR13NonConsumableRestoredWithTheRestoreDateIsTheSamePurchase() {
        let lifetime = Apple.tx("L", otid: "L", product: "lifetime", purchase: t0)
        var restore = Apple.tx("L2", otid: "L", product: "lifetime", purchase: t0 + 100 * day)
        restore.originalPurchaseDateMs = t0
        var refunded = lifetime
        refunded.cancellationDateMs = t0 + 120 * day
        for order in [[lifetime, restore], [restore, lifetime]] {
            var t = Transcript()
            for (index, copy) in order.enumerated() { t.feed(Apple.receipt(user: nil, otid: "L", [copy], id: "l\(index)")) }
            XCTAssertEqual(Set(t.ledger.filter { $0.kind == .grant }.compactMap(\.purchaseId)).count, 1, "one purchase")
            XCTAssertEqual(t.entitlement("L", "lifetime"), [interval(t0, nil)])
            t.feed(Apple.v1("REFUND", otid: "L", [refunded], autoRenew: nil))
            XCTAssertEqual(t.entitlement("L", "lifetime"), [interval(t0, t0 + 120 * day)], "the refund takes it back")
        }
    }

    func testR13NonRenewingGrantsTheCatalogDuration() {
        var t = Transcript()
        let step = t.feed(Apple.receipt(user: nil, otid: "N", [Apple.tx("N", otid: "N", product: "pass.7d", purchase: t0 + 500)], id: "n"))
        XCTAssertEqual(step.entries.first?.interval, interval(t0, t0 + 7 * day))
        XCTAssertEqual(step.entries.first?.group, "pass")
    }

    func testR4EveryEntryCarriesBeforeAfterReasonAndCause() {
        var t = Transcript()
        for event in ScenarioSet.events(prefix: "r4") { t.feed(event) }
        XCTAssertGreaterThan(t.ledger.count, 20)
        for entry in t.ledger {
            XCTAssertFalse(entry.reason.isEmpty)
            XCTAssertFalse(entry.commandId.isEmpty)
            XCTAssertFalse(entry.cause.eventId.isEmpty)
            if entry.kind == .grant || entry.kind == .cut || entry.kind == .extend {
                XCTAssertNotNil(entry.interval)
                XCTAssertNotNil(entry.purchaseId)
            }
            if entry.kind == .grant, let granted = entry.interval {
                XCTAssertTrue(entry.after.contains { $0.startMs <= granted.startMs && $0.endOrMax >= granted.endOrMax },
                              "after \(entry.after) holds the grant \(granted)")
            }
        }
    }
}
