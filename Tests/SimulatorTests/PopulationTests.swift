import AppleDecoding
import Domain
import Foundation
@testable import Simulator
import XCTest

/// Contract: the random population is deterministic for a seed, plays every journey kind issue 5
/// lists, keeps each user's ids apart, and every delivery it produces decodes (so nothing it
/// sends is refused by StoreLedger's decoders for the simulator's own reasons).
final class PopulationTests: XCTestCase {
    static let pki = Result { try SimulatorPKI.generate() }

    func play(_ users: Range<Int>, seed: UInt64 = 7) throws -> (StoreState, [Delivery]) {
        try playPopulation(users, seed: seed, runId: 3, pki: try Self.pki.get())
    }

    func testSameSeedSameWorld() throws {
        let (a, da) = try play(0..<20)
        let (b, db) = try play(0..<20)
        XCTAssertEqual(da.map(\.label), db.map(\.label))
        XCTAssertEqual(a.users.keys.sorted(), b.users.keys.sorted())
        XCTAssertEqual(a.users.values.map(\.journey).sorted { $0.joined() < $1.joined() },
                       b.users.values.map(\.journey).sorted { $0.joined() < $1.joined() })
        let (_, dc) = try play(0..<20, seed: 8)
        XCTAssertNotEqual(da.map(\.label), dc.map(\.label))
    }

    func testEveryJourneyKindOccursAndIdsNeverCollide() throws {
        let (state, deliveries) = try play(0..<300)
        let journeys = state.users.values.flatMap(\.journey).joined(separator: "\n")
        for marker in ["freeTrial", "introPrice", "renewal ", "restore on a new device", "switch vip.a.1m -> vip.b.1m", "-> vip.pro.1m now",
                       "-> vip.a.3m from the next renewal", "-> vip.lite.1m from the next renewal", "and auto-renew off", "refund of txn",
                       "after its period ended", "auto-renew off", "auto-renew on", "renewal charge failed", "grace period", "billing recovered",
                       "storefront USA -> CAN", "second Apple ID", "promotional(\"vip.winback\")", "buy lifetime.pro", "buy pass.30d", "buy coins.100",
                       "resubscribe", "Sandbox"] {
            XCTAssertTrue(journeys.contains(marker), "no journey with \(marker)")
        }
        let transactionIds = state.subscriptions.values.flatMap { $0.transactions.flatMap { [$0.transactionId] + $0.restoredIds } }
        XCTAssertEqual(transactionIds.count, Set(transactionIds).count, "transaction ids are unique")
        XCTAssertEqual(state.users.values.filter { !$0.appleIds.isEmpty }.count, 300, "each player is one user with Apple IDs")
        XCTAssertTrue(journeys.contains("signs in to the app as another account"))
        XCTAssertTrue(journeys.contains("also buys in"))
        let channels = Dictionary(grouping: deliveries, by: \.channel).mapValues(\.count)
        XCTAssertEqual(Set(channels.keys), Set(Delivery.Channel.allCases))
        XCTAssertTrue(deliveries.contains { $0.label.contains("pre-2021 shape") })
        XCTAssertTrue(deliveries.contains { $0.label.contains("uploaded again") })
    }

    func testEveryDeliveryDecodes() throws {
        let (_, deliveries) = try play(0..<60)
        var config = AppleDecodingConfiguration()
        let root = try Self.pki.get().chain.root.certificate
        config.appleRoots = [root]
        config.receiptRoots = [root]
        config.bundleId = SimulatorCatalog.bundleId
        config.appAppleId = SimulatorSetup.appAppleId
        config.v1SharedSecrets = [SimulatorSetup.sharedSecret]
        let decoder = try config.makeDecoder()
        for delivery in deliveries where !delivery.expectsRejection {
            let input = RawInput(source: delivery.channel == .receiptUpload ? .appReceipt : .appStoreNotification,
                                 body: delivery.body, receivedAtMs: delivery.simMs, position: nil)
            if case .failure(let failure) = decoder.decode(input) { XCTFail("\(delivery.label): \(failure)") }
        }
    }

    func testRetrySchedulesAreApples() {
        func delivery(_ channel: Delivery.Channel, _ environment: SimEnvironment) -> Delivery {
            Delivery(channel: channel, body: [], simMs: 0, userId: "u", label: "", environment: environment)
        }
        XCTAssertEqual(delivery(.notificationV2, .production).retryDelaysHours, [1, 12, 24, 48, 72])
        XCTAssertEqual(delivery(.notificationV1, .production).retryDelaysHours, [6, 24, 48])
        XCTAssertEqual(delivery(.notificationV2, .sandbox).retryDelaysHours, [])
        XCTAssertEqual(delivery(.receiptUpload, .production).path, "/v1/receipts")
    }
}
