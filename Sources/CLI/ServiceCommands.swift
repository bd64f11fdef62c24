import AppleDecoding
import Configuration
import Domain
import Foundation
import HTTPServer
import Ingest
import Kafka
import LocalStack
import Postgres
import Runtime
import Stages
import Store
import Synchronization

struct BrokerCommand: CLICommand {
    let name = "broker"
    let summary = "Host the embedded Kafka-protocol broker (librdkafka's mock cluster) on loopback and create the pipeline's topics. With --admin-port, /readyz answers 200 once every topic exists and a client read their metadata (how callers learn it is ready; --port fixes the Kafka port); --control-port opens the fault-injection channel (docs/configuration.md); stops on SIGINT/SIGTERM. Memory only: for development, demos and tests."
    let usage = "[--port P] [--brokers N] [--partitions N] [--control-port P] [--admin-port P] [--admin-host H]"
    let optionNames: Set<String> = ["port", "brokers", "partitions", "control-port", "admin-port", "admin-host"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let port = try arguments.value("port").map { _ in try arguments.int("port", default: 0) }
        let brokers = try arguments.int("brokers", default: 1)
        let partitions = try arguments.int("partitions", default: 12)
        guard brokers >= 1, partitions >= 1 else { throw UsageError("--brokers and --partitions must be at least 1") }
        let stop = StopSignal()
        let logger = Logger(component: "broker")
        stop.installSignalHandlers(logger: logger)
        let broker = try EmbeddedBroker(brokers: brokers, port: port)
        for topic in Topic.all {
            try broker.createTopic(topic, partitions: Int32(partitions), replicationFactor: Int32(min(brokers, 3)))
        }
        let metrics = Metrics.shared
        for id in 1...brokers { metrics.set("storeledger_broker_up", ["broker": String(id)], to: 1) }
        for topic in Topic.all { metrics.set("storeledger_broker_partitions", ["topic": topic], to: Double(partitions)) }
        let control = try arguments.value("control-port").map { _ in try faultChannel(broker, port: try arguments.int("control-port", default: 0), logger: logger) }
        // /healthz, /readyz and /metrics like every other process (STYLE.md practice 14), on request only.
        // Ready only once a client has seen every topic's partitions through the bootstrap address.
        let verified = Atomic<Bool>(false)
        let admin = try arguments.value("admin-port").map { _ in
            let port = try arguments.int("admin-port", default: 0)
            guard (0...65535).contains(port) else { throw UsageError("--admin-port must be 0...65535") }
            let server = AdminServer(host: arguments.value("admin-host") ?? "127.0.0.1", port: port) {
                verified.load(ordering: .acquiring) ? [] : ["broker: topics not confirmed by a client yet"]
            }
            try server.start()
            logger.info("admin_listening", ["port": .of(server.port)])
            return server
        }
        try BrokerReadiness.confirmTopics(bootstrap: broker.bootstrapServers, partitions: Int32(partitions), stop: stop)
        verified.store(true, ordering: .releasing)
        let records = admin.map { _ in RecordCounts(bootstrap: broker.bootstrapServers, partitions: Int32(partitions)) }
        records?.start()
        // For people only: callers learn readiness from /readyz (and chose the ports themselves).
        print("broker: kafka \(broker.bootstrapServers)" + (control.map { ", fault channel http://127.0.0.1:\($0.boundPort)" } ?? ""))
        fflush(nil)
        logger.info("broker_ready", ["bootstrap": .string(broker.bootstrapServers), "brokers": .of(brokers),
                                     "partitions": .of(partitions)])
        stop.wait()
        records?.stop()
        control?.stop()
        broker.close()
        logger.info("broker_stopped")
        return 0
    }

    /// The fault-injection channel (`BrokerFault`): loopback only, one thread, no bodies.
    private func faultChannel(_ broker: EmbeddedBroker, port: Int, logger: Logger) throws -> HTTPServer {
        guard (0...65535).contains(port) else { throw UsageError("--control-port must be 0...65535") }
        let server = HTTPServer(host: "127.0.0.1", port: port, threads: 1, maxBodyBytes: 0) { request, responder in
            var query: [String: String] = [:]
            for field in request.query { query[field.name] = field.value }
            switch BrokerFault.parse(method: request.method, path: request.path, query: query) {
            case .failure(let error):
                _ = responder.respond(.error(status: error.status, reason: error.reason))
            case .success(let fault):
                do {
                    try fault.apply(to: broker)
                    BrokerCommand.count(fault, brokers: broker.brokerCount)
                    logger.warning("broker_fault_injected", ["fault": .string("\(fault)")])
                    _ = responder.respond(.json(["applied": "\(fault)"]))
                } catch {
                    _ = responder.respond(.error(status: 500, reason: String(describing: error)))
                }
            }
        }
        try server.start()
        return server
    }

