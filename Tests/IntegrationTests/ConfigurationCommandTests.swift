import Configuration
import Foundation
import Kafka
import Postgres
import XCTest

/// Contract: the list's documented defaults are the ones the modules apply when a setting is
/// unset, and the `storeledger` binary validates a role's settings before anything runs: every
/// problem in one refusal (exit 2), `--check-arguments` included; `storeledger config ROLE` lists
/// exactly that role's settings.
final class ConfigurationCommandTests: XCTestCase {
    func testTheDocumentedDefaultsAreTheModulesDefaults() {
        let kafka = KafkaConfig(bootstrapServers: "b", clientId: "c"), loop = ConsumerLoopMachine.Policy(), postgres = PGOptions()
        func milliseconds(_ duration: Duration) -> String { String(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000) }
        XCTAssertEqual(Setting.kafkaSessionTimeoutMs.defaultValue, milliseconds(kafka.sessionTimeout))
        XCTAssertEqual(Setting.kafkaFetchWaitMs.defaultValue, milliseconds(kafka.fetchMaxWait))
        XCTAssertEqual(Setting.kafkaLingerMs.defaultValue, milliseconds(kafka.linger))
        XCTAssertEqual(Setting.loopMaxAttempts.defaultValue, String(loop.maxAttempts))
        XCTAssertEqual(Setting.loopBaseBackoffMs.defaultValue, milliseconds(loop.baseBackoff))
        XCTAssertEqual(Setting.loopMaxBackoffMs.defaultValue, milliseconds(loop.maxBackoff))
        XCTAssertEqual(Setting.pgConnectTimeoutSeconds.defaultValue, String(postgres.connectTimeoutSeconds))
        XCTAssertEqual(Setting.pgStatementTimeoutMs.defaultValue, String(postgres.statementTimeoutMs))
    }

    func testCheckArgumentsRefusesEveryBadSettingAtOnce() throws {
        let bad = ["STORELEDGER_LOOP_MAX_ATTEMPTS": "many", "STORELEDGER_LOG_LEVEL": "loud", "STORELEDGER_PG_CONNECT_TIMEOUT_S": "1",
                   "STORELEDGER_NONCES_PER_HOUR": "lots"]
        let (status, output) = try run(["worker", "dedupe", "--check-arguments"], bad)
        XCTAssertEqual(status, 2, output)
        for name in ["STORELEDGER_LOOP_MAX_ATTEMPTS", "STORELEDGER_LOG_LEVEL", "STORELEDGER_PG_CONNECT_TIMEOUT_S"] {
            XCTAssertTrue(output.contains(name), "\(name) is reported: \(output)")
        }
        XCTAssertFalse(output.contains("STORELEDGER_NONCES_PER_HOUR"), "the signer's setting is not dedupe's concern: \(output)")
        XCTAssertTrue(output.contains("3 configuration problems"), output)

        let (signerStatus, signerOutput) = try run(["signer", "--check-arguments"], bad)
        XCTAssertEqual(signerStatus, 2, signerOutput)
        XCTAssertTrue(signerOutput.contains("STORELEDGER_NONCES_PER_HOUR"), signerOutput)
        XCTAssertEqual(try run(["worker", "dedupe", "--check-arguments"], [:]).0, 0)
    }

    /// A replay holds the groups the workers run under (`--group-suffix` after a rebuild under new
    /// group ids); a suffix that could not be part of a group id is a usage error before anything runs.
    func testReplayRefusesAGroupSuffixThatIsNoGroupIdPart() throws {
        let (status, output) = try run(["replay", "--stage", "membership", "--from", "earliest", "--group-suffix", "re build!"], [:])
        XCTAssertEqual(status, 2, output)
        XCTAssertTrue(output.contains("--group-suffix"), output)
    }

    func testConfigListsARolesSettings() throws {
        let (status, output) = try run(["config", "signer"], [:])
        XCTAssertEqual(status, 0, output)
        let listed = Set(output.split(separator: "\n").filter { !$0.hasPrefix(" ") }.compactMap { $0.split(separator: " ").first.map(String.init) })
        XCTAssertEqual(listed, Set(Setting.all.filter { $0.roles.contains(.signer) }.map(\.name)))
        XCTAssertTrue(output.contains("STORELEDGER_SIGNING_KEYS (--keys)  comma-separated list, secret"), output)
        XCTAssertNotEqual(try run(["config", "nobody"], [:]).0, 0)
    }

    /// A setting's flag (`storeledger config` and docs/configuration.md show it) is an option of every
    /// command that runs as one of its roles: the documented `--catalog`, `--key-id`, ... are never
    /// "unknown option".
    func testEveryDocumentedFlagIsAcceptedByTheCommandsOfItsRoles() throws {
        let commands: [ProcessRole: [[String]]] = [
            .ingest: [["ingest"]], .decode: [["worker", "decode"]], .dedupe: [["worker", "dedupe"]],
            .classify: [["worker", "classify"]], .membership: [["worker", "membership"]], .relay: [["worker", "relay"]],
            .webhooks: [["worker", "webhooks"]], .consumption: [["worker", "consumption"]],
            .recover: [["worker", "recover"], ["recover"]], .signer: [["signer"]], .dev: [["dev"]], .doctor: [["doctor"]],
        ]
        var refused: [String] = []
        for setting in Setting.all {
            guard let flag = setting.flag else { continue }
            for role in setting.roles.sorted() {
                for argv in commands[role] ?? [] {
                    let (status, output) = try run(argv + ["--\(flag)", "1", "--check-arguments"], [:])
                    if status != 0, output.contains("--\(flag)") { refused.append("\(argv.joined(separator: " ")) --\(flag)") }
                }
            }
        }
        XCTAssertEqual(refused, [], "documented flags refused as unknown")
    }

    /// The binary with only `extra` (and PATH) in its environment; standard output and error together.
    private func run(_ arguments: [String], _ extra: [String: String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        process.environment = extra.merging(["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"]) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
