import Domain
import Foundation
import Kafka
import Simulator
import Synchronization
import XCTest

/// Contract: a simulated population keeps flowing through ingest while a driver SIGKILLs stage
/// workers at random instants (at least `STORELEDGER_CHAOS_KILLS` kills, 20 by default, counting
/// the workers' own failpoint crashes after publish, after the PostgreSQL commit and before the
/// offset commit), restarts PostgreSQL once and breaks the broker through its fault channel
/// (Produce, OffsetCommit and Heartbeat errors, added round-trip time, every broker down). The
/// supervisor restarts what died. Afterwards every consumer group's lag is back to 0 within 60 s of
/// the last fault, the oracle finds no user whose membership differs, no ledger entry exists twice,
/// and every raw record ingest acknowledged (each 200) was decoded or dead-lettered.
///
/// CI-sized by default (about 90 s); `make chaos` runs it larger (STORELEDGER_CHAOS_USERS, _KILLS).
final class ChaosTests: XCTestCase {
    func testPopulationSurvivesKillsAPostgresRestartAndBrokerFaults() throws {
        let environment = ProcessInfo.processInfo.environment
        let users = Int(environment["STORELEDGER_CHAOS_USERS"] ?? "") ?? 8
        let targetKills = Int(environment["STORELEDGER_CHAOS_KILLS"] ?? "") ?? 20
        let failpointLog = NSTemporaryDirectory() + "storeledger-chaos-\(UUID().uuidString).log"
        _ = FileManager.default.createFile(atPath: failpointLog, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: failpointLog) }

        let sim = try SimulationCluster(extraEnvironment: [
            // Each point fires rarely per batch; the budget bounds the crashes a run can cause.
            "STORELEDGER_FAILPOINT": "after-publish:0.02,after-pg-commit:0.02,before-offset-commit:0.02",
            "STORELEDGER_FAILPOINT_LOG": failpointLog,
            "STORELEDGER_FAILPOINT_MAX": String(max(3, targetKills / 3)),
            // Outage retries back off to at most 2 s, so recovery after the last fault is quick.
            "STORELEDGER_LOOP_MAX_BACKOFF_MS": "2000",
        ], workerExit: .restart)
        defer { sim.stop() }
        let cluster = sim.cluster

