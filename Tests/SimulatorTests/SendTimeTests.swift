import AppleDecoding
import Domain
import Foundation
@testable import Simulator
import XCTest

/// Contract: every delivery is built from the world as it is at the delivery's own date. A receipt
/// dated T shows every purchase made by T and every cancellation in force at T, never a state the
/// simulator had when it planned the upload. (The 10,000-user run once had three users whose
/// storefront move planned the new subscription's receipt upload a year ahead: it showed their later
/// refunded vip purchase uncancelled, which StoreLedger rightly read as a newer statement reinstating it, R14.)
final class SendTimeTests: XCTestCase {
    static let pki = Result { try SimulatorPKI.generate() }

    func decoder() throws -> AppleInputDecoder {
        var config = AppleDecodingConfiguration()
        let root = try Self.pki.get().chain.root.certificate
        config.appleRoots = [root]
        config.receiptRoots = [root]
        config.bundleId = SimulatorCatalog.bundleId
        config.appAppleId = SimulatorSetup.appAppleId
        config.v1SharedSecrets = [SimulatorSetup.sharedSecret]
        return try config.makeDecoder()
    }

    func play(_ users: Range<Int>, seed: UInt64) throws -> (StoreState, [Delivery]) {
        try playPopulation(users, seed: seed, runId: 5, pki: try Self.pki.get())
    }

    /// Whether the truth says `t` stood cancelled at `atMs` (a reversed refund stood cancelled
    /// between the refund and its reversal).
    func cancelled(_ t: SimTransaction, at atMs: Int64) -> Bool {
        if let cut = t.cancellationMs { return cut <= atMs }
        if let reversal = t.reversal { return reversal.refundMs <= atMs && atMs < reversal.reversedMs }
        return false
    }

    func testEveryReceiptShowsTheWorldAtItsCreationDate() throws {
        let (state, deliveries) = try play(0..<400, seed: 11)
        let decoder = try decoder()
        var checked = 0, purchasesSeen = 0
        // A storefront move with a later purchase or refund on the same Apple ID is what went stale.
        XCTAssertTrue(state.users.values.contains { user in
            user.journey.contains { $0.contains("storefront") } && user.subscriptionIds.count > 2
        }, "the population has storefront moves on Apple IDs with other purchases")
        for delivery in deliveries where delivery.channel == .receiptUpload && !delivery.expectsRejection {
            let input = RawInput(source: .appReceipt, body: delivery.body, receivedAtMs: delivery.simMs, position: nil)
            guard case .success(let events) = decoder.decode(input) else { return XCTFail("\(delivery.label) does not decode") }
            guard let created = events.first?.statedAtMs else { continue }
            let shown = Dictionary(events.flatMap(\.transactions).map { ($0.transactionId, $0) }) { a, _ in a }
            let otids = Set(events.flatMap(\.transactions).map(\.originalTransactionId))
            guard let anyOtid = otids.first, let owner = state.subscriptions[anyOtid] else { continue }
            for subscription in state.subscriptions(ofUser: owner.userId, appleId: owner.appleIdIndex) where subscription.kind != .consumable {
                for t in subscription.transactions where t.purchaseMs <= created {
                    let copy = ([t.transactionId] + t.restoredIds).lazy.compactMap { shown[$0] }.first
                    guard let copy else {
                        XCTFail("\(delivery.label) (created \(AppleDates.readable(created))) lacks txn \(t.transactionId) bought \(AppleDates.readable(t.purchaseMs))")
                        continue
                    }
                    purchasesSeen += 1
                    XCTAssertEqual(copy.cancellationDateMs != nil, cancelled(t, at: created),
                                   "\(delivery.label) (created \(AppleDates.readable(created))): txn \(t.transactionId) cancellation \(copy.cancellationDateMs.map(String.init) ?? "none"), truth \(t.cancellationMs.map(String.init) ?? "none")")
                }
            }
            checked += 1
        }
        XCTAssertGreaterThan(checked, 1000)
        XCTAssertGreaterThan(purchasesSeen, checked)
    }
}
