import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Synchronization
import Workers

/// `storeledger bench pipeline`: events/s through dedupe → classify → membership, the three stage
/// runners in this process (each its own consumer group, PostgreSQL transaction per poll batch, as
/// `storeledger worker` runs them), with the decoded topic pre-filled. Embedded broker and
/// PostgreSQL unless --bootstrap / --database-url are given.
///
/// The input: `--events` (default 100,000; --quick 10,000) decoded V2-style events over
/// events/5 subscriptions, two per user (appAccountToken): SUBSCRIBED, three DID_RENEW and a
/// REFUND in the last period. Every event causes exactly one ledger entry, plus one link per
/// subscription, so the run is complete when the ledger holds events + subscriptions entries.
enum PipelineBench {
    static let perSubscription = 5

    static func run(_ arguments: Arguments) throws -> Int32 {
        let events = arguments.has("quick") ? 10_000 : try arguments.int("events", default: 100_000)
        guard events >= perSubscription else { throw UsageError("--events must be at least \(perSubscription)") }
        let batch = Int(ProcessInfo.processInfo.environment["STORELEDGER_BENCH_BATCH"] ?? "") ?? 500
        let subscriptions = events / perSubscription
        let total = subscriptions * perSubscription
        let logger = Logger(component: "bench.pipeline")

        // Infrastructure: the embedded broker keeps 5 MiB per partition, so spread the topics wide.
        var broker: EmbeddedBroker?
        let bootstrap: String
        if let given = Environment.value(arguments, option: "bootstrap", env: "KAFKA_BOOTSTRAP_SERVERS") {
            bootstrap = given
        } else {
            let embedded = try EmbeddedBroker()
            for topic in Topic.all { try embedded.createTopic(topic, partitions: 32) }
            broker = embedded
            bootstrap = embedded.bootstrapServers
        }
        var postgres: EmbeddedPostgres?
        let databaseURL: String
        if let given = Environment.databaseURL(arguments) {
            databaseURL = given
        } else {
            let server = try EmbeddedPostgres.start()
            postgres = server
            databaseURL = server.url
        }
        defer {
            postgres?.stop()
            broker?.close()
        }
        let db = try PGConnection(url: databaseURL)
        try Migrator.migrate(db, Schema.migrations)
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let ledgerBefore = try ledgerCount(db)

        // Pre-fill the decoded topic.
        var kafka = KafkaConfig(bootstrapServers: bootstrap, clientId: "bench-pipeline")
        kafka.linger = .milliseconds(20)
        let fillStarted = ContinuousClock.now
        let bytes = try prefill(kafka: kafka, run: run, subscriptions: subscriptions)
        let fillTime = ContinuousClock.now - fillStarted
        logger.info("prefilled", ["events": .of(total), "bytes": .of(bytes)])

        // The three stages, as `storeledger worker` configures them.
        let stop = StopSignal()
        let logics: [any StageLogic] = [DedupeStage(), ClassifyStage(catalog: catalog), MembershipStage()]
        let failures = Mutex<[String]>([])
        let finished = DispatchGroup()
        let started = ContinuousClock.now
        for logic in logics {
            var config = StageRunnerConfig(kafka: kafka, databaseURL: databaseURL, groupId: "bench-\(run)-\(logic.name)")
            config.maxBatch = batch
            let runner = RunnerHandoff(runner: StageRunner(logic: logic, config: config), name: logic.name)
            finished.enter()
            let thread = Thread {
                defer { finished.leave() }
                do { try runner.runner.run(until: stop) } catch {
                    failures.withLock { $0.append("\(runner.name): \(error)") }
                    stop.stop()
                }
            }
            thread.stackSize = 4 << 20
            thread.start()
        }

        // Done when every event's entry and every subscription's link are in the ledger.
        let expected = ledgerBefore + total + subscriptions
        var firstEntry: ContinuousClock.Instant?
        var current = ledgerBefore
        let deadline = ContinuousClock.now + .seconds(max(120, total / 500))
        while current < expected, !stop.isStopped, ContinuousClock.now < deadline {
            _ = stop.wait(timeout: .milliseconds(100))
            current = try ledgerCount(db)
            if firstEntry == nil, current > ledgerBefore { firstEntry = .now }
        }
        let done = ContinuousClock.now
        stop.stop()
        finished.wait()
        if let failure = failures.withLock({ $0.first }) { throw PipelineBenchFailure("stage failed: \(failure)") }
        guard current >= expected else {
            throw PipelineBenchFailure("timed out: \(current - ledgerBefore) of \(expected - ledgerBefore) ledger entries")
        }
        let wall = seconds(done - started)
        let steady = seconds(done - (firstEntry ?? started))
        let figures: [(String, Double)] = [
            ("events", Double(total)),
            ("events_per_second_wall", Double(total) / wall),
            ("events_per_second_from_first_entry", Double(total) / steady),
            ("wall_seconds_including_group_joins", wall),
            ("seconds_from_first_ledger_entry", steady),
            ("ledger_entries", Double(current - ledgerBefore)),
            ("prefill_events_per_second", Double(total) / seconds(fillTime)),
            ("decoded_megabytes", Double(bytes) / 1_048_576),
            ("max_batch", Double(batch)),
        ]
        report(figures, json: arguments.has("json"))
        return 0
    }

