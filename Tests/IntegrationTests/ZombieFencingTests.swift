import Domain
import Foundation
import Runtime
import XCTest

/// Contract: a membership member stopped (SIGSTOP) in the middle of a batch, past the session
/// timeout, becomes a zombie: the group gives its partitions to another member, which claims them
/// in `partition_owners` as soon as they are assigned. When the zombie resumes (SIGCONT) its
/// transaction finds a newer owner generation and rolls back (`class="fenced"`, no batch
/// committed); the new owner applies the notification, which is granted exactly once.
///
/// Only the test's two members are in the group: the cluster's own membership worker is stopped
/// for good first (its supervisor does not restart it), and the test waits on facts, not timing:
/// the zombie is stopped (/proc state T), the healthy member owns every partition in PostgreSQL.
final class ZombieFencingTests: XCTestCase {
    func testZombieResumingAfterEvictionCannotCommit() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }

        // The cluster's own membership worker leaves; two members of ours take its place.
        let original = try XCTUnwrap(cluster.supervisor.pid(of: "membership"))
        kill(original, SIGTERM)
        try waitUntil("the original membership worker exits", timeout: 15) { kill(original, 0) != 0 }

        let zombie = try member(cluster, failpoint: true)
        defer { if zombie.process.isRunning { kill(zombie.process.processIdentifier, SIGKILL) } }
        try waitUntil("the future zombie is ready", timeout: 60, interval: 0.2) {
            (try? HTTP.get("\(zombie.admin)/readyz", timeout: 2).status) == 200
        }

        let key = "5000\(Int.random(in: 100_000...999_999))"
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore",
                                     body: V1Bodies.data(try V1Bodies.initialBuy(originalTransactionId: key))).status, 200)
        try waitUntil("the member stops itself before its COMMIT", timeout: 30, interval: 0.05) {
            isStopped(zombie.process.processIdentifier)
        }

        // A healthy member joins; once the zombie's session times out the group gives it every
        // partition, and it claims them on assignment (whether or not a record arrives for them).
        let healthy = try member(cluster, failpoint: false)
        defer { if healthy.process.isRunning { kill(healthy.process.processIdentifier, SIGKILL) } }
        let everyPartition = 4  // Cluster's broker: --partitions 4; membership reads one topic
        try waitUntil("the healthy member owns every partition", timeout: 90, interval: 0.2) {
            let owned = try? cluster.database().query("""
                SELECT count(*)::bigint AS n FROM partition_owners
                WHERE group_id = 'storeledger-membership' AND owner LIKE \("%/\(healthy.process.processIdentifier)")
                """).first?.int64("n")
            return owned == Int64(everyPartition)
        }
        XCTAssertTrue(isStopped(zombie.process.processIdentifier), "the zombie stayed stopped meanwhile")

        kill(zombie.process.processIdentifier, SIGCONT)
        try waitUntil("the zombie's batch is fenced", timeout: 30, interval: 0.2) {
            (try? HTTP.get("\(zombie.admin)/metrics", timeout: 2).text.contains(#"storeledger_loop_failures_total{class="fenced",stage="membership"}"#)) == true
        }
        let zombieMetrics = try HTTP.get("\(zombie.admin)/metrics").text
        XCTAssertFalse(zombieMetrics.contains(#"storeledger_loop_batches_total{stage="membership"}"#), "the zombie committed no batch")

        try waitUntil("the notification is granted", timeout: 30, interval: 0.2) {
            ((try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)").json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        let entries = try cluster.database().query("SELECT count(*)::bigint AS n FROM ledger WHERE subscription_key LIKE \("%\(key)%")")
        XCTAssertEqual(try entries.first?.int64("n"), 1, "granted exactly once")
    }

    private func member(_ cluster: Cluster, failpoint: Bool) throws -> (process: Process, admin: String) {
        let port = try FreePort.loopback()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["worker", "membership", "--admin-port", String(port)]
        var environment = ProcessInfo.processInfo.environment
        environment["KAFKA_BOOTSTRAP_SERVERS"] = cluster.bootstrap
        environment["DATABASE_URL"] = cluster.databaseURL
        environment["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS"] = "3000"
        environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"] = "10"
        environment["STORELEDGER_LOG_LEVEL"] = ProcessInfo.processInfo.environment["STORELEDGER_LOG_LEVEL"] ?? "warning"
        if failpoint { environment["STORELEDGER_FAILPOINT"] = "stop-before-commit" }
        process.environment = environment
        try process.run()
        return (process, "http://127.0.0.1:\(port)")
    }
}

/// Whether the process is stopped by a signal (state `T` in /proc/PID/stat).
private func isStopped(_ pid: Int32) -> Bool {
    guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat"),
          let close = String(decoding: data, as: UTF8.self).lastIndex(of: ")") else { return false }
    let rest = String(decoding: data, as: UTF8.self)[close...].dropFirst(2)
    return rest.first == "T"
}
