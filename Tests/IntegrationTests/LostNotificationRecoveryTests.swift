import Foundation
import Simulator
import XCTest

/// Contract: a random population whose V2 notifications (the only notifications sent: V1 is off,
/// and apps upload a receipt only at purchase) lose 10 % for good — Apple never gets them
/// through, its history keeps them with their failed send attempts — leaves users wrong; one
/// `storeledger recover notifications --only-failures` over the window, with tokens from the real
/// signer process, feeds the lost ones back and the oracle then reports 0 mismatches.
final class LostNotificationRecoveryTests: XCTestCase {
    func testRecoveringOnlyFailuresMakesTheOracleReportNoMismatch() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        var population = PopulationConfig()
        population.users = 150
        population.seed = 16
        // Inside Apple's 180 days of notification history.
        population.startMs = nowMs - 120 * 86_400_000
        population.days = 110
        population.v1 = false
        population.uploadAfterRenewal = 0
        var driver = DriverConfig(ingestURL: api.sim.ingestURL)
        driver.lossShare = 0.1
        driver.history = api.server.state
        let run = PopulationSimulation(pki: api.sim.setup.pki, store: api.sim.store, population: population, driver: driver, cohortSize: 75)
        let (report, _) = try run.run(check: true, settleTimeout: 30) { print("[recovery] \($0)") }
        let lost = report.driver.lost
        let failed = api.server.state.notifications.filter { !$0.delivered }.count
        print("[recovery] \(report.driver); history \(api.server.state.notifications.count) (\(failed) failed); before recovery \(report.mismatchedUsers.count) users mismatched")
        let v2 = report.driver.byChannel["v2"] ?? 0
        XCTAssertGreaterThan(v2, 300, "the population must send enough V2 notifications")
        XCTAssertEqual(Double(lost) / Double(v2), 0.1, accuracy: 0.04, "about 10 % lost for good")
        XCTAssertGreaterThanOrEqual(failed, lost, "every lost notification is in Apple's history as failed")
        XCTAssertFalse(report.mismatches.isEmpty, "the losses must leave users wrong, or the test proves nothing")

        // A journey is played ahead (a renewal at the end of the last period is dated after the
        // simulated span, possibly after today), so the window reaches past now.
        let output = try RecoverNotificationsTests.run(
            ["recover", "notifications", "--from", String(population.startMs), "--to", String(nowMs + 400 * 86_400_000), "--only-failures", "--json",
             "--database-url", api.sim.cluster.databaseURL], environment: api.cliEnvironment)
        struct Reports: Decodable {
            struct Report: Decodable { var environment: String; var found: Int; var fed: Int; var alreadyIngested: Int; var error: String? }
            var recovery: [Report]
        }
        let reports = try JSONDecoder().decode(Reports.self, from: Data(output.utf8)).recovery
        print("[recovery] \(output)")
        XCTAssertTrue(reports.allSatisfy { $0.error == nil }, output)
        XCTAssertEqual(reports.map(\.found).reduce(0, +), failed, output)
        XCTAssertGreaterThanOrEqual(reports.map(\.fed).reduce(0, +), lost, "every notification never ingested is fed")

        let after = run.settle(users: run.users, timeout: 120) { print("[recovery] \($0)") }
        for user in Set(after.map(\.userId)).sorted().prefix(3) { print(run.explain(user, mismatches: after, driver: nil)) }
        XCTAssertEqual(after.count, 0, "the oracle reports 0 mismatches after recovery")
    }
}
