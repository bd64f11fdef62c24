import Configuration
import Foundation
import Postgres
import Runtime
import Stages
import Store

extension WorkerCommand {
    /// `storeledger worker relay`: publishes the membership outbox to storeledger.membership.events.
    func runRelay(_ arguments: Arguments) throws -> Int32 {
        let settings = try Environment.read(arguments, RelayConfiguration.init)
        guard let url = settings.databaseURL else { throw UsageError("the relay needs --database-url or DATABASE_URL") }
        var config = OutboxRelayConfig(kafka: try Environment.kafka(arguments, clientId: "storeledger-relay"), databaseURL: url)
        config.crashAfterPublishFlag = settings.crashFlag
        if let hours = settings.outboxRetentionHours { config.retention = hours == 0 ? nil : .seconds(Int64(hours) * 3_600) }
        let relay = OutboxRelay(config: config)
        return try runServices(relay, reason: { "waiting for the relay lock or the broker" }, arguments,
                               logger: Logger(component: "worker.relay"))
    }
}

extension WorkerCommand {
    /// `storeledger worker webhooks`: delivers the events to the endpoints of Setting.webhooks.
    func runWebhooks(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("webhooks need --database-url or DATABASE_URL") }
        let config = try WebhooksCommand.loadConfig(arguments)
        guard !config.endpoints.isEmpty else { throw UsageError("no webhook endpoints configured") }
        let service = WebhookDeliveryService(config: config, databaseURL: url)
        return try runServices(service, reason: { "starting" }, arguments, logger: Logger(component: "worker.webhooks"))
    }
}

/// `storeledger webhooks list|show|resend`: the per-endpoint delivery log for operators (JSON lines).
struct WebhooksCommand: CLICommand {
    let name = "webhooks"
    let summary = "Webhook deliveries: `list` endpoints with pending/delivered/given-up counts, `show ENDPOINT [ENTRY_ID]` the attempt log, `resend ENDPOINT ENTRY_ID...` events again."
    let usage = "list | show ENDPOINT [ENTRY_ID] | resend ENDPOINT ENTRY_ID... [--database-url URL]"
    let optionNames: Set<String> = ["database-url", "webhooks"]

    static func loadConfig(_ arguments: Arguments) throws -> WebhookConfig {
        guard let path = try Environment.read(arguments, RelayConfiguration.init).webhooksPath else {
            throw UsageError("no webhook configuration: pass --webhooks FILE or set \(Setting.webhooks)")
        }
        do { return try WebhookConfig.load(path: path, environment: Environment.variables) } catch let error as WebhookConfigError { throw UsageError(error.description) }
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        let store = WebhookStore(try PGConnection(url: url))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        func line<T: Encodable>(_ value: T) throws { print(String(decoding: try encoder.encode(value), as: UTF8.self)) }
        let positionals = arguments.positionals
        switch positionals.first {
        case "list":
            for summary in try store.summaries() { try line(summary) }
        case "show":
            guard positionals.count == 2 || positionals.count == 3 else { throw UsageError("show ENDPOINT [ENTRY_ID]") }
            let entry = try positionals.count == 3 ? Self.entryId(positionals[2]) : nil
            // Every attempt, a page at a time.
            var shown = 0
            while true {
                let page = try store.log(endpoint: positionals[1], entryId: entry, limit: 1_000, offset: shown)
                for attempt in page { try line(attempt) }
                shown += page.count
                if page.count < 1_000 { break }
            }
        case "resend":
            guard positionals.count >= 3 else { throw UsageError("resend ENDPOINT ENTRY_ID...") }
            for text in positionals.dropFirst(2) {
                let id = try Self.entryId(text)
                let found = try store.resend(endpoint: positionals[1], entryId: id)
                try line(["entryId": "\(id)", "resent": found ? "yes" : "no such delivery"])
            }
        default:
            throw UsageError("name an action: list, show or resend")
        }
        return 0
    }

    /// `123` or `ledger-123` (the event id).
    static func entryId(_ text: String) throws -> Int64 {
        guard let id = Int64(text.hasPrefix("ledger-") ? String(text.dropFirst(7)) : text) else {
            throw UsageError("\(text) is not a ledger entry id")
        }
        return id
    }
}
