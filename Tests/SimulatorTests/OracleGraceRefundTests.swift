@testable import Simulator
import XCTest

/// The oracle learns that a refund during a billing grace period ends the grace period there.
final class OracleGraceRefundTests: XCTestCase {
    let t0: Int64 = 1_740_823_200_000
    let day: Int64 = 86_400_000

    func testRefundDuringTheGracePeriodEndsItAtTheRefund() throws {
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, appAppleId: SimulatorSetup.appAppleId,
                                 sharedSecret: SimulatorSetup.sharedSecret, catalog: SimulatorCatalog.standard, runId: 1)
        var s = StoreState(config: config)
        s.addUser("u")
        _ = try s.addAppleID(user: "u")
        let t = try s.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let end = try XCTUnwrap(t.expiresMs)
        try s.failRenewal(t.originalTransactionId, atMs: end, graceMs: 6 * day)
        func spans() -> [Span] { Oracle.expectation(for: s.users["u"]!, in: s).groups["vip"]?.spans ?? [] }
        XCTAssertEqual(spans(), [Span(startMs: t0, endMs: end + 6 * day)])
        let recovered = try s.recover(t.originalTransactionId, atMs: end + day)
        try s.refund(t.originalTransactionId, transactionId: recovered.transactionId, atMs: end + 2 * day)
        XCTAssertEqual(spans(), [Span(startMs: t0, endMs: end + 2 * day)], "neither the recovered period nor the grace runs past the refund")
    }
}
