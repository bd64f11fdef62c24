import Foundation
import Kafka
import Runtime

/// One subcommand. `run` returns the process exit code: 0 ok, 1 failure, 2 usage error.
protocol CLICommand: Sendable {
    var name: String { get }
    var summary: String { get }
    var usage: String { get }
    var flagNames: Set<String> { get }
    var optionNames: Set<String> { get }
    func run(_ arguments: Arguments) throws -> Int32
    /// What `--check-arguments` validates beyond option names (positionals, sub-commands).
    func check(_ arguments: Arguments) throws
}

extension CLICommand {
    var flagNames: Set<String> { [] }
    func check(_ arguments: Arguments) throws {}
}

func runCommand(_ command: CLICommand, _ argv: [String]) -> Int32 {
    do {
        let arguments = try Arguments(argv, flagNames: command.flagNames.union(["help", "check-arguments"]))
        if arguments.has("help") {
            print("usage: storeledger \(command.name) \(command.usage)\n\n\(command.summary)")
            return 0
        }
        try arguments.rejectUnknown(allowed: command.optionNames.union(command.flagNames).union(["help", "check-arguments"]))
        try command.check(arguments)
        // A deployment check (compose files, unit files): the command line is valid, nothing runs.
        if arguments.has("check-arguments") {
            print("storeledger \(command.name): arguments ok")
            return 0
        }
        return try command.run(arguments)
    } catch let error as UsageError {
        FileHandle.standardError.write(Data("storeledger \(command.name): \(error)\nusage: storeledger \(command.name) \(command.usage)\n".utf8))
        return 2
    } catch {
        Logger(component: command.name).error("command_failed", ["error": .string(String(describing: error))])
        return 1
    }
}

/// Shared settings read from options first, then the environment.
struct Environment {
    static func value(_ arguments: Arguments, option: String, env: String) -> String? {
        arguments.value(option, orEnvironment: env)
    }

    static func kafka(_ arguments: Arguments, clientId: String) throws -> KafkaConfig {
        guard let bootstrap = value(arguments, option: "bootstrap", env: "KAFKA_BOOTSTRAP_SERVERS") else {
            throw UsageError("no Kafka bootstrap servers: pass --bootstrap or set KAFKA_BOOTSTRAP_SERVERS")
        }
        var config = KafkaConfig(bootstrapServers: bootstrap, clientId: clientId)
        // TLS and SASL towards the brokers (KafkaSecurity): applied last, like every raw property.
        config.extra.merge(try KafkaSecurity.properties()) { $1 }
        let environment = ProcessInfo.processInfo.environment
        if let session = environment["STORELEDGER_KAFKA_SESSION_TIMEOUT_MS"], let ms = Int64(session) {
            config.sessionTimeout = .milliseconds(ms)
            config.heartbeatInterval = .milliseconds(max(100, ms / 6))
        }
        // The embedded broker answers an empty fetch only after fetch.wait.max.ms: keep it short there.
        if let wait = environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"], let ms = Int64(wait) {
            config.fetchMaxWait = .milliseconds(ms)
        }
        // Producer linger.ms: a stage produces a batch's outputs at once and then waits for their
        // acknowledgements, and ingest answers only after its write is acknowledged, so every
        // millisecond of linger is on the ingest -> ledger path (once per hop).
        if let linger = environment["STORELEDGER_KAFKA_LINGER_MS"], let ms = Int64(linger), (0...1_000).contains(ms) {
            config.linger = .milliseconds(ms)
        }
        return config
    }

    /// The consumer loop's retry policy (docs/configuration.md, "The consumer loop"), validated here.
    static func loopPolicy(maxBatch: Int = 500) throws -> ConsumerLoopMachine.Policy {
        var policy = ConsumerLoopMachine.Policy()
        policy.maxBatch = maxBatch
        let environment = ProcessInfo.processInfo.environment
        func number(_ name: String, _ range: ClosedRange<Int64>) throws -> Int64? {
            guard let text = environment[name], !text.isEmpty else { return nil }
            guard let value = Int64(text), range.contains(value) else {
                throw UsageError("\(name) must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return value
        }
        if let attempts = try number("STORELEDGER_LOOP_MAX_ATTEMPTS", 1...1000) { policy.maxAttempts = Int(attempts) }
        if let base = try number("STORELEDGER_LOOP_BASE_BACKOFF_MS", 1...60_000) { policy.baseBackoff = .milliseconds(base) }
        if let cap = try number("STORELEDGER_LOOP_MAX_BACKOFF_MS", 1...600_000) { policy.maxBackoff = .milliseconds(cap) }
        guard policy.baseBackoff <= policy.maxBackoff else {
            throw UsageError("STORELEDGER_LOOP_BASE_BACKOFF_MS must not exceed STORELEDGER_LOOP_MAX_BACKOFF_MS")
        }
        return policy
    }

    static func databaseURL(_ arguments: Arguments) -> String? {
        value(arguments, option: "database-url", env: "DATABASE_URL")
    }
}
