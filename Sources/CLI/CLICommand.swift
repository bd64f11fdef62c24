import Configuration
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
    /// Whose settings this invocation reads: they are validated at start (and by `--check-arguments`).
    func roles(_ arguments: Arguments) -> Set<ProcessRole>
}

extension CLICommand {
    var flagNames: Set<String> { [] }
    func check(_ arguments: Arguments) throws {}
    func roles(_ arguments: Arguments) -> Set<ProcessRole> { commandRoles(name, arguments) }
}

func runCommand(_ command: CLICommand, _ argv: [String]) -> Int32 {
    do {
        let arguments = try Arguments(argv, flagNames: command.flagNames.union(["help", "check-arguments"]))
        if arguments.has("help") {
            print("usage: storeledger \(command.name) \(command.usage)\n\n\(command.summary)")
            let roles = command.roles(arguments)
            let settings = Setting.all.filter { !$0.roles.isDisjoint(with: roles) }.map(\.name)
            if !settings.isEmpty { print("\nsettings (storeledger config \(roles.sorted().map(\.rawValue).joined(separator: " ")) explains each):\n  \(settings.joined(separator: ", "))") }
            return 0
        }
        try arguments.rejectUnknown(allowed: command.optionNames.union(command.flagNames).union(["help", "check-arguments"]))
        try command.check(arguments)
        try startProcess(roles: command.roles(arguments), arguments)
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

/// Shared settings read from options first, then the environment (the list: `Setting.all`).
struct Environment {
    /// This process's environment, for the modules' own parsers (decoding roots, credentials).
    static var variables: [String: String] { ProcessEnvironment.current }

    /// The setting as this process was given it (`nil` when unset or empty).
    static func given(_ setting: Setting) -> String? { ConfigurationReader(environment: variables).raw(setting) }

    static func value(_ arguments: Arguments, option: String, setting: Setting) -> String? {
        arguments.value(option) ?? given(setting)
    }

    /// A role's typed configuration from this process's settings (the flags of the list first);
    /// every problem found is one usage error.
    /// With `roles`, only problems of settings those roles read count (the others keep their defaults).
    static func read<Value>(_ arguments: Arguments, roles: Set<ProcessRole>? = nil, _ make: (inout ConfigurationReader) -> Value) throws -> Value {
        var flags: [String: String] = [:]
        for setting in Setting.all { if let flag = setting.flag, let value = arguments.value(flag) { flags[flag] = value } }
        return try read(flags: flags, roles: roles, make)
    }

    /// The same for settings that have no flag.
    static func read<Value>(flags: [String: String] = [:], roles: Set<ProcessRole>? = nil, _ make: (inout ConfigurationReader) -> Value) throws -> Value {
        do { return try ConfigurationReader.read(variables, flags: flags, roles: roles, make) } catch { throw UsageError(error.description) }
    }

    static func kafka(_ arguments: Arguments, clientId: String) throws -> KafkaConfig {
        let settings = try read(arguments, KafkaClientConfiguration.init)
        guard let bootstrap = settings.bootstrapServers else {
            throw UsageError("no Kafka bootstrap servers: pass --bootstrap or set KAFKA_BOOTSTRAP_SERVERS")
        }
        var config = KafkaConfig(bootstrapServers: bootstrap, clientId: clientId)
        // TLS and SASL towards the brokers (KafkaSecurity): applied last, like every raw property.
        config.extra.merge(try KafkaSecurity.properties(settings)) { $1 }
        if let ms = settings.sessionTimeoutMs {
            config.sessionTimeout = .milliseconds(ms)
            config.heartbeatInterval = .milliseconds(max(100, ms / 6))
        }
        // The embedded broker answers an empty fetch only after fetch.wait.max.ms: keep it short there.
        if let ms = settings.fetchWaitMs { config.fetchMaxWait = .milliseconds(ms) }
        // Producer linger.ms: a stage produces a batch's outputs at once and then waits for their
        // acknowledgements, and ingest answers only after its write is acknowledged, so every
        // millisecond of linger is on the ingest -> ledger path (once per hop).
        if let ms = settings.lingerMs { config.linger = .milliseconds(ms) }
        return config
    }

    /// The consumer loop's retry policy (docs/configuration.md, "The consumer loop"), validated here.
    static func loopPolicy(_ arguments: Arguments, maxBatch: Int = 500) throws -> ConsumerLoopMachine.Policy {
        var policy = ConsumerLoopMachine.Policy()
        policy.maxBatch = maxBatch
        let settings = try read(arguments, LoopConfiguration.init)
        if let attempts = settings.maxAttempts { policy.maxAttempts = attempts }
        if let base = settings.baseBackoffMs { policy.baseBackoff = .milliseconds(base) }
        if let cap = settings.maxBackoffMs { policy.maxBackoff = .milliseconds(cap) }
        guard policy.baseBackoff <= policy.maxBackoff else {
            throw UsageError("\(Setting.loopBaseBackoffMs) must not exceed \(Setting.loopMaxBackoffMs)")
        }
        return policy
    }

    static func databaseURL(_ arguments: Arguments) -> String? {
        value(arguments, option: "database-url", setting: .databaseURL)
    }
}
