@testable import Domain
import XCTest

/// R3 (the three V1 CANCEL variants and their V2 counterparts), R5 (renewal preference changes),
/// the renewal-status, billing and informational types — each decided from the facts and explained.
final class ClassifyTests: XCTestCase {
    let switchAt = t0 + 2 * day

    /// The old purchase A cancelled at the switch, and (when `withReplacement`) B bought at that instant.
    func cancelEvent(autoRenew: Bool, upgraded: Bool? = true, reason: String? = nil, to product: String = "vip.b.1m",
                     withReplacement: Bool = true) -> AppleEvent {
        var a = Apple.period("A", otid: "s", start: t0)
        a.cancellationDateMs = switchAt
        a.cancellationReason = reason
        a.isUpgraded = upgraded
        let b = Apple.period("B", otid: "s", product: product, start: switchAt)
        return Apple.v1("CANCEL", otid: "s", withReplacement ? [a, b] : [a], autoRenew: autoRenew,
                        autoRenewProduct: withReplacement ? product : nil)
    }

    func cut(of event: AppleEvent, catalog: Catalog = TestCatalog.standard) -> (Cut?, String)? {
        let unique = UniqueEvent(event: event, purchases: dedupe(event: event, known: []).changes)
        for command in classify(unique, catalog: catalog) {
            if case .purchase(let grant) = command.action, grant.productId == event.transactions[0].productId,
               grant.transactionId == "A" {
                return (grant.cut, command.reason)
            }
        }
        return nil
    }

    func testR3aAutoRenewTrueWithSwitchMarkersIsACrossgradeCutAtTheSwitch() throws {
        let (cut, reason) = try XCTUnwrap(cut(of: cancelEvent(autoRenew: true)))
        XCTAssertEqual(cut, Cut(atMs: switchAt, kind: .crossgrade))
        XCTAssertTrue(reason.contains("R3 a"), reason)
        XCTAssertTrue(reason.contains("is_upgraded"), reason)
    }

    func testR3aSwitchToAHigherLevelIsAnUpgrade() throws {
        let (cut, _) = try XCTUnwrap(cut(of: cancelEvent(autoRenew: true, to: "vip.premium.1m")))
        XCTAssertEqual(cut?.kind, .upgrade)
    }

    func testR3bAutoRenewFalseWithSwitchMarkersIsCancelAndSwitch() throws {
        let (cut, reason) = try XCTUnwrap(cut(of: cancelEvent(autoRenew: false)))
        XCTAssertEqual(cut, Cut(atMs: switchAt, kind: .cancelAndSwitch))
        XCTAssertTrue(reason.contains("R3 b"), reason)
    }

    func testR3cCancellationWithReasonAndNoSwitchIsARefund() throws {
        let (cut, reason) = try XCTUnwrap(cut(of: cancelEvent(autoRenew: true, upgraded: nil, reason: "1", withReplacement: false)))
        XCTAssertEqual(cut, Cut(atMs: switchAt, kind: .refund, appleReason: "1"))
        XCTAssertTrue(reason.contains("an issue in the app"), reason)
        XCTAssertTrue(reason.contains("R3 c"), reason)
    }

    func testR3AmbiguousTypeNameIsDecidedFromTheTransactions() throws {
        // A V1 "REFUND" whose transaction says it was upgraded is a switch, not a refund.
        var event = cancelEvent(autoRenew: true)
        event.notification?.type = "REFUND"
        XCTAssertEqual(try XCTUnwrap(cut(of: event)).0?.kind, .crossgrade)
        // A CANCEL without any switch marker and without a reason: Apple's current meaning, a refund.
        XCTAssertEqual(try XCTUnwrap(cut(of: cancelEvent(autoRenew: true, upgraded: nil, withReplacement: false))).0?.kind, .refund)
        // The only marker is auto_renew_product_id naming another product, and there is no cancellation_reason: a switch.
        var pending = cancelEvent(autoRenew: true, upgraded: nil, withReplacement: false)
        pending.renewalInfo?.autoRenewProductId = "vip.premium.1m"
        XCTAssertEqual(try XCTUnwrap(cut(of: pending)).0?.kind, .upgrade)
    }

