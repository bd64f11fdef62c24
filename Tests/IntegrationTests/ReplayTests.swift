import Domain
import Foundation
import Kafka
import Postgres
import XCTest

/// Contract (issue 13): `storeledger replay` corrects. The pipeline runs with two deliberately wrong
/// rules behind the test-only switch: dedupe trusts `transaction_id` (a restore becomes a purchase
/// of its own, R1) and classify grants a crossgrade as a new period after the old one (S3 becomes
/// two months). Replaying dedupe with its rule fixed merges the split purchase; replaying classify
/// with its rule fixed corrects exactly the crossgrading user; each `--dry-run` first predicts the
/// same owners and entry count that the real run then writes, as compensating entries whose reason
/// names the replay and the code version, published as membership events through the outbox; the
/// result equals what the pure domain computes from the same bytes. Replaying every stage twice
/// over the whole history afterwards writes nothing and leaves the projections byte-identical. A
/// replay while a stage's workers run is refused.
final class ReplayTests: XCTestCase {
    /// A cluster whose stages run `rules` wrong (the bug a replay then fixes), beside the
    /// verifyReceipt stub, and the environment its processes got; the caller stops both.
    private static func startCluster(wrongRules rules: String) throws -> (ScenarioVerifyReceiptStub, Cluster, [String: String]) {
        let stub = try ScenarioVerifyReceiptStub()
        let cluster = try Cluster()
        do {
            var environment = try ScenarioBodies.clusterEnvironment(verifyReceiptURL: stub.url)
            environment["STORELEDGER_TEST_WRONG_RULE"] = rules
            try cluster.start(extraEnvironment: environment)
            return (stub, cluster, environment)
        } catch {
            cluster.stop()
            stub.stop()
            throw error
        }
    }