    /// `storeledger_broker_faults_total{fault}` and the up/down state per broker the faults leave.
    static func count(_ fault: BrokerFault, brokers: Int) {
        let metrics = Metrics.shared
        func ids(_ id: Int32) -> [Int32] { id == -1 ? Array(1...Int32(brokers)) : [id] }
        switch fault {
        case .down(let id):
            metrics.increment("storeledger_broker_faults_total", ["fault": "down"])
            for one in ids(id) { metrics.set("storeledger_broker_up", ["broker": String(one)], to: 0) }
        case .up(let id):
            metrics.increment("storeledger_broker_faults_total", ["fault": "up"])
            for one in ids(id) { metrics.set("storeledger_broker_up", ["broker": String(one)], to: 1) }
        case .roundTripTime:
            metrics.increment("storeledger_broker_faults_total", ["fault": "rtt"])
        case .requestErrors:
            metrics.increment("storeledger_broker_faults_total", ["fault": "request_errors"])
        case .clearErrors:
            metrics.increment("storeledger_broker_faults_total", ["fault": "clear_errors"])
        }
    }

    /// `storeledger_broker_topic_records{topic}`: the sum of each topic's high watermarks, refreshed
    /// every 2 s on a thread of its own by a client that joins no group (a broker that is down keeps
    /// the last value).
    final class RecordCounts: Sendable {
        private let bootstrap: String
        private let partitions: Int32
        private let stopped = DispatchSemaphore(value: 0)
        private let finished = DispatchSemaphore(value: 0)

        init(bootstrap: String, partitions: Int32) {
            self.bootstrap = bootstrap
            self.partitions = partitions
        }

        func start() {
            Thread.detachNewThread { [self] in
                defer { finished.signal() }
                guard let marks = try? TopicWatermarks(config: KafkaConfig(bootstrapServers: bootstrap, clientId: "storeledger-broker-metrics")) else { return }
                repeat {
                    for topic in Topic.all {
                        guard let high = try? marks.high(topic: topic, partitions: partitions) else { continue }
                        Metrics.shared.set("storeledger_broker_topic_records", ["topic": topic], to: Double(high.values.reduce(0, +)))
                    }
                } while stopped.wait(timeout: .now() + 2) == .timedOut
            }
        }

        func stop() {
            stopped.signal()
            _ = finished.wait(timeout: .now() + 5)
        }
    }
}

struct MigrateCommand: CLICommand {
    let name = "migrate"
    let summary = "Apply StoreLedger's versioned PostgreSQL migrations (idempotent; safe to run concurrently)."
    let usage = "[--database-url URL]   (or DATABASE_URL)"
    let optionNames: Set<String> = ["database-url"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let url = Environment.databaseURL(arguments) else { throw UsageError("no database: pass --database-url or set DATABASE_URL") }
        // No statement timeout: an index build on a large table may take long (connecting is still bounded).
        var options = PGOptions.process
        options.statementTimeoutMs = 0
        let applied = try Store.migrate(try PGConnection(url: url, options: options))
        Logger(component: "migrate").info("migrated", ["applied": .string(applied.map(String.init).joined(separator: ","))])
        return 0
    }
}

struct TopicsCommand: CLICommand {
    let name = "topics"
    let summary = "Create the pipeline's topics on a real Kafka cluster (existing topics are left as they are); show prints a stage topic's records as JSON."
    let usage = "[--bootstrap B] [--partitions N] [--replication N] | \(TopicShow.usage)"
    let optionNames: Set<String> = ["bootstrap", "partitions", "replication", "partition", "offset", "count"]

    func run(_ arguments: Arguments) throws -> Int32 {
        if arguments.positionals.first == "show" {
            guard arguments.positionals.count == 2 else { throw UsageError("show takes exactly one topic") }
            return try TopicShow.run(arguments, topic: arguments.positionals[1])
        }
        guard arguments.positionals.isEmpty else { throw UsageError("unknown action \(arguments.positionals[0]): show, or none to create") }
        let admin = try KafkaAdmin(config: try Environment.kafka(arguments, clientId: "storeledger-topics"))
        try admin.createTopics(Topic.all, partitions: Int32(try arguments.int("partitions", default: 12)),
                               replicationFactor: Int16(try arguments.int("replication", default: 1)), timeout: .seconds(30))
        Logger(component: "topics").info("topics_ready", ["topics": .string(Topic.all.joined(separator: ","))])
        return 0
    }
}

