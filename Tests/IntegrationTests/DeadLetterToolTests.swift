import Domain
import Foundation
import Kafka
import Runtime
import XCTest

/// Contract: `storeledger dlq` on the real broker. `list` shows dead letters with provenance,
/// filtered by stage and kind; `show` prints one with its original bytes as text; `redrive` sends
/// the original to its source topic, where the pipeline processes it; re-driving the same dead
/// letter twice grants once (the second copy is a duplicate event for dedupe). `topics show` prints
/// the stages' binary records as JSON.
final class DeadLetterToolTests: XCTestCase {
    func testListShowAndRedriveTwiceGrantsOnce() throws {
        let cluster = try Cluster()
        try cluster.start()
        defer { cluster.stop() }

        // A real dead letter from decode, and one as decode would write it for a notification refused
        // before a fix (say, a shared secret rotated too early): its original is a valid notification.
        let marker = UUID().uuidString
        XCTAssertEqual(try HTTP.post("\(cluster.ingestURL)/v1/notifications/appstore", body: Data(#"{"hello":"\#(marker)","password":"\#(TestCredentials.v1Secret)"}"#.utf8)).status, 200)
        let key = "4000\(Int.random(in: 100_000...999_999))"
        let original = try V1Bodies.data(try V1Bodies.initialBuy(originalTransactionId: key))
        let refused = DeadLetterRecord(stage: "decode", kind: "invalid_shared_secret", message: "V1 password does not match",
                                       source: PartitionID(topic: Topic.notificationsRaw, partition: 0), sourceOffset: 0, attempts: 1,
                                       firstFailureMs: currentTimeMs(), lastFailureMs: currentTimeMs(), key: nil,
                                       value: [UInt8](original), headers: [KafkaHeader(name: RecordHeader.source, value: Array("appStoreNotification".utf8))])
            .outgoing(topic: Topic.deadLetter)
        let producer = try KafkaProducer(config: cluster.kafka())
        _ = try producer.sendAndWait(topic: refused.topic, key: refused.key, value: refused.value, headers: refused.headers, timeout: .seconds(10))
        producer.close()

        var lines: [[String: Any]] = []
        try waitUntil("dlq list shows both dead letters", timeout: 60, interval: 0.5) {
            lines = try dlq(cluster, ["list", "--stage", "decode"]).split(separator: "\n")
                .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            return Set(lines.compactMap { $0["kind"] as? String }).isSuperset(of: ["missing_field", "invalid_shared_secret"])
        }
        let refusedLine = try XCTUnwrap(try dlq(cluster, ["list", "--kind", "invalid_shared_secret"]).split(separator: "\n").first
            .flatMap { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] })
        XCTAssertEqual(refusedLine["source"] as? String, "\(Topic.notificationsRaw)[0]@0")
        XCTAssertEqual(refusedLine["stage"] as? String, "decode")
        XCTAssertEqual(try dlq(cluster, ["list", "--stage", "membership"]), "", "the filter excludes other stages")
        let id = try XCTUnwrap(refusedLine["id"] as? String)

        let shown = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(try dlq(cluster, ["show", id]).utf8)) as? [String: Any])
        XCTAssertEqual(shown["value"] as? String, String(decoding: original, as: UTF8.self), "the original bytes, as text")
        XCTAssertEqual(shown["message"] as? String, "V1 password does not match")

        // Re-drive it twice; it is granted exactly once.
        XCTAssertTrue(try dlq(cluster, ["redrive", id]).contains("redriven_to"))
        try waitUntil("the re-driven notification is granted", timeout: 30, interval: 0.2) {
            ((try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)").json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        XCTAssertTrue(try dlq(cluster, ["redrive", "--kind", "invalid_shared_secret"]).contains(id))
        try waitUntil("dedupe saw the second copy as a duplicate", timeout: 30, interval: 0.2) {
            try HTTP.get("\(cluster.adminURLs["dedupe"]!)/metrics").text.contains(#"storeledger_dedupe_total{outcome="duplicate_event"}"#)
        }
        XCTAssertEqual((try HTTP.get("\(cluster.ingestURL)/v1/subscriptions/\(key)").json?["ledger"] as? [Any])?.count, 1)

        // `topics show` prints the stages' binary records as JSON: the grant's command is there.
        let commands = try dlq(cluster, ["show", Topic.commands, "--count", "50"], command: "topics").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let grant = try XCTUnwrap(commands.first { (($0["value"] as? [String: Any])?["subscriptionKey"] as? String)?.hasPrefix(key) ?? false },
                                  "\(commands)")
        XCTAssertEqual(grant["encoding"] as? String, "binary-v1")
        XCTAssertNotNil(((grant["value"] as? [String: Any])?["action"] as? [String: Any])?["purchase"], "\(grant)")
        XCTAssertThrowsError(try dlq(cluster, ["show", Topic.notificationsRaw], command: "topics"), "raw inputs can hold secrets")
    }

    /// Runs `storeledger dlq ...` (or another command) against the cluster and returns its standard output.
    private func dlq(_ cluster: Cluster, _ arguments: [String], command: String = "dlq") throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = [command] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["KAFKA_BOOTSTRAP_SERVERS"] = cluster.bootstrap
        environment["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS"] = "3000"
        environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"] = "10"
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ClusterError("dlq \(arguments) exited \(process.terminationStatus)") }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
