import Configuration
import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Stages

/// `storeledger recover notifications`: pages through Apple's notification history for a window,
/// and feeds into `storeledger.notifications.raw` every notification the pipeline never saw, each
/// `notificationUUID` once, with header `storeledger.provenance: recovered`. Tokens come from the
/// signer (sealed, over the sign topics); this process never sees the key.
struct RecoverCommand: CLICommand {
    let name = "recover"
    let summary = "Recover missed App Store notifications: page Apple's notification history (App Store Server API) and feed what StoreLedger never ingested into the raw topic, with a report."
    let usage = """
    notifications --from T --to T [--only-failures] [--environment Production,Sandbox] [--dry-run] [--json] \
    [--bootstrap B] [--database-url URL] [--key-id ID] [--max-pages N]
       T: ms since 1970 or ISO 8601 (2026-11-30T00:00:00Z); Apple keeps 180 days.
       Environment: \(Setting.appleRoots), \(Setting.bundleId), \(Setting.appAppleId), \(Setting.environment) (as decode),
       \(Setting.apiProductionURL) / \(Setting.apiSandboxURL) (default Apple's), \(Setting.apiKeyId),
       KAFKA_BOOTSTRAP_SERVERS, DATABASE_URL (optional: skips notifications the dedupe stage already saw).
    """
    let optionNames: Set<String> = ["from", "to", "environment", "bootstrap", "database-url", "key-id", "max-pages"]
    let flagNames: Set<String> = ["only-failures", "dry-run", "json"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positionals == ["notifications"] else { throw UsageError("expected: recover notifications --from T --to T") }
        guard let fromText = arguments.value("from"), let from = RecoveryTime.parse(fromText),
              let toText = arguments.value("to"), let to = RecoveryTime.parse(toText) else {
            throw UsageError("--from and --to are required: ms since 1970 or ISO 8601")
        }
        let session = try ServerAPISession(arguments, clientId: "storeledger-recover", maxPages: try arguments.int("max-pages", default: 50))
        defer { session.close() }
        let environments = try arguments.value("environment").map(RecoveryTime.environments) ?? session.environments
        let producer = arguments.has("dry-run") ? nil : try KafkaProducer(config: try Environment.kafka(arguments, clientId: "storeledger-recover"))
        defer { producer?.close() }
        let database = try Environment.databaseURL(arguments).map { try PGConnection(url: $0) }
        defer { database?.close() }
        let reports = try RecoveryPass.recover(client: session.client, environments: environments, from: from, to: to,
                                               onlyFailures: arguments.has("only-failures"), producer: producer, database: database)
        Self.print(reports, json: arguments.has("json"))
        return reports.allSatisfy(\.complete) ? 0 : 1
    }

    static func print(_ reports: [RecoveryReport], json: Bool) {
        printReport(reports, key: "recovery", json: json) { reports.map(\.summary).joined(separator: "\n") }
    }
}