        var population = PopulationConfig()
        population.users = users
        population.seed = 9
        // The sandbox sends once: a 503 during a broker fault would lose it by Apple's own rules.
        population.sandboxShare = 0
        var driverConfig = DriverConfig(ingestURL: sim.ingestURL)
        driverConfig.connections = 4
        // Apple's retries stretched so that they outlast a few seconds of broker faults.
        driverConfig.msPerSimHour = 100
        driverConfig.ratePerSecond = Double(environment["STORELEDGER_CHAOS_RATE"] ?? "") ?? 10
        // A short queue makes the last cohort's submission mean "nearly everything is sent".
        driverConfig.maxQueued = 20
        let run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population, driver: driverConfig,
                                       cohortSize: 10, maxLag: 30)
        let outcome = RunOutcome()
        let lastCohortQueued = Atomic<Bool>(false)
        let sending = Thread {
            outcome.set(Result {
                try run.run(check: false) { line in
                    if line.hasPrefix("generated \(users)/\(users) ") { lastCohortQueued.store(true, ordering: .releasing) }
                    say(line)
                }
            })
        }
        sending.start()

        // The chaos: random kills, PostgreSQL once, the broker's faults, until enough kills happened
        // and the population is sent (so the last fault comes after the last request and the
        // recovery time below is the pipeline's alone).
        var chaos = ChaosDriver(cluster: cluster, failpointLog: failpointLog)
        var postgresRestarted = false
        var brokerFaults = 0
        Thread.sleep(forTimeInterval: 2)
        while chaos.totalKills < targetKills || !postgresRestarted || brokerFaults == 0 || !lastCohortQueued.load(ordering: .acquiring) {
            Thread.sleep(forTimeInterval: Double.random(in: 0.4...1.6))
            chaos.killRandomWorker()
            if chaos.randomKills == 5, !postgresRestarted {
                say("restarting PostgreSQL")
                try cluster.restartPostgres(downFor: 2)
                postgresRestarted = true
                chaos.faulted()
            }
            if chaos.randomKills == 9, brokerFaults == 0 {
                brokerFaults = try injectBrokerFaults(cluster)
                chaos.faulted()
            }
            if chaos.randomKills > targetKills * 10 { break }  // the population is not sent: the wait below fails
        }
        say("\(chaos.randomKills) random kills, \(chaos.failpointKills) failpoint kills \(chaos.failpointsByPoint), PostgreSQL restarted, \(brokerFaults) broker faults")

        XCTAssertTrue(outcome.wait(timeout: 600), "the population finished sending")
        let (report, driver) = try XCTUnwrap(outcome.value).get()
        say("\(report.deliveries) deliveries; \(report.driver)")

        // Lag of every group back to 0, timed from the last fault (a failpoint crash counts).
        let groups: [(String, [String])] = [("storeledger-decode", [Topic.notificationsRaw, Topic.receiptsRaw]),
                                            ("storeledger-dedupe", [Topic.decoded]),
                                            ("storeledger-classify", [Topic.unique]),
                                            ("storeledger-membership", [Topic.commands])]
        let lags = try groups.map { try GroupLag(config: cluster.kafka(clientId: "chaos-lag"), groupId: $0.0) }
        var remaining: [String: Int64] = [:]
        do {
            try waitUntil("every group's lag is 0", timeout: 180, interval: 0.5) {
                remaining = [:]
                for (index, (group, topics)) in groups.enumerated() {
                    let total = (try? lags[index].lag(topics: topics, partitions: 4).values.reduce(0, +)) ?? -1
                    if total != 0 { remaining[group] = total }
                }
                return remaining.isEmpty
            }
        } catch {
            // Which group is behind (-1: its lag could not be read), for the next investigation.
            XCTFail("lag not back to 0: \(remaining.sorted { $0.key < $1.key })")
            throw error
        }
        let lastFault = max(chaos.lastFault, chaos.lastFailpointHit())
        let recovery = Date().timeIntervalSince(lastFault)
        say("lag 0 in every group \(String(format: "%.1f", recovery)) s after the last fault (kills total \(chaos.totalKills))")
        XCTAssertLessThanOrEqual(recovery, 60 + 5, "lag back to 0 within 60 s of the last fault (plus polling slack)")

        XCTAssertGreaterThanOrEqual(chaos.totalKills, targetKills)
        XCTAssertGreaterThan(chaos.failpointKills, 0, "the workers crashed at failpoints too")
        XCTAssertEqual(report.driver.undelivered, 0, "Apple's retries outlasted every fault")

        let mismatches = run.settle(users: run.users, timeout: 60) { say("\($0)") }
        for user in Set(mismatches.map(\.userId)).sorted().prefix(5) {
            say(run.explain(user, mismatches: mismatches, driver: driver))
        }
        XCTAssertEqual(Set(mismatches.map(\.userId)).count, 0, "users whose membership differs from the oracle")

        let duplicates = try cluster.database().query("""
            SELECT count(*)::bigint AS n FROM (
                SELECT 1 FROM ledger
                GROUP BY subscription_key, user_id, kind, purchase_id, interval_start_ms, interval_end_ms, cause
                HAVING count(*) > 1) AS twice
            """).first?.int64("n")
        XCTAssertEqual(duplicates, 0, "ledger entries with the same user, cause, interval and kind")
        if duplicates != 0 {
            for row in try cluster.database().query("""
                SELECT entry_id, subscription_key, user_id, kind, purchase_id, interval_start_ms, interval_end_ms, reason, command_id, cause::text AS cause
                FROM ledger l WHERE (subscription_key, coalesce(user_id, ''), kind, coalesce(purchase_id, ''), cause::text) IN (
                    SELECT subscription_key, coalesce(user_id, ''), kind, coalesce(purchase_id, ''), cause::text FROM ledger
                    GROUP BY subscription_key, user_id, kind, purchase_id, interval_start_ms, interval_end_ms, cause HAVING count(*) > 1)
                ORDER BY entry_id LIMIT 10
                """) {
                say("duplicate: \(try row.int64("entry_id")) \(try row.string("kind")) \(try row.string("subscription_key")) \(try row.string("reason")) command \(try row.string("command_id")) cause \(try row.string("cause"))")
            }
        }

        let accounting = try Accounting(cluster, expectedRaw: report.driver.accepted)
        say("\(accounting.raw.count) raw records, \(accounting.decodedSources.count) decoded, \(accounting.deadLettered.count) dead-lettered by decode")
        XCTAssertGreaterThanOrEqual(accounting.raw.count, report.driver.accepted, "a raw record for every 200")
        XCTAssertEqual(accounting.unaccounted, [], "raw records neither decoded nor dead-lettered")
    }

    /// Produce, OffsetCommit and Heartbeat errors, 300 ms more round-trip time, then every broker
    /// down for 2 s. Returns how many faults were sent.
    private func injectBrokerFaults(_ cluster: Cluster) throws -> Int {
        say("broker faults")
        let faults = ["/errors?api=Produce&error=NOT_ENOUGH_REPLICAS&count=20",
                      "/errors?api=OffsetCommit&error=NOT_COORDINATOR&count=10",
                      "/errors?api=Heartbeat&error=REBALANCE_IN_PROGRESS&count=4",
                      "/brokers/all/rtt?ms=300"]
        for fault in faults { try cluster.brokerFault(fault) }
        Thread.sleep(forTimeInterval: 2)
        try cluster.brokerFault("/brokers/all/rtt?ms=0")
        try cluster.brokerFault("/brokers/all/down")
        Thread.sleep(forTimeInterval: 2)
        try cluster.brokerFault("/brokers/all/up")
        return faults.count + 3
    }
}

