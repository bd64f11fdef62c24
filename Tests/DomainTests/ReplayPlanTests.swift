import Domain
import XCTest

/// Replay's pure part (issue 13): bounds as operators write them, ranges and the retention refusal,
/// compensation planning (the difference between what is stored and what the fixed code computes,
/// as commands membership applies), the diff summary, the progress line, and the test-only wrong rules.
final class ReplayPlanTests: XCTestCase {
    func testBoundsParse() throws {
        XCTAssertEqual(try ReplayBound.parse("earliest"), .earliest)
        XCTAssertEqual(try ReplayBound.parse("1200"), .offset(1200))
        XCTAssertEqual(try ReplayBound.parse("0:120,3:98"), .offsets([0: 120, 3: 98]))
        XCTAssertEqual(try ReplayBound.parse("@1709251200000"), .time(1_709_251_200_000))
        XCTAssertEqual(try ReplayBound.parse("2024-03-01"), .time(1_709_251_200_000))
        XCTAssertEqual(try ReplayBound.parse("2024-03-01T00:00:01Z"), .time(1_709_251_201_000))
        XCTAssertEqual(try ReplayBound.parse("2024-03-01T00:00:01.25Z"), .time(1_709_251_201_250))
        XCTAssertEqual(try ReplayBound.parse("2024-03-01T00:00:01.123456Z"), .time(1_709_251_201_123))
        for bad in ["", "-3", "yesterday", "2024-02-30", "2024-03-01T25:00:00Z", "2024-03-01T10:00:00", "0:1,0:2", "0:x",
                    "99999999999999999999", "@-5", "2024-03-01T00:00:00.1234567890123Z", String(repeating: "9", count: 300)] {
            XCTAssertThrowsError(try ReplayBound.parse(bad), bad)
        }
    }

    func testRangesAndRetention() throws {
        let none: (Int64) throws -> Int64? = { _ in nil }
        var range = try ReplayRange.resolve(topic: "t", partition: 0, low: 0, high: 100, horizon: 90, from: .earliest, to: nil, timeOffset: none)
        XCTAssertEqual([range.start, range.end, range.horizon], [0, 90, 90])
        range = try ReplayRange.resolve(topic: "t", partition: 1, low: 0, high: 100, horizon: 90, from: .offsets([1: 40]), to: .offset(60), timeOffset: none)
        XCTAssertEqual([range.start, range.end], [40, 60])
        range = try ReplayRange.resolve(topic: "t", partition: 2, low: 0, high: 100, horizon: 90, from: .time(5), to: .offset(500), timeOffset: { _ in 70 })
        XCTAssertEqual([range.start, range.end], [70, 90], "never past where the stage committed")
        range = try ReplayRange.resolve(topic: "t", partition: 2, low: 0, high: 100, horizon: 90, from: .time(5), to: nil, timeOffset: none)
        XCTAssertEqual([range.start, range.end], [90, 90], "a time after every record replays nothing")
        XCTAssertThrowsError(try ReplayRange.resolve(topic: "t", partition: 3, low: 12, high: 100, horizon: 90, from: .offset(50), to: nil,
                                                     timeOffset: none)) { error in
            XCTAssert(String(describing: error).contains("retention"), "\(error)")
        }
    }

    private let cause = Cause(source: .notificationV1, eventId: "e1")

    private func grant(_ id: String, start: Int64, end: Int64?, cut: Cut? = nil, kind: ProductKind = .autoRenewable, credit: Int? = nil) -> PurchaseGrant {
        PurchaseGrant(purchaseId: id, transactionId: "tx-\(id)", originalTransactionId: "o", productId: "p.1m", productKind: kind,
                      group: "g", startMs: start, endMs: end, cut: cut, credit: credit, level: 1, durationDays: 30)
    }

