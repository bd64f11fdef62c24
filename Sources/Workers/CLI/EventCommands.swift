import Foundation
import Runtime
import Workers

extension WorkerCommand {
    /// `storeledger worker relay`: publishes the membership outbox to storeledger.membership.events.
    func runRelay(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("the relay needs --database-url or DATABASE_URL") }
        var config = OutboxRelayConfig(kafka: try Environment.kafka(arguments, clientId: "storeledger-relay"), databaseURL: url)
        config.crashAfterPublishFlag = ProcessInfo.processInfo.environment["STORELEDGER_RELAY_CRASH_FLAG"]
        let relay = OutboxRelay(config: config)
        return try runServices(relay, reason: { "waiting for the relay lock or the broker" }, arguments,
                               logger: Logger(component: "worker.relay"))
    }
}
