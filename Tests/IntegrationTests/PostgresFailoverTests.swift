import Foundation
import Postgres
import Runtime
import XCTest

/// Contract (issue 13): PostgreSQL runs as a primary with a synchronous streaming standby
/// (`pg_basebackup -R`), and ingest and every worker use the multi-host `DATABASE_URL` with
/// `target_session_attrs=read-write`. Mid-population the primary dies (immediate shutdown, it
/// never returns) and the standby is promoted. The workers wait out the outage and reconnect to
/// the promoted standby by themselves (libpq tries each host; the one accepting writes wins), with
/// the same pids: nothing restarts them. Afterwards every group's lag is 0, the oracle finds no
/// user whose membership differs, no ledger entry exists twice, every raw record was decoded or
/// dead-lettered, and the promoted server holds every ledger entry written before the failover.
final class PostgresFailoverTests: XCTestCase {
    func testStandbyPromotedMidPopulationLosesNothing() throws {
        let sim = try SimulationCluster(standby: true)
        defer { sim.stop() }
        let cluster = sim.cluster
        let standby = try XCTUnwrap(cluster.standby)
        XCTAssertTrue(cluster.databaseURL.contains("target_session_attrs=read-write"))
        let pids = (Cluster.stages + Cluster.relays + ["ingest"]).map { cluster.supervisor.pid(of: $0) }

        let population = BackgroundPopulation(sim, users: 10, seed: 21, ratePerSecond: 12, tag: "failover")
        population.start()
        var before: Int64 = 0
        try waitUntil("the ledger fills on the primary", timeout: 120, interval: 0.2) {
            before = (try? cluster.database().query("SELECT count(*)::bigint AS n FROM ledger").first?.int64("n")) ?? 0
            return before >= 20
        }
        // Entries the stages committed (and whose offsets they may have committed) before the failover.
        let committedIds = try cluster.database().query("SELECT entry_id FROM ledger ORDER BY entry_id").map { try $0.int64("entry_id") }
        XCTAssertFalse(population.isDone, "the failover happens mid-population")
        let promotion = try cluster.failOver()
        let failedOver = Date()
        populationProgress("failover", "primary crashed with \(committedIds.count) ledger entries; standby promoted in \(formatSeconds(promotion)) s")

        let promoted = try PGConnection(url: standby.url)
        defer { promoted.close() }
        XCTAssertEqual(try promoted.query("SELECT pg_is_in_recovery() AS r").first?.bool("r"), false, "the standby is the primary now")
        try waitUntil("the ledger grows on the promoted standby", timeout: 120, interval: 0.2) {
            ((try? promoted.query("SELECT count(*)::bigint AS n FROM ledger").first?.int64("n")) ?? 0) > Int64(committedIds.count)
        }
        populationProgress("failover", "the first new ledger entry on the promoted standby \(formatSeconds(Date().timeIntervalSince(failedOver))) s after the failover")

        let (simulation, driver) = try population.finish(timeout: 600)
        try population.verify(cluster, report: simulation, driver: driver)
        let kept = try promoted.query("SELECT count(*)::bigint AS n FROM ledger WHERE entry_id = ANY(\(committedIds))").first?.int64("n")
        XCTAssertEqual(kept, Int64(committedIds.count), "every entry committed before the failover is on the promoted server")
        try cluster.waitUntilReady(timeout: 60)
        XCTAssertEqual((Cluster.stages + Cluster.relays + ["ingest"]).map { cluster.supervisor.pid(of: $0) }, pids, "the same processes carried on")
        XCTAssertEqual(Cluster.stages.map { cluster.supervisor.restarts(of: $0) }, [0, 0, 0, 0], "no worker died")
    }
}
