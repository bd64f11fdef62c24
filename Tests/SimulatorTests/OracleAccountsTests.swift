import Domain
import Foundation
@testable import Simulator
import XCTest

/// Contract: the oracle follows restores to another account (the account of the latest receipt
/// upload showing a subscription owns all of it, R6/R17) and the catalog's `nonProductionPurchases`
/// (R18); the population plays both, and sends the uploads of users with two accounts in order.
final class OracleAccountsTests: XCTestCase {
    let t0: Int64 = 1_740_823_200_000
    let day: Int64 = 86_400_000

    func state(_ catalog: Catalog = SimulatorCatalog.standard) -> StoreState {
        var state = StoreState(config: StoreConfig(bundleId: SimulatorCatalog.bundleId, catalog: catalog, runId: 1))
        state.addUser("a")
        _ = try? state.addAppleID(user: "a")
        return state
    }

    func spans(_ state: StoreState, _ user: String, _ group: String = "vip") -> [Span] {
        state.users[user].flatMap { Oracle.expectation(for: $0, in: state).groups[group]?.spans } ?? []
    }

    func testARestoreOnAnotherAccountMovesEverySubscriptionItShowsThere() throws {
        var s = state()
        let vip = try s.purchase(user: "a", appleId: 0, productId: "vip.a.1m", atMs: t0)
        s.recordUpload(account: "a", user: "a", appleId: 0, receiptMs: t0, claimMs: t0)
        try s.renew(vip.originalTransactionId)
        XCTAssertEqual(spans(s, "a"), [Span(startMs: t0, endMs: t0 + 60 * day)])
        try s.signIn(account: "b", user: "a", appleId: 0, atMs: t0 + 40 * day)
        s.recordUpload(account: "b", user: "a", appleId: 0, receiptMs: t0 + 40 * day, claimMs: t0 + 40 * day)
        try s.renew(vip.originalTransactionId)
        XCTAssertEqual(spans(s, "a"), [], "the first account holds nothing of it any more")
        XCTAssertEqual(spans(s, "b"), [Span(startMs: t0, endMs: t0 + 90 * day)], "the whole subscription, renewals included")
        // A purchase after the sign-in carries the new account's token, which claims it before any upload.
        let pass = try s.purchase(user: "a", appleId: 0, productId: "pass.30d", atMs: t0 + 50 * day)
        XCTAssertEqual(pass.appAccountToken, StoreState.accountToken("b"))
        XCTAssertEqual(Oracle.owner(of: try s.subscription(pass.originalTransactionId), in: s), "b")
        // The first account uploads again later: it claims everything back.
        try s.signIn(account: "a", user: "a", appleId: 0, atMs: t0 + 60 * day)
        s.recordUpload(account: "a", user: "a", appleId: 0, receiptMs: t0 + 60 * day, claimMs: t0 + 60 * day)
        XCTAssertEqual(spans(s, "b"), [])
        XCTAssertEqual(spans(s, "a"), [Span(startMs: t0, endMs: t0 + 90 * day)])
    }

    func testNonProductionPurchasesCountOnlyWhenTheCatalogGrantsThem() throws {
        var recording = SimulatorCatalog.standard
        recording.nonProductionPurchases = .record
        for (catalog, expected) in [(SimulatorCatalog.standard, 2), (recording, 1)] {
            var s = state(catalog)
            try s.purchase(user: "a", appleId: 0, productId: "vip.a.1m", atMs: t0)
            let sandbox = try s.addAppleID(user: "a", environment: .sandbox)
            try s.purchase(user: "a", appleId: sandbox, productId: "vip.a.1m", atMs: t0 + 100 * day)
            XCTAssertEqual(spans(s, "a").count, expected, "\(catalog.nonProductionPurchases)")
        }
    }

    func testThePopulationRestoresOnOtherAccountsAndBuysInBothEnvironments() throws {
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, appAppleId: SimulatorSetup.appAppleId,
                                 sharedSecret: SimulatorSetup.sharedSecret, catalog: SimulatorCatalog.standard, runId: 4)
        let emitter = WireEmitter(pki: try SendTimeTests.pki.get(), config: config)
        var moved = 0, bothEnvironments = 0
        for index in 0..<300 {
            var player = JourneyPlayer(config: PopulationConfig(), emitter: emitter, userIndex: index)
            let (truth, sent) = try player.play()
            let journey = truth.users[player.userId]!.journey.joined(separator: "\n")
            if journey.contains("also buys in") {
                bothEnvironments += 1
                XCTAssertEqual(Set(truth.users[player.userId]!.appleIds.map(\.environment)).count, 2, journey)
            }
            guard player.accounts.count > 1 else {
                XCTAssertFalse(sent.contains(where: \.keepsOrder))
                continue
            }
            let other = player.accounts[1]
            XCTAssertNotEqual(other, player.userId)
            XCTAssertTrue(sent.filter { $0.channel == .receiptUpload }.allSatisfy(\.keepsOrder), "uploads that decide an owner keep their order")
            XCTAssertTrue(sent.contains { $0.label.contains("as account \(other)") })
            let owned = truth.subscriptions.values.filter { Oracle.owner(of: $0, in: truth) == other }
            XCTAssertFalse(owned.isEmpty, "the other account owns what it restored:\n\(journey)")
            moved += 1
        }
        XCTAssertGreaterThan(moved, 2)
        XCTAssertGreaterThan(bothEnvironments, 2)
    }
}
