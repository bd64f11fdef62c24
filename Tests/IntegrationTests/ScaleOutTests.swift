import Foundation
import Runtime
import XCTest

/// Contract (issue 13): every stage runs as three members of its consumer group (what
/// `storeledger dev --workers decode=3,dedupe=3,classify=3,membership=3` starts), and while a
/// simulator population flows through ingest, members leave (SIGTERM: each finishes and commits
/// its batch, leaves the group and exits 0 by itself) and new ones join, one change at a time,
/// every stage and the first members included. Each change rebalances the group (eager `range`:
/// every partition restarts from its committed offset); the test waits for the group to settle
/// (every member ready again; for the stages with state, the leaver's partitions claimed by the
/// members left, in `partition_owners`) and prints that pause. Afterwards every group's lag is 0, the
/// oracle finds no user whose membership differs, no ledger entry exists twice, and every raw
/// record ingest acknowledged was decoded or dead-lettered: nothing lost or doubled.
final class ScaleOutTests: XCTestCase {
    func testThreeMembersPerStageJoinAndLeaveDuringAPopulation() throws {
        let sim = try SimulationCluster()
        defer { sim.stop() }
        let cluster = sim.cluster
        for stage in Cluster.stages {
            try cluster.addMember(stage)
            try cluster.addMember(stage)
        }
        let ready = try waitUntilMembersReady(cluster)
        populationProgress("scale", "3 members per stage ready after \(formatSeconds(ready)) s")
        XCTAssertEqual(Cluster.stages.map { cluster.members(of: $0).count }, [3, 3, 3, 3])

        let population = BackgroundPopulation(sim, users: 12, seed: 13, ratePerSecond: 12, tag: "scale")
        population.start()

        // One change at a time, cycling over the stages: a member leaves, then a new one joins.
        var changes = 0
        var pauses: [Double] = []
        var stage = 0
        while changes < 8 || !population.lastCohortQueued {
            let name = Cluster.stages[stage % Cluster.stages.count]
            let members = cluster.members(of: name)
            // The oldest member leaves (the one the cluster started first, then the added ones).
            let leaving = try XCTUnwrap(members.first)
            let leaverPid = try XCTUnwrap(cluster.supervisor.pid(of: leaving))
            let started = Date()
            let status = cluster.removeMember(leaving)
            XCTAssertEqual(status, 0, "\(leaving) stopped by itself after committing its work")
            if ["dedupe", "membership"].contains(name) {
                // Stages with state claim what they are assigned (partition fences): the leaver's
                // partitions belong to the remaining members once none is recorded as its own.
                try waitUntil("the members left in \(name) claim \(leaving)'s partitions", timeout: 90, interval: 0.1) {
                    let owned = try? cluster.database().query("""
                        SELECT count(*)::bigint AS n FROM partition_owners
                        WHERE group_id = \("storeledger-\(name)") AND owner LIKE \("%/\(leaverPid)")
                        """).first?.int64("n")
                    return owned == 0
                }
            }
            pauses.append(try waitUntilMembersReady(cluster, since: started))
            let joined = try cluster.addMember(name)
            let joining = Date()
            pauses.append(try waitUntilMembersReady(cluster, since: joining))
            populationProgress("scale", "\(leaving) left (exit \(status.map(String.init) ?? "none")), \(joined) joined; group settled \(formatSeconds(pauses[pauses.count - 2])) s after the leave\(["dedupe", "membership"].contains(name) ? " (partitions claimed by the others)" : " (members ready)"), \(formatSeconds(pauses[pauses.count - 1])) s after the join")
            changes += 2
            stage += 1
            if changes > 40 { break }  // the population is not sent: finish() below fails
        }
        XCTAssertEqual(Cluster.stages.map { cluster.members(of: $0).count }, [3, 3, 3, 3])
        let (simulation, driver) = try population.finish(timeout: 600)
        populationProgress("scale", "\(changes) membership changes during the population; group settled after each in at most \(formatSeconds(pauses.max() ?? 0)) s (median \(formatSeconds(pauses.sorted()[pauses.count / 2])) s)")
        try population.verify(cluster, report: simulation, driver: driver)
    }

    /// Waits until every member of every stage answers /readyz 200 (it holds partitions, nothing
    /// paused); returns the seconds since `since`.
    @discardableResult
    private func waitUntilMembersReady(_ cluster: Cluster, since: Date = Date()) throws -> Double {
        let roles = Cluster.stages.flatMap { cluster.members(of: $0) }
        try waitUntil("every member of every stage is ready (\(roles.joined(separator: ",")))", timeout: 90, interval: 0.1) {
            roles.allSatisfy { (try? HTTP.get("\(cluster.adminURLs[$0]!)/readyz", timeout: 2).status) == 200 }
        }
        return Date().timeIntervalSince(since)
    }
}

func formatSeconds(_ seconds: Double) -> String { String(format: "%.1f", seconds) }
