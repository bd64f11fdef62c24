@testable import Domain
import XCTest

/// R14–R18 and second precision as transcripts: for each rule, every order of its inputs (Apple's
/// retries and late copies included) converges to the same membership.
final class StrangeTrafficTests: XCTestCase {
    let otid = "s"

    /// Feeds every permutation of `events` to a fresh transcript and returns the finished transcripts.
    private func everyOrder(_ events: [AppleEvent], catalog: Catalog = TestCatalog.standard) -> [(order: [String], t: Transcript)] {
        func permutations(_ items: [Int]) -> [[Int]] {
            guard items.count > 1 else { return [items] }
            return items.indices.flatMap { i -> [[Int]] in
                var rest = items
                let head = rest.remove(at: i)
                return permutations(rest).map { [head] + $0 }
            }
        }
        return permutations(Array(events.indices)).map { order in
            var t = Transcript(catalog: catalog)
            for index in order { t.feed(events[index]) }
            return (order.map { events[$0].eventId }, t)
        }
    }

    private func assertConverges(_ events: [AppleEvent], key: String? = nil, catalog: Catalog = TestCatalog.standard,
                                 to expected: [Interval], file: StaticString = #filePath, line: UInt = #line) {
        for run in everyOrder(events, catalog: catalog) {
            XCTAssertEqual(run.t.entitlement(key ?? otid), expected, "order \(run.order)", file: file, line: line)
            let sums = LedgerProjection(entries: run.t.ledger)
            XCTAssertEqual(sums, LedgerProjection(states: Array(run.t.book.subscriptions.values)),
                           "the ledger explains the state, order \(run.order)", file: file, line: line)
        }
    }

    // MARK: R14 — Apple's time orders facts, not arrival

    func testR14RefundRetriedAfterItsReversalDoesNotCutAgain() {
        let a = Apple.period("A", otid: otid, start: t0)
        var refunded = a
        refunded.cancellationDateMs = t0 + 10 * day
        refunded.cancellationReason = "0"
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0)
        let refund = Apple.v2("REFUND", uuid: "refund", otid: otid, [refunded], signed: t0 + 10 * day)
        let reversed = Apple.v2("REFUND_REVERSED", uuid: "reversed", otid: otid, [a], signed: t0 + 12 * day)
        // Apple's retry of the REFUND is the same signed payload: the same uuid and old signedDate.
        // Whether the first delivery got through or not, the reversal stands.
        assertConverges([buy, refund, reversed, refund], to: [interval(t0, t0 + month)])
        assertConverges([buy, reversed, refund], to: [interval(t0, t0 + month)])