    func testReplayAfterRuleFixesCorrectsExactlyTheAffectedOwnersAndReplayingAgainWritesNothing() throws {
        let signer = try ScenarioBodies.V2Signer.load()
        let (stub, cluster, environment) = try Self.startCluster(wrongRules: "crossgrade-as-new-period,trust-transaction-id")
        defer { cluster.stop(); stub.stop() }
        let db = try cluster.database()
        defer { db.close() }

        // The scenario set, plus S1: the same purchase restored on a new device under a new transaction id.
        let p = "rpl"
        var inputs = try ScenarioFeed.inputs(prefix: p, signer: signer)
        let bought = ScenarioBodies.Tx.period("\(p)-s1-0", otid: "\(p)-s1", start: ScenarioBodies.t0, token: "user-\(p)1")
        var restored = bought
        restored.id = "\(p)-s1-0r"
        inputs.append(try ScenarioBodies.data(try ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s1", [bought])))
        inputs.append(try ScenarioBodies.data(try ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s1", [restored])))
        var oracle = try ScenarioFeed.Oracle()
        for input in inputs { try oracle.feed(input) }
        for input in inputs {
            let response = try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: input)
            XCTAssertEqual(response.status, 200, response.text)
        }
        try waitUntilCaughtUp(cluster)
        let expected = LedgerProjection(entries: oracle.ledger).entitlements
        func entitlements() throws -> [String: [String: [Interval]]] {
            LedgerProjection(entries: try ScenarioDatabase.ledger(db, where: "subscription_key LIKE \(p + "-%")")).entitlements
        }
        let s1 = ScenarioWorld.key("\(p)-s1"), s3 = ScenarioWorld.key("\(p)-s3")
        XCTAssertNotEqual(try entitlements(), expected, "the wrong rules give wrong membership")
        XCTAssertEqual(try purchaseCount(db, s1), 2, "the wrong dedupe rule split the restored purchase")

        // Refused while the stages run.
        let busy = try replay(cluster, environment, ["--stage", "membership", "--from", "earliest", "--dry-run"])
        XCTAssertEqual(busy.status, 1, busy.stderr)
        XCTAssert(busy.stderr.contains("has active members"), busy.stderr)

        for stage in Cluster.stages { cluster.kill(stage, signal: SIGTERM) }
        let pids = Cluster.stages.compactMap { cluster.supervisor.pid(of: $0) }
        try waitUntil("the stages stopped", timeout: 30) { pids.allSatisfy { kill($0, 0) != 0 } }

        // (c) dedupe with its rule fixed (classify's still wrong): the split purchase merges.
        var classifyStillWrong = environment
        classifyStillWrong["STORELEDGER_TEST_WRONG_RULE"] = "crossgrade-as-new-period"
        let dedupe = try correct(cluster, classifyStillWrong, db, stage: "dedupe")
        XCTAssert(dedupe.owners.contains("user-\(p)1"), "\(dedupe.owners)")
        XCTAssertEqual(try purchaseCount(db, s1), 1, "dedupe's rebuilt memory merged the restore into the purchase")
        let s1State = try XCTUnwrap(try ScenarioDatabase.states(db, where: "subscription_key = \(s1)").first)
        XCTAssertEqual(s1State.granted.count, 1, "one purchase grants: \(s1State.granted)")

        // `--users` keeps a replay to those owners; a time bound is found without offsets-for-times
        // (the embedded broker cannot answer it: the command bisects on record timestamps).
        let noFix = environment.filter { $0.key != "STORELEDGER_TEST_WRONG_RULE" }
        let others = try replay(cluster, noFix, ["--stage", "classify", "--from", "earliest", "--users", "user-\(p)1,nobody", "--dry-run"])
        XCTAssertEqual(try others.report().diff.entries, 0, others.stdout)
        let all = try others.report().recordsRead
        let sinceStart = try replay(cluster, noFix, ["--stage", "membership", "--from", "2000-01-01", "--dry-run"])
        XCTAssertEqual(try sinceStart.report().recordsInRange, try sinceStart.report().recordsRead, sinceStart.stdout)
        let future = try replay(cluster, noFix, ["--stage", "membership", "--from", "@\(Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)",
                                                 "--dry-run"])
        XCTAssertEqual(try future.report().recordsInRange, 0, future.stdout)
        XCTAssertGreaterThan(all, 0)

        // (b) classify with its rule fixed: exactly the crossgrading user is corrected.
        let classify = try correct(cluster, environment.filter { $0.key != "STORELEDGER_TEST_WRONG_RULE" }, db, stage: "classify")
        XCTAssertEqual(classify.owners, ["user-\(p)"])
        let s3Membership = try XCTUnwrap(try ScenarioDatabase.states(db, where: "subscription_key = \(s3)").first).entitlement(group: "vip")
        XCTAssertEqual(s3Membership.last?.endMs, ScenarioBodies.t0 + ScenarioBodies.day + ScenarioBodies.month, "S3: one period after the switch")
        XCTAssertEqual(try entitlements(), expected, "after both replays the ledger folds to what the domain computes")

        // (a) every stage replayed twice over the whole history: nothing written, projections byte-identical.
        let fixed = environment.filter { $0.key != "STORELEDGER_TEST_WRONG_RULE" }
        let before = try snapshot(db)
        for stage in ["membership", "classify", "dedupe", "decode"] {
            for round in 1...2 {
                // The simulator's verifyReceipt answers alike every time: asking it again is the same input.
                let result = try replay(cluster, fixed, ["--stage", stage, "--from", "earliest"] + (stage == "decode" ? ["--reverify-receipts"] : []))
                XCTAssertEqual(result.status, 0, result.stderr)
                let report = try result.report()
                XCTAssertEqual(report.entriesWritten, 0, "replay \(stage) #\(round): \(result.stdout)")
                XCTAssertEqual(report.diff.entries, 0, "replay \(stage) #\(round)")
                XCTAssertGreaterThan(report.recordsRead, 0)
            }
        }
        let after = try snapshot(db)
        XCTAssertEqual(after, before, "replays of unchanged code write nothing")
        // Which table and which first line differ (the whole snapshot is too long to read in a log).
        for (table, (was, now)) in zip(["ledger", "subscriptions", "user_membership", "grants", "membership_outbox"], zip(before, after))
        where was != now {
            let wasLines = was.split(separator: "\n"), nowLines = now.split(separator: "\n")
            let first = (0..<min(wasLines.count, nowLines.count)).first { wasLines[$0] != nowLines[$0] } ?? min(wasLines.count, nowLines.count)
            print("[replay] \(table) differs at line \(first) of \(wasLines.count) → \(nowLines.count):\n  before: \(first < wasLines.count ? wasLines[first] : "-")\n  after:  \(first < nowLines.count ? nowLines[first] : "-")")
        }
    }

    /// `--users` at the dedupe stage rebuilds those owners' dedupe memory only: another owner's split
    /// purchase stays split in memory as in their ledger, until a replay names them.
    func testAUsersReplayOfDedupeRebuildsOnlyThoseUsersMemory() throws {
        let (stub, cluster, environment) = try Self.startCluster(wrongRules: "trust-transaction-id")
        defer { cluster.stop(); stub.stop() }
        let db = try cluster.database()
        defer { db.close() }
        let p = "rpu"
        let bought = ScenarioBodies.Tx.period("\(p)-s1-0", otid: "\(p)-s1", start: ScenarioBodies.t0, token: "user-\(p)1")
        var restored = bought
        restored.id = "\(p)-s1-0r"
        for body in [try ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s1", [bought]), try ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s1", [restored])] {
            XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: try ScenarioBodies.data(body)).status, 200)
        }
        try waitUntilCaughtUp(cluster)
        let s1 = ScenarioWorld.key("\(p)-s1")
        XCTAssertEqual(try purchaseCount(db, s1), 2, "the wrong dedupe rule split the restored purchase")
        for stage in Cluster.stages { cluster.kill(stage, signal: SIGTERM) }
        let pids = Cluster.stages.compactMap { cluster.supervisor.pid(of: $0) }
        try waitUntil("the stages stopped", timeout: 30) { pids.allSatisfy { kill($0, 0) != 0 } }

        let fixed = environment.filter { $0.key != "STORELEDGER_TEST_WRONG_RULE" }
        let others = try replay(cluster, fixed, ["--stage", "dedupe", "--from", "earliest", "--users", "nobody"])
        XCTAssertEqual(others.status, 0, others.stderr)
        XCTAssertEqual(try others.report().entriesWritten, 0, others.stdout)
        XCTAssertEqual(try purchaseCount(db, s1), 2, "another owner's dedupe memory is left as their ledger has it")
        let theirs = try replay(cluster, fixed, ["--stage", "dedupe", "--from", "earliest", "--users", "user-\(p)1"])
        XCTAssertEqual(theirs.status, 0, theirs.stderr)
        XCTAssertGreaterThan(try theirs.report().entriesWritten, 0, theirs.stdout)
        XCTAssertEqual(try purchaseCount(db, s1), 1, "named, its memory is rebuilt and the split purchase merges")
    }