/// Kills and their bookkeeping: random SIGKILLs by the test, crashes the workers logged at failpoints.
private struct ChaosDriver {
    let cluster: Cluster
    let failpointLog: String
    private(set) var randomKills = 0
    private(set) var lastFault = Date()

    init(cluster: Cluster, failpointLog: String) {
        self.cluster = cluster
        self.failpointLog = failpointLog
    }

    /// SIGKILLs one running stage worker, if any is up (a restarting one has no live pid).
    mutating func killRandomWorker() {
        for stage in Cluster.stages.shuffled() {
            guard let pid = cluster.supervisor.pid(of: stage), kill(pid, 0) == 0 else { continue }
            kill(pid, SIGKILL)
            randomKills += 1
            lastFault = Date()
            return
        }
    }

    mutating func faulted() { lastFault = Date() }

    private var failpointLines: [[Substring]] {
        let text = (try? String(contentsOfFile: failpointLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map { $0.split(separator: " ") }.filter { $0.count == 3 }
    }

    var failpointKills: Int { failpointLines.count }
    var totalKills: Int { randomKills + failpointKills }
    var failpointsByPoint: [String: Int] {
        failpointLines.reduce(into: [:]) { counts, line in counts[String(line[1]), default: 0] += 1 }
    }

    func lastFailpointHit() -> Date {
        let last = failpointLines.compactMap { Double($0[2]) }.max() ?? 0
        return Date(timeIntervalSince1970: last / 1000)
    }
}

/// Every raw record (one per 200 of ingest) traced to what decode made of it: an event on the
/// decoded topic that names its raw position, or a dead letter of decode that names its source.
/// (Also used by ScaleOutTests and PostgresFailoverTests.)
struct Accounting {
    let raw: [RecordPosition]
    let decodedSources: Set<RecordPosition>
    let deadLettered: Set<RecordPosition>

    init(_ cluster: Cluster, expectedRaw: Int) throws {
        // One fresh group over the four topics: one join instead of four.
        let all = try cluster.readTopics([Topic.notificationsRaw, Topic.receiptsRaw, Topic.decoded, Topic.deadLetter], atLeast: expectedRaw)
        raw = all.filter { $0.topic == Topic.notificationsRaw || $0.topic == Topic.receiptsRaw }.map {
            RecordPosition(topic: $0.topic, partition: $0.partition, offset: $0.offset)
        }
        var decoded = Set<RecordPosition>()
        for record in all where record.topic == Topic.decoded {
            guard let json = try JSONSerialization.jsonObject(with: Data(TopicRecords.json(record.value) ?? [])) as? [String: Any],
                  let position = json["rawPosition"] as? [String: Any],
                  let topic = position["topic"] as? String, let partition = position["partition"] as? Int,
                  let offset = position["offset"] as? Int else { continue }
            decoded.insert(RecordPosition(topic: topic, partition: Int32(partition), offset: Int64(offset)))
        }
        decodedSources = decoded
        var letters = Set<RecordPosition>()
        for record in all where record.topic == Topic.deadLetter {
            guard let letter = DeadLetterRecord(record), letter.stage == "decode" else { continue }
            letters.insert(RecordPosition(topic: letter.source.topic, partition: letter.source.partition, offset: letter.sourceOffset))
        }
        deadLettered = letters
    }

    var unaccounted: [RecordPosition] {
        raw.filter { !decodedSources.contains($0) && !deadLettered.contains($0) }
    }
}

/// The population run's result, handed from its thread to the test's.
final class RunOutcome: Sendable {
    private let result = Mutex<Result<(SimulationReport, Driver), any Error>?>(nil)

    func set(_ value: Result<(SimulationReport, Driver), any Error>) { result.withLock { $0 = value } }
    var value: Result<(SimulationReport, Driver), any Error>? { result.withLock { $0 } }
    var isDone: Bool { value != nil }

    func wait(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !isDone, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        return isDone
    }
}

/// Progress on standard error, unbuffered: it survives a crash of the test process.
private func say(_ line: String) {
    FileHandle.standardError.write(Data("[chaos] \(line)\n".utf8))
}