    private func fold(_ grants: [PurchaseGrant], user: String? = "u1") -> MembershipBook {
        var book = MembershipBook()
        if let user {
            _ = book.apply(MembershipCommand(commandId: "link", subscriptionKey: "s", action: .linkUser(UserLink(userId: user, via: UserLink.receiptUpload)),
                                             reason: "link", cause: cause))
        }
        for grant in grants {
            _ = book.apply(MembershipCommand(commandId: grant.purchaseId, subscriptionKey: "s", action: .purchase(grant), reason: "buy", cause: cause))
        }
        return book
    }

    private func plan(stored: MembershipBook, fresh: MembershipBook) -> (commands: [MembershipCommand], entries: [LedgerEntry], after: MembershipBook) {
        let commands = ReplayCompensation.commands(stored: stored.subscriptions["s"], fresh: fresh.subscriptions["s"]!, stage: .dedupe,
                                                   codeVersion: "v9", causes: [:], fallbackCause: cause, reasons: [:])
        var book = stored
        var entries: [LedgerEntry] = []
        for command in commands { entries += book.apply(command) }
        return (commands, entries, book)
    }

    func testNoDifferenceNoCommand() {
        let book = fold([grant("a", start: 0, end: 1000), grant("b", start: 1000, end: 2000)])
        let result = plan(stored: book, fresh: book)
        XCTAssertEqual(result.commands, [])
        XCTAssertEqual(ReplayDiff(entries: result.entries).entries, 0)
    }

    /// A restored purchase shows the transaction id of the copy seen first; a replay reading the copies
    /// in another order shows the other alias. That alone is no correction: nothing planned.
    func testAnotherAliasShownIsNoDifference() {
        var restored = grant("a", start: 0, end: 1000)
        restored.transactionId = "a-restored"
        let result = plan(stored: fold([grant("a", start: 0, end: 1000)]), fresh: fold([restored]))
        XCTAssertEqual(result.commands, [])
        var longer = restored
        longer.endMs = 2000
        XCTAssertEqual(plan(stored: fold([grant("a", start: 0, end: 1000)]), fresh: fold([longer])).commands.count, 1, "other facts still count")
    }

    func testASplitPurchaseIsTakenBackAndTheEntitlementMatchesTheFreshFold() {
        // The wrong rule granted a restore copy as a purchase of its own, shifted by a second.
        let stored = fold([grant("a", start: 0, end: 100_000), grant("a-copy", start: 1_000, end: 101_000)])
        let fresh = fold([grant("a", start: 0, end: 100_000)])
        let result = plan(stored: stored, fresh: fresh)
        XCTAssertEqual(result.commands.count, 1)
        XCTAssertEqual(result.after.userEntitlement("u1", group: "g"), fresh.userEntitlement("u1", group: "g"))
        XCTAssertEqual(result.entries.map(\.kind), [.cut])
        XCTAssertEqual(result.entries.first?.cutKind, .correction)
        XCTAssert(result.entries.allSatisfy { $0.reason.hasPrefix("replay of dedupe after a fix (code v9): ") }, "\(result.entries.map(\.reason))")
        let diff = ReplayDiff(entries: result.entries)
        XCTAssertEqual(diff.affectedOwners, ["u1"])
        XCTAssertEqual([diff.entriesAdded, diff.entriesCompensated, diff.entriesOther], [0, 1, 0])
        // Planned again on the corrected state: nothing more.
        XCTAssertEqual(plan(stored: result.after, fresh: fresh).commands, [])
    }

    /// A purchase the wrong code invented inside another's period (which it cut as its successor) and
    /// the fixed code drops: taken back, it replaces nothing, so the period it cut is whole again, as
    /// the fresh fold has it, and a second replay plans nothing.
    func testATakenBackPurchaseNoLongerCutsThePeriodItSuperseded() {
        var bogus = grant("b", start: 10_000, end: 400_000)
        bogus.productId = "p.1y"
        let stored = fold([grant("a", start: 0, end: 100_000), bogus])
        XCTAssertEqual(stored.userEntitlement("u1", group: "g"), [Interval(startMs: 0, endMs: 400_000)])
        let fresh = fold([grant("a", start: 0, end: 100_000)])
        let result = plan(stored: stored, fresh: fresh)
        XCTAssertEqual(result.after.userEntitlement("u1", group: "g"), [Interval(startMs: 0, endMs: 100_000)])
        XCTAssertEqual(result.after.userEntitlement("u1", group: "g"), fresh.userEntitlement("u1", group: "g"))
        XCTAssertEqual(plan(stored: result.after, fresh: fresh).commands, [], "a second replay writes nothing")
    }

