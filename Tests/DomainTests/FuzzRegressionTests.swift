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

    /// ChaosTests, 2026-12-01: a consumable credited and its refund debited twice. Classify, killed
    /// after publishing a batch but before committing its offsets, published the purchase and the
    /// refund commands again behind the first copies; the second purchase command put back the grant
    /// without its refund. Older news about a purchase (an earlier decoded position) changes nothing,
    /// for consumables, subscriptions and a later expiry alike; equal positions (a replay) still apply.
    func testARedeliveredPrefixOfCommandsAddsNoLedgerEntry() {
        let coins = Apple.tx("C1", otid: "C1", product: "coins.100", purchase: t0)
        var refundedCoins = coins
        refundedCoins.cancellationDateMs = t0 + day
        let period = Apple.period("10", otid: "s1", start: t0)
        var refundedPeriod = period
        refundedPeriod.cancellationDateMs = t0 + 15 * day
        var extended = period
        extended.expiresDateMs = t0 + 40 * day
        let histories: [(String, String, [TransactionFacts])] = [
            ("C1", "C1|p", [coins, refundedCoins]), ("s1", "s1|p", [period, refundedPeriod]), ("s1", "s1|p", [period, extended]),
        ]
        for (otid, purchase, facts) in histories {
            var book = MembershipBook()
            var commands: [MembershipCommand] = []
            var ledger: [LedgerEntry] = []
            for (offset, transaction) in facts.enumerated() {
                let event = Apple.v1(offset == 0 ? "INITIAL_BUY" : "REFUND", otid: otid, [transaction], id: "\(otid)-\(offset)")
                let change = PurchaseChange(purchaseId: purchase, kind: offset == 0 ? .new : .changed, transaction: transaction,
                                            aliases: [transaction.transactionId])
                let position = RecordPosition(topic: Topic.decoded, partition: 3, offset: Int64(40 + offset))
                let step = classify(UniqueEvent(event: event, purchases: [change], decodedPosition: position), catalog: TestCatalog.standard)
                commands += step
                for command in step { ledger += book.apply(command) }
            }
            let settled = book
            for command in commands {
                XCTAssertEqual(book.apply(command), [], "\(otid): redelivered \(command.commandId) after newer news")
            }
            XCTAssertEqual(book, settled)
            XCTAssertEqual(ledger.count, Set(ledger.map { "\($0.commandId) \($0.kind) \(String(describing: $0.interval)) \(String(describing: $0.amount))" }).count)
            // A replay of the latest input under a corrected rule still reaches the state (a day more).
            guard let latest = commands.last(where: { if case .purchase = $0.action { true } else { false } }),
                  case .purchase(var grant) = latest.action, let end = grant.endMs, grant.cut == nil else { continue }
            grant.endMs = end + day
            var corrected = latest
            corrected.action = .purchase(grant)
            XCTAssertEqual(book.apply(corrected).map(\.kind), [.extend], "\(otid): a corrected command at the same position applies")
        }
    }
}