struct IngestCommand: CLICommand {
    let name = "ingest"
    let summary = "Serve the HTTP edge: Apple notifications, app receipts, membership read API, health and metrics."
    let usage = "[--host H] [--port P] [--threads N] [--max-body-bytes N] [--bootstrap B] [--database-url URL] [--catalog FILE] [--key-id ID]"
    let optionNames: Set<String> = ["host", "port", "threads", "max-body-bytes", "bootstrap", "database-url", "catalog", "key-id"]

    func run(_ arguments: Arguments) throws -> Int32 {
        var config = IngestConfig(kafka: try Environment.kafka(arguments, clientId: "storeledger-ingest"),
                                  databaseURL: Environment.databaseURL(arguments))
        config.host = arguments.value("host") ?? config.host
        let ingest = try Environment.read(arguments, IngestConfiguration.init)
        config.port = try arguments.int("port", default: ingest.port ?? config.port)
        config.threads = try arguments.int("threads", default: config.threads)
        config.maxBodyBytes = try arguments.int("max-body-bytes", default: config.maxBodyBytes)
        config.adminReads = config.databaseURL.map { AdminReads.routes(databaseURL: $0) }
        config.offers = OfferSettings(ingest)
        config.security = try EdgeSecuritySettings(Environment.read(arguments, EdgeConfiguration.init))
        if ingest.serverAPIRoutes {
            config.serverAPIAdmin = try AdminRefresh.routes(kafka: config.kafka, databaseURL: config.databaseURL,
                                                            keyId: Environment.value(arguments, option: "key-id", setting: .apiKeyId))
        }
        guard (1...KafkaLimits.maxValueBytes).contains(config.maxBodyBytes) else {
            throw UsageError("--max-body-bytes must be 1...\(KafkaLimits.maxValueBytes): a body must fit into a raw record and its dead letter")
        }
        // Edge limits (docs/security.md): per-address connections, idle (header) and body timeouts.
        config.maxConnectionsPerAddress = ingest.maxConnectionsPerAddress ?? config.maxConnectionsPerAddress
        config.maxConnections = ingest.maxConnections ?? config.maxConnections
        config.idleTimeoutSeconds = ingest.idleTimeoutSeconds ?? config.idleTimeoutSeconds
        if let body = ingest.bodyTimeoutSeconds { config.bodyTimeout = .seconds(body) }
        let stop = StopSignal()
        stop.installSignalHandlers(logger: Logger(component: "ingest"))
        let service = try IngestService(config: config, onProducerFailure: { stop.stop() })
        try service.start()
        print("ingest: http://\(config.host):\(service.port)")
        fflush(nil)
        stop.wait()
        service.stop()
        return service.producerHasFailed ? 1 : 0
    }
}

struct WorkerCommand: CLICommand {
    let name = "worker"
    let summary = "Run one pipeline stage as a consumer-group member: decode | dedupe | classify | membership; the membership events relay (relay) or webhook delivery (webhooks); consumption (answers CONSUMPTION_REQUEST) or recover (scheduled notification recovery)."
    let usage = "decode|dedupe|classify|membership|relay|webhooks|consumption|recover [--bootstrap B] [--database-url URL] [--catalog FILE] [--group G] [--admin-port P] [--admin-host H] [--webhooks FILE] [--interval S] [--lookback-hours H] [--key-id ID]"
    let optionNames: Set<String> = ["bootstrap", "database-url", "catalog", "group", "admin-port", "admin-host", "webhooks", "interval", "lookback-hours",
                                    "key-id"]
    static let stages = ["decode", "dedupe", "classify", "membership", "relay", "webhooks", "consumption", "recover"]
    /// The batch of a stage that calls Apple per record.
    static let callingBatch = 16