    func testV2RefundAndRevoke() throws {
        var refunded = Apple.period("A", otid: "s", start: t0)
        refunded.cancellationDateMs = switchAt
        refunded.cancellationReason = "0"
        refunded.revocationType = "REFUND_PRORATED"
        let refund = try XCTUnwrap(cut(of: Apple.v2("REFUND", uuid: "1", otid: "s", [refunded], signed: switchAt)))
        XCTAssertEqual(refund.0?.kind, .refund)
        XCTAssertTrue(refund.1.contains("prorated refund"), refund.1)
        var revoked = refunded
        revoked.revocationType = "FAMILY_REVOKE"
        XCTAssertEqual(try XCTUnwrap(cut(of: Apple.v2("REVOKE", uuid: "2", otid: "s", [revoked], signed: switchAt))).0?.kind, .revoke)
    }

    /// A receipt's cancellation date on a family member's copy ("refunded a transaction or revoked it
    /// from family sharing") is a revocation: the member paid nothing and is refunded nothing. The
    /// organizer's switch still reads as one, and the organizer's own copy as a refund.
    func testAFamilySharedCancellationIsARevocationNotARefund() throws {
        func family(_ event: AppleEvent) -> AppleEvent {
            var event = event
            event.transactions = event.transactions.map { var t = $0; t.inAppOwnershipType = "FAMILY_SHARED"; return t }
            return event
        }
        let plain = cancelEvent(autoRenew: true, upgraded: nil, reason: "0", withReplacement: false)
        let (revoked, reason) = try XCTUnwrap(cut(of: family(plain)))
        XCTAssertEqual(revoked, Cut(atMs: switchAt, kind: .revoke, appleReason: "0"))
        XCTAssertTrue(reason.contains("family member"), reason)
        XCTAssertEqual(try XCTUnwrap(cut(of: plain)).0?.kind, .refund, "the organizer's own copy is refunded")

        var refundType = family(plain)
        refundType.notification?.type = "REFUND"
        XCTAssertEqual(try XCTUnwrap(cut(of: refundType)).0?.kind, .revoke, "a V1 REFUND about a member's copy")
        let receipt = family(Apple.receipt(user: "u-1", otid: "s", plain.transactions, id: "r-1"))
        XCTAssertEqual(try XCTUnwrap(cut(of: receipt)).0?.kind, .revoke, "an uploaded receipt shows it the same way")

        XCTAssertEqual(try XCTUnwrap(cut(of: family(cancelEvent(autoRenew: true)))).0?.kind, .crossgrade,
                       "the organizer's switch reaches the member's copy as the switch it is")
    }

