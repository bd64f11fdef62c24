@testable import Domain
import XCTest

/// Inputs FuzzPipeline (scripts/fuzz.sh) found: each once broke an invariant of the pure path and
/// must keep holding.
final class FuzzRegressionTests: XCTestCase {
    /// FuzzPipeline, 2026-12-01, on its first seed: a REFUND applied and then redelivered (a crash
    /// between the PostgreSQL commit and the offset commit) added a second ledger line, "the
    /// cancellation … was already applied". A redelivered command must change nothing.
    func testRedeliveredRefundAddsNoLedgerEntry() {
        var book = MembershipBook()
        let buy = Apple.period("10", otid: "s1", start: t0)
        var refunded = buy
        refunded.cancellationDateMs = t0 + 15 * day
        refunded.cancellationReason = "0"
        for (index, transaction) in [buy, refunded].enumerated() {
            let event = Apple.v1(index == 0 ? "INITIAL_BUY" : "REFUND", otid: "s1", [transaction], id: "e\(index)")
            let change = PurchaseChange(purchaseId: "s1|p", kind: index == 0 ? .new : .changed, transaction: transaction, aliases: ["10"])
            for command in classify(UniqueEvent(event: event, purchases: [change]), catalog: TestCatalog.standard) {
                let first = book.apply(command)
                let before = book
                XCTAssertEqual(book.apply(command), [], "redelivered \(command.commandId) after \(first.map(\.kind))")
                XCTAssertEqual(book, before)
            }
        }
        XCTAssertEqual(book.subscriptions["s1"]?.entitlement(group: "vip"), [interval(t0, t0 + 15 * day)])
    }

    /// The same for a purchase that arrives already cancelled: its grant is cut from the start.
    func testRedeliveredCancelledPurchaseAddsNoLedgerEntry() {
        var book = MembershipBook()
        var transaction = Apple.period("20", otid: "s2", start: t0)
        transaction.cancellationDateMs = t0 + 10 * day
        let event = Apple.v1("REFUND", otid: "s2", [transaction], id: "e-cancelled")
        let change = PurchaseChange(purchaseId: "s2|p", kind: .new, transaction: transaction, aliases: ["20"])
        for command in classify(UniqueEvent(event: event, purchases: [change]), catalog: TestCatalog.standard) {
            _ = book.apply(command)
            XCTAssertEqual(book.apply(command), [], "redelivered \(command.commandId)")
        }
        XCTAssertEqual(book.subscriptions["s2"]?.entitlement(group: "vip"), [interval(t0, t0 + 10 * day)])
    }
}