    func check(_ arguments: Arguments) throws {
        guard arguments.positionals.count == 1, let stageName = arguments.positionals.first else {
            throw UsageError("name exactly one stage")
        }
        guard Self.stages.contains(stageName) else { throw UsageError("unknown stage \(stageName)") }
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        let stageName = arguments.positionals[0]
        if stageName == "relay" { return try runRelay(arguments) }
        if stageName == "webhooks" { return try runWebhooks(arguments) }
        if stageName == "recover" { return try ScheduledRecovery.run(arguments) }
        var session: ServerAPISession?
        defer { session?.close() }
        let logic: any StageLogic
        var callsApplePerRecord = false
        // Deliberately wrong rules for the replay tests only (issue 13; docs/configuration.md).
        let wrongRules: WrongRules
        let process = try Environment.read(arguments, roles: roles(arguments), ProcessConfiguration.init)
        let stage = try Environment.read(arguments, StageConfiguration.init)
        do { wrongRules = try WrongRules.parse(process.testWrongRules) } catch {
            throw UsageError("\(Setting.testWrongRule): \(error.description)")
        }
        if !wrongRules.isEmpty { Logger(component: "worker.\(stageName)").warning("test_wrong_rule_active", ["rules": .string("\(wrongRules)")]) }
        switch stageName {
        case "decode":
            // The decode settings (Setting.all), validated at startup (docs/configuration.md).
            let decoding = try AppleDecodingConfiguration(Environment.read(arguments, DecodingConfiguration.init))
            logic = DecodeStage(decoder: try decoding.makeDecoder())
            callsApplePerRecord = decoding.verifyReceiptProductionURL != nil
        case "dedupe": logic = DedupeStage(rule: wrongRules.dedupe)
        case "classify": logic = ClassifyStage(catalog: try loadCatalog(stage.catalogPath), wrongRules: wrongRules)
        case "membership": logic = MembershipStage()
        case "consumption":
            callsApplePerRecord = true
            let policy = try ConsumptionPolicy(Environment.read(arguments, ConsumptionConfiguration.init))
            let api = try ServerAPISession(arguments, clientId: "storeledger-consumption")
            session = api
            logic = ConsumptionStage(policy: policy, databaseURL: stage.databaseURL) { transactionId, request, environment in
                api.client.sendConsumptionInformation(transactionId: transactionId, request, environment: environment)
            }
        default: throw UsageError("unknown stage \(stageName)")
        }
        var config = StageRunnerConfig(kafka: try Environment.kafka(arguments, clientId: "storeledger-\(stageName)"),
                                       databaseURL: stage.databaseURL,
                                       groupId: arguments.value("group") ?? "storeledger-\(stageName)")
        if logic.usesDatabase, config.databaseURL == nil { throw UsageError("stage \(stageName) needs --database-url or DATABASE_URL") }
        // A stage that calls Apple once per record, one after another (verifyReceipt, consumption
        // answers), takes small batches: 500 records at a second or more each would outlast
        // librdkafka's 300 s between polls, evict the member and start the same batch again, for ever.
        config.policy = try Environment.loopPolicy(arguments, maxBatch: callsApplePerRecord ? Self.callingBatch : 500)
        do {
            config.failpoints = try Failpoints.parse(process.failpoints)
            config.failpoints.logPath = process.failpointLog
            config.failpoints.maxLoggedCrashes = process.failpointMax
        } catch {
            throw UsageError(String(describing: error))
        }
        let runner = StageRunner(logic: logic, config: config)
        // Non-zero after a critical failure: the supervisor restarts the worker, which reads the uncommitted records again.
        return try runServices(runner, reason: { runner.loop.status.reason }, arguments, logger: Logger(component: "worker.\(stageName)"))
    }

    private func loadCatalog(_ path: String?) throws -> Catalog {
        guard let path else { return Catalog() }
        guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read catalog \(path)") }
        // Validated at start (docs/catalog.md): a bad catalog stops the worker with every problem listed.
        do { return try Catalog.load(json: [UInt8](data), source: path) } catch { throw UsageError(error.description) }
    }
}

/// Runs `main` in a ServiceGroup, behind an admin server (`/healthz`, `/readyz`, `/metrics`) when
/// `--admin-port` is given; SIGTERM, SIGINT and SIGHUP stop the group in reverse order.
func runServices(_ main: any Service, reason: @escaping @Sendable () -> String, _ arguments: Arguments, logger: Logger) throws -> Int32 {
    var services: [any Service] = []
    if arguments.value("admin-port") != nil {
        let port = try arguments.int("admin-port", default: 0)
        guard (0...65535).contains(port) else { throw UsageError("--admin-port must be 0...65535") }
        let admin = AdminServer(host: arguments.value("admin-host") ?? "127.0.0.1", port: port) {
            main.isReady ? [] : ["\(main.name): \(reason())"]
        }
        try admin.start()
        logger.info("admin_listening", ["port": .of(admin.port)])
        services.append(admin)
    }
    services.append(main)
    let stop = StopSignal()
    stop.installSignalHandlers(logger: logger)
    return ServiceGroup(services, logger: logger).run(until: stop)
}