    /// Dry run, then the real run: the same owners and entry count, and the written entries are
    /// compensations that name the replay and publish as membership events.
    private func correct(_ cluster: Cluster, _ environment: [String: String], _ db: PGConnection,
                         stage: String) throws -> (owners: [String], entries: Int) {
        let lastEntry = try db.query("SELECT coalesce(max(entry_id), 0)::bigint AS m FROM ledger").first!.int64("m")
        let dry = try replay(cluster, environment, ["--stage", stage, "--from", "earliest", "--dry-run"])
        XCTAssertEqual(dry.status, 0, dry.stderr)
        let predicted = try dry.report()
        XCTAssertGreaterThan(predicted.diff.entries, 0, "the \(stage) fix changes something: \(dry.stdout)")
        XCTAssertEqual(try db.query("SELECT coalesce(max(entry_id), 0)::bigint AS m FROM ledger").first!.int64("m"), lastEntry,
                       "a dry run writes nothing")
        let real = try replay(cluster, environment, ["--stage", stage, "--from", "earliest"])
        XCTAssertEqual(real.status, 0, real.stderr)
        let done = try real.report()
        XCTAssertEqual(done.entriesWritten, predicted.diff.entries, "the dry run predicted the entry count")
        XCTAssertEqual(done.diff.affectedOwners, predicted.diff.affectedOwners)
        let rows = try db.query("SELECT coalesce(user_id, 'subscription:' || subscription_key) AS owner, reason, entry_id FROM ledger WHERE entry_id > \(lastEntry)")
        XCTAssertEqual(rows.count, predicted.diff.entries)
        XCTAssertEqual(Set(try rows.map { try $0.string("owner") }).sorted(), predicted.diff.affectedOwners, "the dry run predicted the owners")
        for row in rows {
            let reason = try row.string("reason")
            XCTAssert(reason.hasPrefix("replay of \(stage) after a fix (code storeledger-"), reason)
        }
        let events = try db.query("SELECT count(*)::bigint AS n FROM membership_outbox WHERE entry_id > \(lastEntry)").first!.int64("n")
        XCTAssertGreaterThan(events, 0, "the compensations publish as membership events")
        // A second run finds nothing more to correct.
        let again = try replay(cluster, environment, ["--stage", stage, "--from", "earliest"])
        XCTAssertEqual(try again.report().entriesWritten, 0, again.stdout)
        return (predicted.diff.affectedOwners, predicted.diff.entries)
    }