    func testR5RenewalPreferenceChangesArePendingUntilTheNextRenewal() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let downgrade = t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s", [Apple.period("A", otid: "s", start: t0)],
                                        autoRenewProduct: "vip.basic.1m", statusChange: t0 + day))
        XCTAssertEqual(downgrade.entries.kinds, [.renewal])
        XCTAssertEqual(t.state("s").renewal?.pendingChange, "downgrade")
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + month)], "a downgrade changes nothing now")
        let view = groupMemberships(of: [t.state("s")]).first
        XCTAssertEqual(view?.pendingProduct, "vip.basic.1m")
        XCTAssertEqual(view?.pendingChange, "downgrade")

        t.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s", [Apple.period("A", otid: "s", start: t0)],
                        autoRenewProduct: "vip.a.3m", statusChange: t0 + 2 * day))
        XCTAssertEqual(t.state("s").renewal?.pendingChange, "crossgrade-at-renewal")
        XCTAssertEqual(TestCatalog.standard.relation(from: "vip.a.1m", to: "vip.b.1m"), .crossgrade)
        XCTAssertEqual(TestCatalog.standard.relation(from: "vip.a.1m", to: "vip.premium.1m"), .upgrade)
        XCTAssertEqual(TestCatalog.standard.relation(from: "vip.a.1m", to: "unknown.product"), .unknown)
    }

    func testDidChangeRenewalStatusRecordsAutoRenewOffWithoutTouchingIntervals() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let off = t.feed(Apple.v1("DID_CHANGE_RENEWAL_STATUS", otid: "s", [Apple.period("A", otid: "s", start: t0)],
                                  autoRenew: false, statusChange: t0 + 3 * day))
        XCTAssertEqual(off.entries.kinds, [.renewal])
        XCTAssertTrue(off.entries[0].reason.contains("auto-renew off"), off.entries[0].reason)
        XCTAssertEqual(off.entries[0].before, off.entries[0].after)
        // Older news (the INITIAL_BUY body delivered again with other bytes) never turns it back on (S15).
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "late-copy"))
        XCTAssertEqual(t.state("s").renewal?.autoRenewStatus, false)
    }

    func testDidFailToRenewWithGracePeriodKeepsServingUntilGraceEnds() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let graceEnd = t0 + month + 6 * day
        let failed = t.feed(Apple.v1("DID_FAIL_TO_RENEW", otid: "s", [Apple.period("A", otid: "s", start: t0)],
                                     renewal: RenewalFacts(originalTransactionId: "s", productId: "vip.a.1m",
                                                           autoRenewProductId: "vip.a.1m", autoRenewStatus: true,
                                                           isInBillingRetryPeriod: true, gracePeriodExpiresDateMs: graceEnd)))
        XCTAssertEqual(failed.entries.kinds, [.renewal, .grant])
        XCTAssertEqual(failed.entries[1].interval, interval(t0 + month, graceEnd))
        XCTAssertEqual(t.entitlement("s"), [interval(t0, graceEnd)])
        // DID_RECOVER inside the grace period: the new period starts at the old expiry, no gap, no double.
        let recovered = t.feed(Apple.v1("DID_RECOVER", otid: "s", [Apple.period("A", otid: "s", start: t0),
                                                                   Apple.period("A2", otid: "s", start: t0 + month)]))
        XCTAssertEqual(recovered.entries.kinds, [.grant, .renewal])
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + 2 * month)])
        XCTAssertEqual(t.state("s").renewal?.isInBillingRetry, false)
    }

    func testDidFailToRenewWithoutGraceIsBillingRetryOnly() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let event = Apple.v1("DID_FAIL_TO_RENEW", otid: "s", [Apple.period("A", otid: "s", start: t0)], renewal:
                                RenewalFacts(originalTransactionId: "s", productId: "vip.a.1m", autoRenewStatus: true))
        let failed = t.feed(event)
        XCTAssertEqual(failed.entries.kinds, [.renewal])
        XCTAssertEqual(t.state("s").renewal?.isInBillingRetry, true, "V1 says it by the type when pending_renewal_info is silent")
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + month)])
    }

    func testInteractiveRenewalAfterALapseGrantsTheNewPeriod() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let back = t0 + month + 10 * day
        let step = t.feed(Apple.v1("INTERACTIVE_RENEWAL", otid: "s", [Apple.period("A", otid: "s", start: t0),
                                                                      Apple.period("A2", otid: "s", start: back)]))
        XCTAssertEqual(step.entries.kinds, [.grant])
        XCTAssertEqual(t.entitlement("s"), [interval(t0, t0 + month), interval(back, back + month)])
    }

    func testInformationalUnknownAndForeignInputsAreRecordedNotFatal() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        let expired = t.feed(Apple.v2("EXPIRED", subtype: "VOLUNTARY", uuid: "e", otid: "s", [],
                                      renewal: RenewalFacts(originalTransactionId: "s", productId: "vip.a.1m",
                                                            autoRenewStatus: false, expirationIntent: "1"),
                                      signed: t0 + month))
        XCTAssertEqual(expired.entries.kinds, [.renewal, .record])
        XCTAssertTrue(expired.entries[1].reason.contains("EXPIRED/VOLUNTARY"))
        let unknown = t.feed(Apple.v2("SOMETHING_NEW", uuid: "n", otid: "s", [], signed: t0 + month))
        XCTAssertEqual(unknown.entries.kinds, [.record])
        XCTAssertTrue(unknown.entries[0].reason.contains("unknown"), unknown.entries[0].reason)
        XCTAssertEqual(t.feed(Apple.v2("CONSUMPTION_REQUEST", uuid: "c", otid: "s", [], signed: t0 + 2)).entries.kinds, [.record])

        var foreign = Apple.v1("INITIAL_BUY", otid: "f", [Apple.period("F", otid: "f", start: t0)])
        foreign.bundleId = "com.other.app"
        let step = t.feed(foreign)
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertTrue(step.entries[0].reason.contains("com.other.app"))
        XCTAssertEqual(t.entitlement("f"), [])
    }

    func testUnknownProductIsGrantedFromApplesFactsAndFlagged() {
        var t = Transcript()
        let step = t.feed(Apple.v1("INITIAL_BUY", otid: "u", [Apple.period("U", otid: "u", product: "legacy.vip", start: t0)]))
        XCTAssertEqual(step.entries.kinds, [.grant])
        XCTAssertTrue(step.entries[0].reason.contains("not in the catalog"), step.entries[0].reason)
        var noFacts = Apple.tx("X", otid: "x", product: "mystery", purchase: t0)
        noFacts.webOrderLineItemId = nil
        XCTAssertEqual(t.feed(Apple.receipt(user: nil, otid: "x", [noFacts], id: "m")).entries.kinds, [.record])
    }
}