        // In arrival order the ledger shows the cut and the reversal, and the late retry adds nothing.
        var t = Transcript()
        t.feed(buy)
        XCTAssertEqual(t.feed(refund).entries.kinds, [.cut])
        XCTAssertEqual(t.feed(reversed).entries.kinds, [.extend])
        var retry = refund
        retry.eventId = "v2:refund-first-delivery-lost"
        retry.notification?.uuid = "refund-first-delivery-lost"
        XCTAssertTrue(t.feed(retry).entries.isEmpty, "an older statement changes nothing")
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + month)])
    }

    func testR14OlderReceiptCopyStillShowingTheRefundAfterTheReversal() {
        let a = Apple.period("A", otid: otid, start: t0)
        var refunded = a
        refunded.cancellationDateMs = t0 + 3 * day
        let refund = Apple.v2("REFUND", uuid: "refund", otid: otid, [refunded], signed: t0 + 3 * day)
        let reversed = Apple.v2("REFUND_REVERSED", uuid: "reversed", otid: otid, [a], signed: t0 + 8 * day)
        // The app uploads a receipt created on day 5, between refund and reversal.
        var oldReceipt = Apple.receipt(user: nil, otid: otid, [refunded], id: "day5")
        oldReceipt.statedAtMs = t0 + 5 * day
        assertConverges([refund, reversed, oldReceipt], to: [interval(t0, t0 + month)])
        // A receipt created after the reversal that shows the purchase uncancelled agrees with it.
        var newReceipt = Apple.receipt(user: nil, otid: otid, [a], id: "day9")
        newReceipt.statedAtMs = t0 + 9 * day
        assertConverges([refund, reversed, oldReceipt, newReceipt], to: [interval(t0, t0 + month)])
        // Without the reversal, the refund stands whatever order the copies came in.
        assertConverges([refund, oldReceipt, Apple.v1("INITIAL_BUY", otid: otid, [a])], to: [interval(t0, t0 + 3 * day)])
    }

    // MARK: second precision

    func testCopiesOfOneExpiryOrCancellationThatDifferInMillisecondsWriteNoSubSecondEntries() {
        var v2Copy = Apple.period("A", otid: otid, start: t0)
        v2Copy.expiresDateMs = t0 + month + 123
        let receiptCopy = Apple.period("A", otid: otid, start: t0)   // whole seconds
        let v2 = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "sub", otid: otid, [v2Copy], signed: t0)
        let receipt = Apple.receipt(user: nil, otid: otid, [receiptCopy], id: "copy")
        for run in everyOrder([v2, receipt]) {
            XCTAssertEqual(run.t.ledger.kinds, [.grant], "order \(run.order)")
            XCTAssertEqual(run.t.entitlement(otid), [interval(t0, t0 + month)])
        }
        var v1Cancel = receiptCopy
        v1Cancel.cancellationDateMs = t0 + 5 * day
        var v2Cancel = v2Copy
        v2Cancel.cancellationDateMs = t0 + 5 * day + 456
        let events = [v2, receipt, Apple.v1("CANCEL", otid: otid, [v1Cancel], autoRenew: false),
                      Apple.v2("REFUND", uuid: "refund", otid: otid, [v2Cancel], signed: t0 + 5 * day + 456)]
        for run in everyOrder(events) {
            XCTAssertEqual(run.t.entitlement(otid), [interval(t0, t0 + 5 * day)], "order \(run.order)")
            let cuts = run.t.ledger.filter { $0.kind == .cut }
            XCTAssertTrue(cuts.allSatisfy { ($0.interval?.startMs ?? 0) % 1000 == 0 && ($0.interval?.endMs ?? 0) % 1000 == 0 },
                          "whole-second cuts only, order \(run.order): \(cuts.map(\.interval))")
            XCTAssertFalse(run.t.ledger.contains { $0.kind == .extend }, "order \(run.order)")
        }
    }

    // MARK: R15 — CANCEL facts at the top level of a V1 body

    private func topLevelCancel(web: String?, at: Int64, shows transactions: [TransactionFacts], reason: String? = "0") -> AppleEvent {
        var event = Apple.v1("CANCEL", otid: otid, transactions, autoRenew: false, id: "cancel-\(web ?? "none")-\(at)")
        event.notification?.originalTransactionId = otid
        event.notification?.webOrderLineItemId = web
        event.notification?.cancellationDateMs = at
        event.notification?.cancellationReason = reason
        return event
    }

    func testR15TopLevelCancellationCutsThePurchaseItNames() {
        let a = Apple.period("A", otid: otid, start: t0)
        let buy = Apple.v1("INITIAL_BUY", otid: otid, [a])
        // latest_receipt_info shows the purchase uncancelled; only the top level says it was cancelled.
        let cancel = topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [a])
        assertConverges([buy, cancel], to: [interval(t0, t0 + 6 * day)])
        var t = Transcript()
        t.feed(buy)
        let step = t.feed(cancel)
        XCTAssertEqual(step.entries.kinds, [.cut, .renewal], "the cut, and auto-renew off")
        XCTAssertEqual(step.entries.first?.interval, interval(t0 + 6 * day, t0 + month))
        XCTAssertEqual(step.entries.first?.cutKind, .refund)
        // A body that does not list the purchase at all: dedupe's memory finds it by web order id.
        var u = Transcript()
        u.feed(buy)
        XCTAssertEqual(u.feed(topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [])).entries.filter { $0.kind == .cut }.count, 1)
        XCTAssertEqual(u.entitlement(otid), [interval(t0, t0 + 6 * day)])
    }

    /// S15 with R15: the top-level-only CANCEL arrives before its purchase, in a body that does not
    /// list it. Dedupe keeps the cancellation and cuts the purchase when it arrives: the same
    /// membership in every order, Apple's retry of the CANCEL included.
    func testR15TopLevelCancellationBeforeItsPurchaseCutsItWhenItArrives() {
        let a = Apple.period("A", otid: otid, start: t0)
        let buy = Apple.v1("INITIAL_BUY", otid: otid, [a])
        let cancel = topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [])
        assertConverges([buy, cancel], to: [interval(t0, t0 + 6 * day)])
        assertConverges([cancel, buy, cancel], to: [interval(t0, t0 + 6 * day)])
        // In arrival order the purchase is granted already cut, and the retry cuts nothing more.
        var t = Transcript()
        t.feed(cancel)
        XCTAssertEqual(t.feed(buy).entries.filter { $0.kind == .grant }.first?.interval, interval(t0, t0 + 6 * day))
        XCTAssertFalse(t.feed(cancel).entries.contains { $0.kind == .cut }, "the retry cuts nothing more")
    }

    /// S8 with R15: an upgrade's CANCEL names no web order line item, and the new purchase starts at the
    /// very instant the old one is cancelled. The cancellation is the old period's, never the new one's,
    /// whatever order the body lists them in and whichever copy arrives first.
    func testR15TopLevelCancellationWithoutAWebOrderIdCutsThePeriodRunningBeforeTheInstant() {
        let switchAt = t0 + 10 * day
        let a = Apple.period("A", otid: otid, start: t0)
        // B's copy may say it was bought a few milliseconds before the cancellation instant (R1).
        for bStart in [switchAt, switchAt - 20] {
            let b = Apple.period("B", otid: otid, product: "vip.premium.1m", start: bStart)
            let buy = Apple.v1("INITIAL_BUY", otid: otid, [a])
            let upgrade = Apple.v1("INTERACTIVE_RENEWAL", otid: otid, [a, b], autoRenewProduct: "vip.premium.1m")
            for listed in [[a, b], [b, a], [], [b]] {
                var cancel = topLevelCancel(web: nil, at: switchAt + 500, shows: listed, reason: nil)
                cancel.notification?.autoRenewStatus = true
                assertConverges([buy, upgrade, cancel], to: [interval(t0, bStart / 1000 * 1000 + month)])
            }
        }
    }

    /// R15 after a switch: Apple support refunds the upgrade's new purchase, and the CANCEL names no web
    /// order line item. The period running at its instant is the new purchase; the old one, which the
    /// upgrade cut already, is not named (its copy showing that earlier cancellation changes nothing).
    func testR15TopLevelCancellationAfterAnUpgradeCutsTheNewPurchase() {
        let switchAt = t0 + 10 * day
        let refundAt = switchAt + 5 * day
        var upgraded = Apple.period("A", otid: otid, start: t0)
        upgraded.cancellationDateMs = switchAt
        upgraded.isUpgraded = true
        let b = Apple.period("B", otid: otid, product: "vip.premium.1m", start: switchAt)
        let upgrade = Apple.v1("INTERACTIVE_RENEWAL", otid: otid, [upgraded, b], autoRenewProduct: "vip.premium.1m")
        for listed in [[upgraded, b], [b, upgraded], [], [b]] {
            let cancel = topLevelCancel(web: nil, at: refundAt, shows: listed, reason: "0")
            assertConverges([upgrade, cancel], to: [interval(t0, refundAt)])
            var t = Transcript()
            t.feed(upgrade)
            let step = t.feed(cancel)
            let cut = step.entries.first { $0.kind == .cut }
            XCTAssertEqual(cut?.interval, interval(refundAt, switchAt + month), "listed \(listed.map(\.transactionId))")
            XCTAssertFalse(step.entries.contains { $0.kind == .record }, "no 'unmatched' record, listed \(listed.map(\.transactionId))")
        }
    }

    /// R15: of a web-less copy and the copy carrying the named web order id, both running at the
    /// instant, the one named by its web order id is cut.
    func testR15TheCopyCarryingTheNamedWebOrderIdIsCutFirst() {
        var a = Apple.period("A", otid: otid, start: t0, length: 2 * month)
        a.webOrderLineItemId = nil
        let b = Apple.period("B", otid: otid, start: t0 + day)
        let cancel = topLevelCancel(web: "wB", at: t0 + 6 * day, shows: [a, b])
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: otid, [a, b]))
        t.feed(cancel)
        let cuts = Dictionary(uniqueKeysWithValues: t.state(otid).grants.values.map { ($0.transactionId, $0.cut?.atMs) })
        XCTAssertEqual(cuts["B"], .some(t0 + 6 * day), "the purchase named by its web order id")
        XCTAssertEqual(cuts["A"], .some(nil), "the web-less copy running at the instant is not")
    }

    /// R15: a copy that carries no web order id at all is still the period the top-level cancellation
    /// names by its web order id, found by the cancellation's instant.
    func testR15TopLevelWebOrderIdMatchesACopyWithoutOneByItsInstant() {
        var a = Apple.period("A", otid: otid, start: t0)
        a.webOrderLineItemId = nil
        let buy = Apple.v1("INITIAL_BUY", otid: otid, [a])
        assertConverges([buy, topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [a])], to: [interval(t0, t0 + 6 * day)])
        assertConverges([buy, topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [])], to: [interval(t0, t0 + 6 * day)])
    }

    /// The V2 REFUND came first; Apple's V1 CANCEL for the same refund (top level only, the copy listed
    /// uncancelled) changes nothing and is no "unmatched" cancellation.
    func testR15TopLevelCancellationAlreadyKnownFromV2IsNoUnmatchedRecord() {
        let a = Apple.period("A", otid: otid, start: t0)
        var refunded = a
        refunded.cancellationDateMs = t0 + 6 * day
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: otid, [a]))
        t.feed(Apple.v2("REFUND", uuid: "refund-a", otid: otid, [refunded], signed: t0 + 6 * day + 300_000))
        let step = t.feed(topLevelCancel(web: "wA", at: t0 + 6 * day, shows: [a]))
        XCTAssertFalse(step.entries.contains { $0.reason.contains("names no purchase") }, "\(step.entries.map(\.reason))")
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + 6 * day)])
    }

    func testR15TopLevelCancellationThatMatchesNoPurchaseIsRecorded() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: otid, [Apple.period("A", otid: otid, start: t0)]))
        let step = t.feed(topLevelCancel(web: "w-unknown", at: t0 + 6 * day, shows: []))
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertTrue(step.entries[0].reason.contains("names no purchase"), step.entries[0].reason)
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + month)], "nothing cut")
    }

    // MARK: R16 — one V1 body, several subscriptions

    func testR16TopLevelRenewalFactsChangeOnlyTheNamedSubscription() {
        // What the V1 decoder makes of a DID_CHANGE_RENEWAL_STATUS / DID_FAIL_TO_RENEW body that names
        // subscription "a" and also carries "b" (another group) in unified_receipt.
        let subject = V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: "vip.a.1m", candidates: [
            .init(originalTransactionId: "a", renewsAs: "vip.a.1m", latestProduct: "vip.a.1m"),
            .init(originalTransactionId: "b", renewsAs: "pass.other", latestProduct: "pass.other"),
        ])
        XCTAssertEqual(subject, "a")
        for type in ["DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW"] {
            var t = Transcript()
            t.feed(Apple.v1("INITIAL_BUY", otid: "a", [Apple.period("A", otid: "a", start: t0)]))
            t.feed(Apple.v1("INITIAL_BUY", otid: "b", [Apple.period("B", otid: "b", start: t0)]))
            let about = Apple.v1(type, otid: "a", [], autoRenew: false, statusChange: t0 + 3 * day,
                                 renewal: RenewalFacts(originalTransactionId: "a", productId: "vip.a.1m", autoRenewStatus: false))
            var other = Apple.v1(type, otid: "b", [], autoRenew: false, statusChange: t0 + 3 * day,
                                 renewal: RenewalFacts(originalTransactionId: "b", productId: "vip.a.1m", autoRenewStatus: true,
                                                       isInBillingRetryPeriod: false))
            other.notification = other.notification?.forAnotherSubscription
            t.feed(about)
            t.feed(other)
            XCTAssertEqual(t.state("a").renewal?.autoRenewStatus, false, type)
            XCTAssertEqual(t.state("b").renewal?.autoRenewStatus, true, "\(type): b keeps its own pending_renewal_info")
            XCTAssertNotEqual(t.state("b").renewal?.isInBillingRetry, true, "\(type): b is not in billing retry")
        }
    }

    func testR16SubjectIsTheTopLevelOriginalTransactionIdThenTheRenewalProduct() {
        let candidates: [V1BodySubject.Candidate] = [
            .init(originalTransactionId: "a", renewsAs: "x", latestProduct: "x"),
            .init(originalTransactionId: "b", renewsAs: "y", latestProduct: "z"),
        ]
        XCTAssertEqual(V1BodySubject.of(topLevelOriginalTransactionId: "b", autoRenewProductId: "x", candidates: candidates), "b")
        XCTAssertEqual(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: "y", candidates: candidates), "b")
        XCTAssertEqual(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: "z", candidates: candidates), "b")
        XCTAssertNil(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: nil, candidates: candidates),
                     "an unnamed subject of several: no subscription takes the top-level facts")
        XCTAssertEqual(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: nil, candidates: [candidates[0]]), "a")
        // A CANCEL names its purchase by web order line item: that purchase's subscription is the subject.
        let withWeb = [V1BodySubject.Candidate(originalTransactionId: "a", renewsAs: nil, latestProduct: nil, webOrderLineItemIds: ["w1"]),
                       V1BodySubject.Candidate(originalTransactionId: "b", renewsAs: nil, latestProduct: nil, webOrderLineItemIds: ["w2"])]
        XCTAssertEqual(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: nil, webOrderLineItemId: "w2",
                                        candidates: withWeb), "b")
        XCTAssertNil(V1BodySubject.of(topLevelOriginalTransactionId: nil, autoRenewProductId: nil, webOrderLineItemId: "w3",
                                      candidates: withWeb))
    }

    // MARK: R17 — only a claim moves a subscription

    func testR17RestoredOnAnotherAccountStaysThereWhenRenewalsRepeatTheOldToken() {
        let accountA = "aaaaaaaa-0000-4000-8000-00000000000a"
        let first = Apple.period("1", otid: otid, start: t0, token: accountA)
        let renewal = Apple.period("2", otid: otid, start: t0 + month, token: accountA)
        let buy = Apple.v1("INITIAL_BUY", otid: otid, [first])
        var restore = Apple.receipt(user: "account-b", otid: otid, [first], id: "restore-b")
        restore.receivedAtMs = t0 + 10 * day
        let renew = Apple.v1("DID_RENEW", otid: otid, [first, renewal])
        for run in everyOrder([buy, restore, renew]) {
            XCTAssertEqual(run.t.state(otid).userId, "account-b", "order \(run.order)")
            XCTAssertEqual(run.t.user("account-b").first?.intervals, [interval(t0, t0 + 2 * month)], "order \(run.order)")
            XCTAssertTrue(run.t.user(accountA).isEmpty, "order \(run.order)")
        }
        // A new purchase on which the app set another account's token is a new claim.
        let accountC = "cccccccc-0000-4000-8000-00000000000c"
        let resubscribe = Apple.v1("INTERACTIVE_RENEWAL", otid: otid, [Apple.period("3", otid: otid, start: t0 + 3 * month, token: accountC)])
        for run in everyOrder([buy, restore, renew, resubscribe]) {
            XCTAssertEqual(run.t.state(otid).userId, accountC, "order \(run.order)")
        }
    }

    /// S19 when StoreLedger never saw the purchase (bought before it ran, or a sandbox notification
    /// sent once and lost): a V2 renewal alone repeats account A's token; it claims as of the original
    /// purchase, so account B's later restore keeps the subscription in every order.
    func testR17AV2RenewalAloneClaimsAsOfTheOriginalPurchase() {
        let accountA = "aaaaaaaa-0000-4000-8000-00000000000a"
        let first = Apple.period("1", otid: otid, start: t0, token: accountA)
        var renewal = Apple.period("2", otid: otid, start: t0 + month, token: accountA)
        renewal.transactionReason = "RENEWAL"
        renewal.originalPurchaseDateMs = t0
        var restore = Apple.receipt(user: "account-b", otid: otid, [first], id: "restore-b")
        restore.receivedAtMs = t0 + 10 * day
        let renew = Apple.v2("DID_RENEW", uuid: "renew", otid: otid, [renewal], signed: t0 + month)
        for run in everyOrder([restore, renew]) {
            XCTAssertEqual(run.t.state(otid).userId, "account-b", "order \(run.order)")
            XCTAssertTrue(run.t.user(accountA).isEmpty, "order \(run.order)")
        }
        // A purchase (not a renewal) on which the app set a token not carried before claims as of itself.
        let accountC = "cccccccc-0000-4000-8000-00000000000c"
        var repurchase = Apple.period("3", otid: otid, start: t0 + 3 * month, token: accountC)
        repurchase.transactionReason = "PURCHASE"
        repurchase.originalPurchaseDateMs = t0
        let resubscribe = Apple.v2("SUBSCRIBED", subtype: "RESUBSCRIBE", uuid: "resubscribe", otid: otid, [repurchase], signed: t0 + 3 * month)
        for run in everyOrder([restore, renew, resubscribe]) {
            XCTAssertEqual(run.t.state(otid).userId, accountC, "order \(run.order)")
        }
    }

    /// A renewal repeating a token claims as of the original purchase only until the purchase that set
    /// the token is seen: a resubscription on which the app set account B's token is B's claim as of the
    /// resubscription, and B's renewals cannot pull it back to the first purchase, where account A's
    /// claim stands (A's id sorts last, so a tie there would give the subscription to A).
    func testR17RenewalsNeverPullATokensClaimBackBeforeThePurchaseThatSetIt() {
        let accountA = "ffffffff-0000-4000-8000-00000000000a"
        let accountB = "bbbbbbbb-0000-4000-8000-00000000000b"
        var first = Apple.period("1", otid: otid, start: t0, token: accountA)
        first.transactionReason = "PURCHASE"
        first.originalPurchaseDateMs = t0
        var repurchase = Apple.period("3", otid: otid, start: t0 + 3 * month, token: accountB)
        repurchase.transactionReason = "PURCHASE"
        repurchase.originalPurchaseDateMs = t0
        var renewal = Apple.period("4", otid: otid, start: t0 + 4 * month, token: accountB)
        renewal.transactionReason = "RENEWAL"
        renewal.originalPurchaseDateMs = t0
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [first], signed: t0)
        let resubscribe = Apple.v2("SUBSCRIBED", subtype: "RESUBSCRIBE", uuid: "resubscribe", otid: otid, [repurchase], signed: t0 + 3 * month)
        let renew = Apple.v2("DID_RENEW", uuid: "renew", otid: otid, [renewal], signed: t0 + 4 * month)
        for run in everyOrder([buy, resubscribe, renew]) {
            XCTAssertEqual(run.t.state(otid).userId, accountB, "order \(run.order)")
            XCTAssertTrue(run.t.user(accountA).isEmpty, "order \(run.order)")
        }
    }

    /// A token named only by the renewal info (no transaction carries it) is no claim of its own
    /// time: account B's restore keeps the subscription in every order.
    func testR17ATokenOnlyInTheRenewalInfoDoesNotOutrankAnUpload() {
        let accountA = "aaaaaaaa-0000-4000-8000-00000000000a"
        let first = Apple.period("1", otid: otid, start: t0)
        var renewal = Apple.period("2", otid: otid, start: t0 + month)
        renewal.transactionReason = "RENEWAL"
        renewal.originalPurchaseDateMs = t0
        var restore = Apple.receipt(user: "account-b", otid: otid, [first], id: "restore-b")
        restore.receivedAtMs = t0 + 10 * day
        let info = RenewalFacts(originalTransactionId: otid, productId: "vip.a.1m", autoRenewProductId: "vip.a.1m",
                                autoRenewStatus: true, appAccountToken: accountA)
        let renew = Apple.v2("DID_RENEW", uuid: "renew", otid: otid, [renewal], renewal: info, signed: t0 + month)
        for run in everyOrder([restore, renew]) {
            XCTAssertEqual(run.t.state(otid).userId, "account-b", "order \(run.order)")
            XCTAssertTrue(run.t.user(accountA).isEmpty, "order \(run.order)")
        }
        // Alone, it still links the subscription to its account (S10's only trace of the user).
        var t = Transcript(catalog: TestCatalog.standard)
        t.feed(renew)
        XCTAssertEqual(t.state(otid).userId, accountA)
    }

    /// The first account uploading the same receipt again, after another account's upload, claims it
    /// back: each upload is a claim at its own time (the decoder gives each its own event id).
    func testR17UploadingTheSameReceiptAgainClaimsItBack() {
        let a = Apple.period("A", otid: otid, start: t0)
        var uploads: [AppleEvent] = []
        for (index, user) in ["account-a", "account-b", "account-a"].enumerated() {
            var upload = Apple.receipt(user: user, otid: otid, [a], id: "upload-\(index)")
            upload.receivedAtMs = t0 + Int64(index + 1) * day
            uploads.append(upload)
        }
        for run in everyOrder(uploads) {
            XCTAssertEqual(run.t.state(otid).userId, "account-a", "order \(run.order)")
        }
    }

    func testR17UUIDUserIdsCompareCaseInsensitively() {
        let user = "6f1c2a4e-0000-4000-8000-00000000abcd"
        let a = Apple.period("A", otid: otid, start: t0, token: user)
        let upload = Apple.receipt(user: user.uppercased(), otid: otid, [a], id: "upload")
        let v2 = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "sub", otid: otid, [a], signed: t0)
        for run in everyOrder([upload, v2]) {
            XCTAssertEqual(run.t.state(otid).userId, user, "order \(run.order)")
            XCTAssertFalse(run.t.ledger.contains { $0.kind == .unlink }, "one user, never moved: order \(run.order)")
            XCTAssertEqual(run.t.user(user).first?.intervals, [interval(t0, t0 + month)])
        }
        XCTAssertEqual(UserId.normalized("Not-A-UUID"), "Not-A-UUID", "other ids are compared exactly")
    }

    // MARK: R18 — environments never merge

    private func inEnvironment(_ event: AppleEvent, _ environment: String) -> AppleEvent {
        var copy = event
        copy.environment = environment
        copy.subscriptionKey = SubscriptionKey.make(originalTransactionId: event.subscriptionKey, environment: environment)
        copy.eventId += "@\(environment)"
        return copy
    }

    func testR18SameOriginalTransactionIdInSandboxAndProductionAreTwoSubscriptions() {
        let user = "6f1c2a4e-0000-4000-8000-00000000abcd"
        let production = inEnvironment(Apple.v1("INITIAL_BUY", otid: otid, [Apple.period("1", otid: otid, start: t0, token: user)]), "Production")
        let sandbox = inEnvironment(Apple.v1("INITIAL_BUY", otid: otid, [Apple.period("1", otid: otid, start: t0 + day, token: "sandbox-tester")]), "Sandbox")
        var sandboxRefund = Apple.period("1", otid: otid, start: t0 + day, token: "sandbox-tester")
        sandboxRefund.cancellationDateMs = t0 + 2 * day
        let refund = inEnvironment(Apple.v1("CANCEL", otid: otid, [sandboxRefund], autoRenew: false), "Sandbox")
        XCTAssertEqual(production.subscriptionKey, "s")
        XCTAssertEqual(sandbox.subscriptionKey, "s@Sandbox")
        for run in everyOrder([production, sandbox, refund]) {
            XCTAssertEqual(run.t.entitlement("s"), [interval(t0, t0 + month)], "the Sandbox refund never touches Production: \(run.order)")
            XCTAssertEqual(run.t.entitlement("s@Sandbox"), [interval(t0 + day, t0 + 2 * day)], "order \(run.order)")
            XCTAssertEqual(run.t.state("s").userId, user)
            XCTAssertEqual(run.t.state("s@Sandbox").userId, "sandbox-tester")
        }
        var t = Transcript()
        let step = t.feed(sandbox)
        let grant = try? XCTUnwrap(step.entries.first { $0.kind == .grant })
        XCTAssertEqual(grant?.environment, "Sandbox", "the ledger marks a Sandbox grant")
        XCTAssertTrue(grant?.reason.contains("Sandbox purchase") ?? false, grant?.reason ?? "")
        XCTAssertEqual(t.user("sandbox-tester").first?.environments, ["Sandbox"])
    }

    func testR18CatalogSettingRecordsNonProductionPurchasesWithoutGranting() {
        var catalog = TestCatalog.standard
        catalog.nonProductionPurchases = .record
        var t = Transcript(catalog: catalog)
        let step = t.feed(inEnvironment(Apple.v1("INITIAL_BUY", otid: otid, [Apple.period("1", otid: otid, start: t0)]), "Sandbox"))
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertTrue(step.entries[0].reason.contains("grants no Sandbox purchases"), step.entries[0].reason)
        XCTAssertEqual(t.entitlement("s@Sandbox"), [])
        XCTAssertEqual(t.feed(Apple.v1("INITIAL_BUY", otid: otid, [Apple.period("1", otid: otid, start: t0)])).entries.kinds, [.grant],
                       "Production still grants")
        // Nor does a Sandbox billing grace period grant anything.
        let a = Apple.period("1", otid: otid, start: t0)
        let graceStep = t.feed(inEnvironment(failedRenewal(graceEnd: t0 + month + 16 * day, a), "Sandbox"))
        XCTAssertFalse(graceStep.entries.contains { $0.kind == .grant }, "\(graceStep.entries.map(\.reason))")
        XCTAssertTrue(graceStep.entries.contains { $0.kind == .record && $0.reason.contains("grants no Sandbox purchases") })
        XCTAssertEqual(t.entitlement("s@Sandbox"), [])
        let decoded = try? Catalog.load(json: Array(#"{"products": [], "nonProductionPurchases": "record"}"#.utf8), source: "test")
        XCTAssertEqual(decoded?.nonProductionPurchases, .record)
        XCTAssertEqual((try? Catalog.load(json: Array(#"{"products": []}"#.utf8), source: "test"))?.nonProductionPurchases, .grant)
    }

    // MARK: grace ends when Apple ends it

    private func failedRenewal(graceEnd: Int64, _ a: TransactionFacts) -> AppleEvent {
        Apple.v2("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", uuid: "failed", otid: otid, [a],
                 renewal: RenewalFacts(originalTransactionId: otid, productId: "vip.a.1m", autoRenewProductId: "vip.a.1m",
                                       autoRenewStatus: true, isInBillingRetryPeriod: true, gracePeriodExpiresDateMs: graceEnd),
                 signed: t0 + month)
    }

    func testGracePeriodExpiredEarlyEndsServiceThen() {
        let a = Apple.period("A", otid: otid, start: t0)
        let graceEnd = t0 + month + 16 * day
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0)
        let expired = Apple.v2("GRACE_PERIOD_EXPIRED", uuid: "grace-over", otid: otid, [a],
                               renewal: RenewalFacts(originalTransactionId: otid, productId: "vip.a.1m", autoRenewStatus: true,
                                                     isInBillingRetryPeriod: true),
                               signed: t0 + month + 6 * day)
        assertConverges([buy, failedRenewal(graceEnd: graceEnd, a), expired], to: [interval(t0, t0 + month + 6 * day)])
        var t = Transcript()
        t.feed(buy)
        t.feed(failedRenewal(graceEnd: graceEnd, a))
        XCTAssertEqual(t.entitlement(otid), [interval(t0, graceEnd)])
        let step = t.feed(expired)
        XCTAssertEqual(step.entries.filter { $0.kind == .cut }.map(\.interval), [interval(t0 + month + 6 * day, graceEnd)])
        // A later grace period (another failed renewal, months on) is not ended by the old statement.
        var later = Apple.period("B", otid: otid, start: t0 + 3 * month)
        later.webOrderLineItemId = "wB"
        t.feed(Apple.v2("DID_RENEW", uuid: "renewed", otid: otid, [later], signed: t0 + 3 * month))
        t.feed(Apple.v2("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", uuid: "failed-again", otid: otid, [later],
                        renewal: RenewalFacts(originalTransactionId: otid, productId: "vip.a.1m", autoRenewStatus: true,
                                              isInBillingRetryPeriod: true, gracePeriodExpiresDateMs: t0 + 4 * month + 6 * day),
                        signed: t0 + 4 * month))
        XCTAssertEqual(t.entitlement(otid).last, interval(t0 + 3 * month, t0 + 4 * month + 6 * day))
    }

    func testRefundDuringTheGracePeriodEndsItAtTheRefund() {
        let a = Apple.period("A", otid: otid, start: t0)
        let graceEnd = t0 + month + 16 * day
        var refunded = a
        refunded.cancellationDateMs = t0 + month + 4 * day
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0)
        let refund = Apple.v2("REFUND", uuid: "refund", otid: otid, [refunded], signed: t0 + month + 4 * day)
        // The refund comes after the period ended (R11: the period keeps), but the grace period stops.
        assertConverges([buy, failedRenewal(graceEnd: graceEnd, a), refund], to: [interval(t0, t0 + month + 4 * day)])
    }

    /// R11: a late refund of a period long over deducts nothing, also while a later period's billing
    /// grace runs: only a refund of the period the grace follows (or a later one) ends the grace.
    func testALateRefundOfAnOldPeriodLeavesTheGracePeriodWhole() {
        let a = Apple.period("A", otid: otid, start: t0)
        let b = Apple.period("B", otid: otid, start: t0 + month)
        let graceEnd = t0 + 2 * month + 16 * day
        var refunded = a
        refunded.cancellationDateMs = t0 + 2 * month + 4 * day
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0)
        let renew = Apple.v2("DID_RENEW", uuid: "renew", otid: otid, [b], signed: t0 + month)
        let failed = Apple.v2("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", uuid: "failed", otid: otid, [b],
                              renewal: RenewalFacts(originalTransactionId: otid, productId: "vip.a.1m", autoRenewProductId: "vip.a.1m",
                                                    autoRenewStatus: true, isInBillingRetryPeriod: true, gracePeriodExpiresDateMs: graceEnd),
                              signed: t0 + 2 * month)
        let refund = Apple.v2("REFUND", uuid: "refund", otid: otid, [refunded], signed: t0 + 2 * month + 4 * day)
        assertConverges([buy, renew, failed, refund], to: [interval(t0, graceEnd)])
    }

    // MARK: R19 — prorated refunds, offer discount types

    /// R13: a copy that names no quantity (read as 1) and Apple's V2 copy with quantity 3 credit the
    /// purchase three times, whichever arrives first.
    func testAConsumablesQuantityComesFromAppleWhicheverCopyComesFirst() {
        let one = Apple.tx("c1", otid: "c", product: "coins.100", purchase: t0)
        var three = one
        three.quantity = 3
        let receipt = Apple.receipt(user: nil, otid: "c", [one], id: "upload")
        let charge = Apple.v2("ONE_TIME_CHARGE", uuid: "charge", otid: "c", [three], signed: t0)
        for run in everyOrder([receipt, charge]) {
            XCTAssertEqual(run.t.state("c").balance(group: "coins"), 300, "order \(run.order)")
        }
    }

    /// A product missing from the catalog is grouped by Apple's subscription group id; a receipt copy
    /// carries none. Once a later copy names it, every period of the subscription is in that group,
    /// whichever copy came first (one group, not two halves).
    func testAnUncataloguedSubscriptionsPeriodsShareTheGroupAppleNames() {
        let first = Apple.tx("x1", otid: otid, product: "vip.unknown.1m", purchase: t0, expires: t0 + month, web: "wx1")
        var named = first
        named.subscriptionGroupIdentifier = "20537620"
        var second = Apple.tx("x2", otid: otid, product: "vip.unknown.1m", purchase: t0 + month, expires: t0 + 2 * month, web: "wx2")
        second.subscriptionGroupIdentifier = "20537620"
        let receipt = Apple.receipt(user: nil, otid: otid, [first], id: "upload")
        let renew = Apple.v1("DID_RENEW", otid: otid, [named, second])
        for run in everyOrder([receipt, renew]) {
            XCTAssertEqual(run.t.state(otid).grants.count, 2, "order \(run.order)")
            XCTAssertEqual(Set(run.t.state(otid).grants.values.map(\.group)), ["20537620"], "order \(run.order)")
        }
    }

    func testProratedRefundOfAConsumableDebitsTheRefundedShare() {
        let coins = Apple.tx("c1", otid: "c", product: "coins.100", purchase: t0)
        var prorated = coins
        prorated.cancellationDateMs = t0 + day
        prorated.revocationType = "REFUND_PRORATED"
        prorated.revocationPercentage = 33_333   // 33.333 %
        let buy = Apple.v2("ONE_TIME_CHARGE", uuid: "buy", otid: "c", [coins], signed: t0)
        let refund = Apple.v2("REFUND", uuid: "refund", otid: "c", [prorated], signed: t0 + day)
        for run in everyOrder([buy, refund]) {
            XCTAssertEqual(run.t.state("c").balance(group: "coins"), 67, "100 units, 33.333 % refunded: 33 debited, order \(run.order)")
        }
        // A later copy of the same refund without Apple's details (a receipt, a V1 body) keeps the share.
        var receiptCopy = coins
        receiptCopy.cancellationDateMs = t0 + day
        var receipt = Apple.receipt(user: nil, otid: "c", [receiptCopy], id: "after-refund")
        receipt.statedAtMs = t0 + 2 * day
        var v1 = Apple.v1("REFUND", otid: "c", [receiptCopy], autoRenew: nil)
        v1.notification?.cancellationDateMs = t0 + day
        for run in everyOrder([buy, refund, receipt, v1]) {
            XCTAssertEqual(run.t.state("c").balance(group: "coins"), 67, "the refunded share is debited once, order \(run.order)")
        }
        var t = Transcript()
        t.feed(buy)
        let step = t.feed(refund)
        XCTAssertEqual(step.entries.map(\.kind), [.debit])
        XCTAssertEqual(step.entries.first?.amount, 33)
        XCTAssertTrue(step.entries.first?.reason.contains("prorated refund of 33.333%") ?? false, step.entries.first?.reason ?? "")
        XCTAssertEqual(Cut(atMs: 0, kind: .refund, refundedShare: 50_000).refundedUnits(of: 3), 2, "halves round up")
        XCTAssertEqual(Cut(atMs: 0, kind: .refund, refundedShare: 250_000).refundedUnits(of: 3), 3, "never more than the credit")
        XCTAssertEqual(Cut(atMs: 0, kind: .refund, refundedShare: 100_000).refundedUnits(of: Int.max), Int.max, "no overflow")
        // A prorated refund of a subscription still cuts at the revocation date.
        var period = Apple.period("A", otid: otid, start: t0)
        period.cancellationDateMs = t0 + 10 * day
        period.revocationType = "REFUND_PRORATED"
        period.revocationPercentage = 50_000
        var u = Transcript()
        u.feed(Apple.v2("REFUND", uuid: "sub-refund", otid: otid, [period], signed: t0 + 10 * day))
        XCTAssertEqual(u.entitlement(otid), [interval(t0, t0 + 10 * day)])
    }

    func testOfferDiscountTypeReachesTheFinanceFacts() {
        var free = Apple.period("F", otid: otid, start: t0)
        free.offerType = 2
        free.offerIdentifier = "winback"
        free.offerDiscountType = "FREE_TRIAL"
        free.offerPeriod = "P1M"
        var t = Transcript()
        t.feed(Apple.v2("SUBSCRIBED", subtype: "RESUBSCRIBE", uuid: "free", otid: otid, [free], signed: t0))
        let finance = t.state(otid).grants.values.first?.finance
        XCTAssertEqual(finance?.offerDiscountType, "FREE_TRIAL")
        XCTAssertEqual(finance?.offerPeriod, "P1M")
        XCTAssertEqual(finance?.promotionalOfferId, "winback")
    }

    func testARenewalChargedEarlyAndRefundedBeforeThePeriodEndsLeavesThatPeriodWhole() {
        let first = Apple.period("A", otid: otid, start: t0)
        // Apple charged the renewal 35 minutes before the first period ended; it was refunded a minute before that end.
        var renewal = Apple.tx("B", otid: otid, product: "vip.a.1m", purchase: t0 + month - 35 * 60_000, expires: t0 + 2 * month, web: "wB")
        let early = Apple.v2("DID_RENEW", uuid: "renew", otid: otid, [first, renewal], signed: renewal.purchaseDateMs)
        renewal.cancellationDateMs = t0 + month - 60_000
        renewal.cancellationReason = "0"
        let refund = Apple.v2("REFUND", uuid: "refund", otid: otid, [renewal], signed: t0 + month - 60_000)
        let buy = Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [first], signed: t0)
        assertConverges([buy, early, refund], to: [interval(t0, t0 + month)])
        // Unrefunded, the early renewal continues the first period without a gap and cuts nothing of it.
        var t = Transcript()
        t.feed(buy)
        t.feed(early)
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + 2 * month)])
        XCTAssertFalse(t.ledger.contains { $0.kind == .cut }, "an early renewal is no switch")
    }

    func testBillingPlanAndCommitmentReachTheFinanceFactsAlsoFromALaterCopy() {
        let plain = Apple.period("C", otid: otid, start: t0)
        var committed = plain
        committed.billingPlanType = "MONTHLY"
        committed.commitmentInfo = CommitmentInfo(billingPeriodNumber: 3, totalBillingPeriods: 12,
                                                  commitmentExpiresDateMs: t0 + 300 * day, commitmentPrice: 119_880)
        var t = Transcript()
        // A receipt copy knows nothing of the commitment; Apple's V2 copy of the same purchase does.
        t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "plain", otid: otid, [plain], signed: t0))
        XCTAssertNil(t.state(otid).grants.values.first?.finance.commitment)
        t.feed(Apple.v2("DID_RENEW", uuid: "committed", otid: otid, [committed], signed: t0 + 1))
        let finance = t.state(otid).grants.values.first?.finance
        XCTAssertEqual(t.state(otid).grants.count, 1, "one purchase")
        XCTAssertEqual(finance?.billingPlanType, "MONTHLY")
        XCTAssertEqual(finance?.commitment?.billingPeriodNumber, 3)
        XCTAssertEqual(finance?.commitment?.totalBillingPeriods, 12)
        XCTAssertEqual(finance?.commitment?.commitmentPrice, 119_880)
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + 30 * day)], "the commitment changes finance, not membership")
    }

    func testGraceAfterAnExpiryWithMillisecondsLeavesNoGap() {
        var a = Apple.period("A", otid: otid, start: t0)
        a.expiresDateMs = t0 + month + 123
        var t = Transcript()
        t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0))
        t.feed(failedRenewal(graceEnd: t0 + month + 6 * day + 456, a))
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + month + 6 * day)], "one whole-second interval, no 123 ms gap")
    }
}