    private func purchaseCount(_ db: PGConnection, _ key: String) throws -> Int {
        try db.query("SELECT count(*)::bigint AS n FROM purchases WHERE subscription_key = \(key)").first!.int("n")
    }

    /// Every stage's group has committed everything its topics hold, twice 1 s apart.
    private func waitUntilCaughtUp(_ cluster: Cluster) throws {
        let lags = try ReplayStage.allCases.map { try GroupLag(config: cluster.kafka(clientId: "replay-lag"), groupId: $0.groupId) }
        var quietSince: Date?
        try waitUntil("every stage caught up", timeout: 90, interval: 0.25) {
            let behind = try zip(ReplayStage.allCases, lags).reduce(Int64(0)) { sum, pair in
                sum + (try pair.1.lag(topics: pair.0.inputTopics, partitions: 4).values.reduce(0, +))
            }
            if behind > 0 { quietSince = nil; return false }
            if quietSince == nil { quietSince = Date() }
            return Date().timeIntervalSince(quietSince!) >= 1
        }
    }

    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        func report() throws -> Report { try JSONDecoder().decode(Report.self, from: Data(stdout.utf8)) }
    }

    /// The part of `storeledger replay`'s JSON report the test reads.
    struct Report: Decodable {
        struct Diff: Decodable {
            var affectedOwners: [String]
            var entriesAdded: Int
            var entriesCompensated: Int
            var entriesOther: Int
            var entries: Int { entriesAdded + entriesCompensated + entriesOther }
        }
        var entriesWritten: Int
        var recordsRead: Int
        var recordsInRange: Int
        var recordsPerSecond: Double
        var diff: Diff
    }

    private func replay(_ cluster: Cluster, _ environment: [String: String], _ arguments: [String]) throws -> Run {
        var env = ["KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap, "DATABASE_URL": cluster.databaseURL,
                   "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "3000", "STORELEDGER_KAFKA_FETCH_WAIT_MS": "10",
                   "STORELEDGER_LOG_LEVEL": "warning", "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]
        env.merge(TestCredentials.environment) { $1 }
        env.merge(environment) { $1 }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["replay"] + arguments
        process.environment = env
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
                   stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Everything membership writes, as text (ledger rows in full; projections without their update times).
    private func snapshot(_ db: PGConnection) throws -> [String] {
        func text(_ sql: SQL) throws -> String { try db.query(sql).map { try $0.string("t") }.joined(separator: "\n") }
        return [
            try text("SELECT row_to_json(l)::text AS t FROM ledger l ORDER BY entry_id"),
            try text("SELECT state::text AS t FROM subscriptions ORDER BY subscription_key"),
            try text("SELECT user_id || ' ' || group_id || ' ' || view::text AS t FROM user_membership ORDER BY 1"),
            try text("""
                SELECT concat_ws(' ', subscription_key, purchase_id, user_id, group_id, product_id, grant_facts::text, purchase_ms, expires_ms,
                                 cancellation_ms, cut_kind, granted_start_ms, granted_end_ms) AS t FROM grants ORDER BY 1
                """),
            try text("SELECT concat_ws(' ', event_key, entry_id, event_type, payload, encode(details, 'hex')) AS t FROM membership_outbox ORDER BY entry_id"),
        ]
    }
}
