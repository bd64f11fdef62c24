import Domain
import Foundation
import Kafka
import Simulator
import Synchronization
import XCTest

/// A simulator population sent through ingest on a thread of its own while a test changes the
/// system underneath (members joining and leaving, a PostgreSQL failover), then the checks every
/// such test ends with: lag 0 in every group, the oracle, no duplicate ledger entry, every raw
/// record decoded or dead-lettered (ChaosTests' `Accounting`).
final class BackgroundPopulation: Sendable {
    let run: PopulationSimulation
    let outcome = RunOutcome()
    private let lastCohort = Atomic<Bool>(false)
    private let users: Int
    private let tag: String

    init(_ sim: SimulationCluster, users: Int, seed: UInt64, ratePerSecond: Double, tag: String) {
        self.users = users
        self.tag = tag
        var population = PopulationConfig()
        population.users = users
        population.seed = seed
        var driver = DriverConfig(ingestURL: sim.ingestURL)
        driver.connections = 4
        driver.ratePerSecond = ratePerSecond
        // A short queue: once the last cohort is submitted nearly everything is sent.
        driver.maxQueued = 20
        run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population, driver: driver,
                                   cohortSize: 10, maxLag: 30)
    }

    func start() {
        let thread = Thread { [self] in
            outcome.set(Result {
                try run.run(check: false) { [self] line in
                    if line.hasPrefix("generated \(users)/\(users) ") { lastCohort.store(true, ordering: .releasing) }
                    populationProgress(tag, line)
                }
            })
        }
        thread.start()
    }

    /// The last cohort is queued: what the driver still holds goes out within seconds.
    var lastCohortQueued: Bool { lastCohort.load(ordering: .acquiring) }
    var isDone: Bool { outcome.isDone }

    /// Waits for the run's end and returns its report and driver.
    func finish(timeout: TimeInterval) throws -> (SimulationReport, Driver) {
        XCTAssertTrue(outcome.wait(timeout: timeout), "the population finished sending")
        return try XCTUnwrap(outcome.value).get()
    }

    /// Every group's lag back to 0, every user equal to the oracle, no ledger entry twice, every raw
    /// record accounted for (each asserted here).
    func verify(_ cluster: Cluster, report simulation: SimulationReport, driver: Driver, file: StaticString = #filePath, line: UInt = #line) throws {
        try waitForZeroLag(cluster, timeout: 180)
        XCTAssertEqual(simulation.driver.undelivered, 0, "every delivery was accepted in the end", file: file, line: line)
        let mismatches = run.settle(users: run.users, timeout: 60) { [tag] in populationProgress(tag, $0) }
        for user in Set(mismatches.map(\.userId)).sorted().prefix(5) { populationProgress(tag, run.explain(user, mismatches: mismatches, driver: driver)) }
        XCTAssertEqual(Set(mismatches.map(\.userId)).count, 0, "users whose membership differs from the oracle", file: file, line: line)
        let duplicates = try LedgerDuplicates(cluster)
        for entry in duplicates.lines { populationProgress(tag, "duplicate ledger entry: \(entry)") }
        if duplicates.groups != 0 {
            // Which copies of the commands reached membership: two records (an upstream redelivery)
            // or one record applied twice.
            let commands = try cluster.readTopic(Topic.commands, atLeast: 1)
            for id in duplicates.commandIds {
                let copies = commands.filter { record in
                    (try? TopicRecords.decodeCommand(record.value))?.commandId == id
                }
                populationProgress(tag, "command \(id): \(copies.count) record(s) on \(Topic.commands) at \(copies.map { "\($0.partition)@\($0.offset)" }.joined(separator: ", "))")
            }
        }
        XCTAssertEqual(duplicates.groups, 0, "ledger entries with the same user, cause, interval and kind", file: file, line: line)
        let accounting = try Accounting(cluster, expectedRaw: simulation.driver.accepted)
        populationProgress(tag, "\(run.users.count) accounts, \(simulation.deliveries) deliveries, \(accounting.raw.count) raw records, \(accounting.decodedSources.count) decoded, \(accounting.deadLettered.count) dead-lettered by decode")
        XCTAssertGreaterThanOrEqual(accounting.raw.count, simulation.driver.accepted, "a raw record for every 200", file: file, line: line)
        XCTAssertEqual(accounting.unaccounted, [], "raw records neither decoded nor dead-lettered", file: file, line: line)
    }
}

/// Waits until every stage's consumer group has committed up to each partition's end.
func waitForZeroLag(_ cluster: Cluster, timeout: TimeInterval) throws {
    let groups: [(String, [String])] = [("storeledger-decode", [Topic.notificationsRaw, Topic.receiptsRaw]),
                                        ("storeledger-dedupe", [Topic.decoded]),
                                        ("storeledger-classify", [Topic.unique]),
                                        ("storeledger-membership", [Topic.commands])]
    let lags = try groups.map { try GroupLag(config: cluster.kafka(clientId: "lag-check"), groupId: $0.0) }
    try waitUntil("every group's lag is 0", timeout: timeout, interval: 0.5) {
        groups.indices.allSatisfy { index in
            ((try? lags[index].lag(topics: groups[index].1, partitions: 4).values.reduce(0, +)) ?? -1) == 0
        }
    }
}

/// Ledger entries written twice: the same subscription, user, kind, purchase, interval and cause.
struct LedgerDuplicates {
    let groups: Int64
    /// Up to 10 of the entries involved, for the failure message.
    let lines: [String]
    /// The commands that wrote them.
    let commandIds: Set<String>

    init(_ cluster: Cluster) throws {
        let db = try cluster.database()
        defer { db.close() }
        groups = try db.query("""
            SELECT count(*)::bigint AS n FROM (
                SELECT 1 FROM ledger
                GROUP BY subscription_key, user_id, kind, purchase_id, interval_start_ms, interval_end_ms, cause
                HAVING count(*) > 1) AS twice
            """).first?.int64("n") ?? -1
        guard groups != 0 else { lines = []; commandIds = []; return }
        let rows = try db.query("""
            SELECT entry_id, subscription_key, kind, reason, command_id, cause::text AS cause FROM ledger
            WHERE (subscription_key, coalesce(user_id, ''), kind, coalesce(purchase_id, ''), coalesce(interval_start_ms, -1), coalesce(interval_end_ms, -1), cause::text) IN (
                SELECT subscription_key, coalesce(user_id, ''), kind, coalesce(purchase_id, ''), coalesce(interval_start_ms, -1), coalesce(interval_end_ms, -1), cause::text FROM ledger
                GROUP BY subscription_key, user_id, kind, purchase_id, interval_start_ms, interval_end_ms, cause HAVING count(*) > 1)
            ORDER BY entry_id LIMIT 10
            """)
        commandIds = Set(try rows.map { try $0.string("command_id") })
        lines = try rows.map { row in
            "\(try row.int64("entry_id")) \(try row.string("kind")) \(try row.string("subscription_key")) \(try row.string("reason")) command \(try row.string("command_id")) cause \(try row.string("cause"))"
        }
    }
}

/// Progress on standard error, unbuffered: it survives a crash of the test process.
func populationProgress(_ tag: String, _ line: String) {
    FileHandle.standardError.write(Data("[\(tag)] \(line)\n".utf8))
}
