import Domain
import Foundation
import Postgres
import Simulator
import XCTest

/// Contract: the oracle catches pipeline errors. (1) The classify worker is given a copy of the
/// catalog with one rule broken (the non-renewing `pass.30d` lasts 31 days instead of 30): after a
/// random population, `--check` reports exactly the users whose entitlement that rule changes,
/// and nobody else. (2) A wrong entitlement written into the membership projection the API
/// serves is reported for that user alone.
final class SimulationOracleTests: XCTestCase {
    func testCheckReportsExactlyTheUsersABrokenRuleOrAWrongEntryAffects() throws {
        var broken = SimulatorCatalog.standard
        let index = try XCTUnwrap(broken.products.firstIndex { $0.id == "pass.30d" })
        broken.products[index].durationDays = 31
        let brokenPath = NSTemporaryDirectory() + "broken-catalog-\(UUID().uuidString).json"
        try SimulatorCatalog.json(broken).write(to: URL(fileURLWithPath: brokenPath))
        defer { try? FileManager.default.removeItem(atPath: brokenPath) }

        let sim = try SimulationCluster(extraEnvironment: ["STORELEDGER_CATALOG": brokenPath])
        defer { sim.stop() }
        var population = PopulationConfig()
        population.users = 120
        population.seed = 11
        let run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population,
                                       driver: DriverConfig(ingestURL: sim.ingestURL), cohortSize: 60)
        let (report, _) = try run.run(check: true, settleTimeout: 20) { print("[oracle] \($0)") }

        // Who should be affected: users whose expectation changes when passes last a day longer.
        let affected: Set<String> = sim.store.read { state in
            var longer = state
            for (otid, subscription) in state.subscriptions where subscription.kind == .nonRenewing {
                var changed = subscription
                for i in changed.transactions.indices { changed.transactions[i].durationMs! += 86_400_000 }
                longer.replace(changed)
                _ = otid
            }
            return Set(run.users.filter { user in
                Oracle.expectation(for: state.users[user]!, in: state) != Oracle.expectation(for: longer.users[user]!, in: longer)
            })
        }
        print("[oracle] affected by the broken rule: \(affected.count); reported: \(report.mismatchedUsers.count)")
        XCTAssertGreaterThanOrEqual(affected.count, 2, "the population must exercise the broken rule")
        XCTAssertEqual(report.mismatchedUsers, affected)
        XCTAssertTrue(report.mismatches.allSatisfy { $0.group == "pass" }, "only the pass group differs")
        if let sample = report.mismatches.first { print(run.explain(sample.userId, mismatches: report.mismatches, driver: nil)) }

        // (2) A wrong entry in the projection: one correct user's vip membership loses its intervals.
        let victim = try XCTUnwrap(run.users.first { user in
            !affected.contains(user) && sim.store.read { Oracle.expectation(for: $0.users[user]!, in: $0).groups["vip"] != nil }
        })
        let database = try sim.cluster.database()
        _ = try database.execute("UPDATE user_membership SET view = jsonb_set(view, '{intervals}', '[]'::jsonb) WHERE user_id = \(victim) AND group_id = 'vip'")
        let again = run.settle(users: run.users.filter { !affected.contains($0) }, timeout: 3)
        XCTAssertEqual(Set(again.map(\.userId)), [victim])
        XCTAssertEqual(again.first?.group, "vip")
    }
}