    func testChangedFactsAreRestatedAndReconciled() {
        // The wrong rule: a crossgrade granted as a new period after the old one, which kept its whole period.
        let stored = fold([grant("a", start: 0, end: 100_000), grant("b", start: 100_000, end: 200_000)])
        let fresh = fold([grant("a", start: 0, end: 100_000, cut: Cut(atMs: 10_000, kind: .crossgrade)), grant("b", start: 10_000, end: 110_000)])
        let result = plan(stored: stored, fresh: fresh)
        XCTAssertEqual(result.after.userEntitlement("u1", group: "g"), [Interval(startMs: 0, endMs: 110_000)])
        XCTAssertEqual(result.after.userEntitlement("u1", group: "g"), fresh.userEntitlement("u1", group: "g"))
        let diff = ReplayDiff(entries: result.entries)
        XCTAssertGreaterThan(diff.entriesCompensated, 0)
        XCTAssertEqual(plan(stored: result.after, fresh: fresh).commands, [], "a second replay writes nothing")
    }

    func testConsumableCreditOfAMergedPurchaseIsDebited() {
        let stored = fold([grant("c1", start: 0, end: nil, kind: .consumable, credit: 5), grant("c1-copy", start: 0, end: nil, kind: .consumable, credit: 5)],
                          user: nil)
        let fresh = fold([grant("c1", start: 0, end: nil, kind: .consumable, credit: 5)], user: nil)
        let result = plan(stored: stored, fresh: fresh)
        XCTAssertEqual(result.entries.map(\.kind), [.debit])
        XCTAssertEqual(result.after.balance(owner: nil, subscription: "s", group: "g"), 5)
        XCTAssertEqual(ReplayDiff(entries: result.entries).affectedOwners, ["subscription:s"])
    }

    func testProgressLine() {
        let progress = ReplayProgress(phase: "reading", done: 500, total: 2000, elapsedSeconds: 2)
        XCTAssertEqual(progress.rate, 250)
        XCTAssertEqual(progress.etaSeconds, 6)
        XCTAssertEqual(progress.line(bar: 10), "reading  [##........] 500/2000 25% 250/s ETA 0:06")
        XCTAssertEqual(progress.line(bar: nil), "reading  500/2000 25% 250/s ETA 0:06")
        XCTAssertEqual(ReplayProgress(phase: "x", done: 0, total: 0, elapsedSeconds: 0).line(bar: 4), "x        [####] 0/0 100% 0/s")
    }

    func testWrongRules() throws {
        XCTAssertEqual(try WrongRules.parse(""), .none)
        let both = try WrongRules.parse("crossgrade-as-new-period,trust-transaction-id")
        XCTAssert(both.crossgradeAsNewPeriod)
        XCTAssertEqual(both.dedupe, .trustTransactionId)
        XCTAssertThrowsError(try WrongRules.parse("everything"))
        let old = grant("a", start: 0, end: 100_000, cut: Cut(atMs: 10_000, kind: .crossgrade))
        let new = grant("b", start: 10_000, end: 110_000)
        let commands = [old, new].map { MembershipCommand(commandId: $0.purchaseId, subscriptionKey: "s", action: .purchase($0), reason: "r", cause: cause) }
        XCTAssertEqual(WrongRules.none.applyToClassified(commands), commands)
        let wrong = both.applyToClassified(commands)
        guard case .purchase(let a) = wrong[0].action, case .purchase(let b) = wrong[1].action else { return XCTFail("\(wrong)") }
        XCTAssertNil(a.cut)
        XCTAssertEqual([b.startMs, b.endMs], [100_000, 200_000])
    }
}
