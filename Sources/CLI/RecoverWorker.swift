import Foundation
import Kafka
import Runtime
import Stages

/// `storeledger worker recover`: its flags checked, then `RecoveryService` run like every worker
/// (readiness, metrics, SIGTERM).
enum ScheduledRecovery {
    static func run(_ arguments: Arguments) throws -> Int32 {
        let interval = try arguments.int("interval", default: 3600)
        let lookbackHours = try arguments.int("lookback-hours", default: 168)
        guard (1...86_400).contains(interval) else { throw UsageError("--interval must be 1...86400 seconds") }
        guard (1...(180 * 24 - 1)).contains(lookbackHours) else { throw UsageError("--lookback-hours must be 1...4319: Apple keeps 180 days") }
        guard let databaseURL = Environment.databaseURL(arguments) else {
            throw UsageError("worker recover needs --database-url or DATABASE_URL: it skips what the pipeline already saw")
        }
        let session = try ServerAPISession(arguments, clientId: "storeledger-recover-worker")
        defer { session.close() }
        let producer = try KafkaProducer(config: try Environment.kafka(arguments, clientId: "storeledger-recover-worker"))
        defer { producer.close() }
        let service = RecoveryService(client: session.client, environments: session.environments, producer: producer,
                                      databaseURL: databaseURL, interval: .seconds(interval), lookbackMs: Int64(lookbackHours) * 3_600_000)
        return try runServices(service, reason: { service.problem ?? "" }, arguments, logger: Logger(component: "worker.recover"))
    }
}