    static let catalog = Catalog(
        bundleId: "com.example.bench",
        products: [
            CatalogProduct(id: "vip.premium.1m", kind: .autoRenewable, group: "vip", level: 1, durationDays: 30),
            CatalogProduct(id: "vip.standard.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
        ])

    /// Writes the decoded events, keyed by subscription like the decode stage does; returns the bytes written.
    static func prefill(kafka: KafkaConfig, run: String, subscriptions: Int) throws -> Int {
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        let encoder = JSONEncoder.pipeline
        let failed = Mutex<KafkaError?>(nil)
        var bytes = 0
        let t0: Int64 = 1_709_251_200_000, month: Int64 = 2_592_000_000
        for index in 0..<subscriptions {
            let otid = "\(run)-\(index)"
            let user = "bench-\(run)-\(index / 2)"
            for step in 0..<perSubscription {
                let start = t0 + Int64(index % 1_000) * 60_000 + Int64(min(step, perSubscription - 2)) * month
                var transaction = TransactionFacts(
                    transactionId: "\(otid)-\(min(step, perSubscription - 2))", originalTransactionId: otid,
                    webOrderLineItemId: "\(otid)-w\(min(step, perSubscription - 2))", productId: "vip.standard.1m",
                    bundleId: "com.example.bench", purchaseDateMs: start, originalPurchaseDateMs: t0, expiresDateMs: start + month,
                    quantity: 1, productType: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED",
                    appAccountToken: user, storefront: "USA", transactionReason: step == 0 ? "PURCHASE" : "RENEWAL",
                    price: 9_990, currency: "USD")
                let type: String
                switch step {
                case 0: type = "SUBSCRIBED"
                case perSubscription - 1:
                    type = "REFUND"
                    transaction.cancellationDateMs = start + month / 2
                    transaction.cancellationReason = "0"
                default: type = "DID_RENEW"
                }
                let uuid = "\(otid)-n\(step)"
                let event = AppleEvent(
                    eventId: "v2:\(uuid)", source: .notificationV2, environment: "Sandbox", bundleId: "com.example.bench",
                    subscriptionKey: otid,
                    notification: NotificationMeta(type: type, subtype: step == 0 ? "INITIAL_BUY" : nil, uuid: uuid,
                                                   signedDateMs: start + (step == perSubscription - 1 ? month / 2 : 0)),
                    transactions: [transaction], receivedAtMs: currentTimeMs())
                let value = [UInt8](try encoder.encode(event))
                bytes += value.count
                producer.send(topic: Topic.decoded, key: Array(otid.utf8), value: value) { result in
                    if case .failure(let error) = result { failed.withLock { $0 = $0 ?? error } }
                }
            }
        }
        try producer.flush(timeout: .seconds(120))
        if let error = failed.withLock({ $0 }) { throw error }
        return bytes
    }

    static func ledgerCount(_ db: PGConnection) throws -> Int {
        try db.query("SELECT count(*) AS n FROM ledger").first?.int("n") ?? 0
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func report(_ figures: [(String, Double)], json: Bool) {
        if json {
            let body = figures.map { "\"\($0.0)\": \(String(format: "%.3f", $0.1))" }.joined(separator: ", ")
            print("{\"suite\": \"pipeline\", \(body)}")
        } else {
            print("pipeline (dedupe → classify → membership, PostgreSQL commit per poll batch)")
            for (name, value) in figures {
                print("  \(name.padding(toLength: 38, withPad: " ", startingAt: 0)) \(String(format: value >= 100 ? "%.0f" : "%.2f", value))")
            }
        }
        fflush(nil)
    }
}

/// Safe: built on the main thread and handed to exactly one runner thread, which alone uses it.
private struct RunnerHandoff: @unchecked Sendable {
    let runner: StageRunner
    let name: String
}

struct PipelineBenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
