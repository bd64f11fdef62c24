import Domain
import Foundation
import Kafka
import Postgres
import Simulator
import Synchronization
import TestSupport
import XCTest

/// Contract (issue 17): a simulated population flows through the real broker, workers and
/// PostgreSQL while the membership worker and the relay are SIGKILLed again and again (the relay
/// also right after the broker acknowledged a round and before it marked it, through its
/// failpoint). Afterwards every ledger entry that changes membership has exactly one event on
/// `storeledger.membership.events`: no gap, no duplicate, keyed by its user, in per-user ledger
/// order, each valid against schemas/membership-event.v1.json and equal to its ledger line.
final class MembershipEventsExactlyOnceTests: XCTestCase {
    func testEveryMembershipChangeIsPublishedExactlyOnceThroughWorkerKills() throws {
        let crashFlag = NSTemporaryDirectory() + "storeledger-relay-crash-\(UUID().uuidString)"
        let sim = try SimulationCluster(extraEnvironment: ["STORELEDGER_RELAY_CRASH_FLAG": crashFlag], workerExit: .restart)
        defer { sim.stop() }
        var population = PopulationConfig()
        population.users = Int(ProcessInfo.processInfo.environment["STORELEDGER_SIM_USERS"] ?? "") ?? 80
        population.seed = 17
        var driver = DriverConfig(ingestURL: sim.ingestURL)
        driver.connections = 4
        let run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population, driver: driver, cohortSize: 20)

        let done = StopFlag()
        let kills = KillLog()
        let killer = Thread {
            var round = 0
            while !done.isSet {
                Thread.sleep(forTimeInterval: 2.5)
                guard !done.isSet else { break }
                switch round % 3 {
                case 0: sim.cluster.kill("membership"); kills.add("membership")
                case 1: _ = FileManager.default.createFile(atPath: crashFlag, contents: nil); kills.add("relay-failpoint")
                default: sim.cluster.kill("relay"); kills.add("relay")
                }
                round += 1
            }
        }
        killer.start()
        let (report, _) = try run.run(check: false, settleTimeout: 60) { print("[events] \($0)") }
        done.set()
        print("[events] \(report.deliveries) deliveries; kills: \(kills.all)")
        XCTAssertEqual(report.driver.undelivered, 0)
        XCTAssertGreaterThanOrEqual(kills.all.count, 3, "the run was too short to kill every worker once")

        // One more crash in the publish window once the inputs are in, then wait for quiet.
        _ = FileManager.default.createFile(atPath: crashFlag, contents: nil)
        let db = try sim.cluster.database()
        try waitUntilQuiet(db)
        XCTAssertFalse(FileManager.default.fileExists(atPath: crashFlag), "the relay crashed after publishing, before marking")

        let expected = try db.query("""
            SELECT entry_id, user_id, subscription_key, kind FROM ledger
            WHERE kind <> 'record' AND (kind NOT IN ('link', 'unlink') OR group_id IS NOT NULL) ORDER BY entry_id
            """)
        let ledger = Dictionary(uniqueKeysWithValues: try expected.map { row in
            (try row.int64("entry_id"), (user: try row.decode("user_id", as: String?.self), key: try row.string("subscription_key")))
        })
        XCTAssertGreaterThan(ledger.count, 100, "a population this size changes membership many times")

        let records = try sim.cluster.readTopic(Topic.membershipEvents, atLeast: ledger.count, timeout: 90)
        let schema = try JSONSchemaSubset.membershipEvent()
        let decoder = JSONDecoder()
        var seen: [Int64: Int] = [:]
        var lastPerKey: [String: Int64] = [:]
        var invalid = 0
        for record in records.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            let event = try decoder.decode(MembershipEvent.self, from: Data(record.value))
            seen[event.ledgerEntryId, default: 0] += 1
            let key = String(decoding: record.key ?? [], as: UTF8.self)
            XCTAssertEqual(key, event.partitionKey)
            if let line = ledger[event.ledgerEntryId] {
                XCTAssertEqual(event.userId, line.user, "entry \(event.ledgerEntryId)")
                XCTAssertEqual(event.subscriptionKey, line.key)
            }
            if let previous = lastPerKey[key] {
                XCTAssertLessThan(previous, event.ledgerEntryId, "per-user order for \(key)")
            }
            lastPerKey[key] = event.ledgerEntryId
            if !schema.violations(of: record.value).isEmpty { invalid += 1 }
        }
        let duplicates = seen.filter { $0.value > 1 }
        let missing = Set(ledger.keys).subtracting(seen.keys)
        let unexpected = Set(seen.keys).subtracting(ledger.keys)
        print("[events] \(ledger.count) membership-changing entries, \(records.count) events, \(lastPerKey.count) keys")
        XCTAssertEqual(duplicates.count, 0, "duplicated entries: \(duplicates.keys.sorted().prefix(10))")
        XCTAssertEqual(missing.count, 0, "entries without an event: \(missing.sorted().prefix(10))")
        XCTAssertEqual(unexpected.count, 0, "events without a membership-changing entry: \(unexpected.sorted().prefix(10))")
        XCTAssertEqual(records.count, ledger.count)
        XCTAssertEqual(invalid, 0, "events that do not fit the schema")
    }

    /// Quiet: nothing unpublished in the outbox and the ledger has not grown for 8 s.
    private func waitUntilQuiet(_ db: PGConnection) throws {
        var last = -1
        var since = Date()
        try waitUntil("the pipeline is quiet and the outbox published", timeout: 180, interval: 1) {
            let count = try db.query("SELECT count(*) AS n FROM ledger").first!.int("n")
            let pending = try db.query("SELECT count(*) AS n FROM membership_outbox WHERE published_at IS NULL").first!.int("n")
            if count != last { last = count; since = Date() }
            return pending == 0 && Date().timeIntervalSince(since) > 8
        }
    }
}

final class StopFlag: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}

final class KillLog: Sendable {
    private let entries = Mutex<[String]>([])
    var all: [String] { entries.withLock { $0 } }
    func add(_ what: String) { entries.withLock { $0.append(what) } }
}
