import Configuration
import Foundation
import Postgres
import Runtime
import Simulator

/// Reads and validates the settings every process applies (docs/configuration.md), checks the
/// type and bounds of every setting the command's roles read, and applies the process-wide ones
/// once: log level, supervising parent, code version, PostgreSQL limits and binaries. Every
/// problem found is reported together, before anything runs (and by `--check-arguments`).
func startProcess(roles: Set<ProcessRole>, _ arguments: Arguments) throws {
    let process = try Environment.read(arguments, roles: roles) { reader in
        reader.check(roles: roles)
        return ProcessConfiguration(&reader)
    }
    if let level = process.logLevel.flatMap(LogLevel.named) { Logger.setMinimumLevel(level) }
    StopSignal.configureSupervisingParent(process.parentPid)
    CodeVersion.configure(process.codeVersion)
    PGOptions.configureProcess(connectTimeoutSeconds: process.pgConnectTimeoutSeconds, statementTimeoutMs: process.pgStatementTimeoutMs,
                               applicationName: (["storeledger"] + roles.map(\.rawValue).sorted()).joined(separator: "-"),
                               preparesStatements: process.pgPrepareStatements)
    EmbeddedPostgres.configureBinDirectory(process.pgBinDirectory)
    // The simulator's app-side requests present this key unless a run sets its own.
    if let key = try Environment.read(SimulatorConfiguration.init).apiKey { IngestCredential.apiKey = key }
}

/// Whose settings a command reads, by its name (and a worker's stage).
func commandRoles(_ name: String, _ arguments: Arguments) -> Set<ProcessRole> {
    switch name {
    case "worker": return Set(arguments.positionals.prefix(1).compactMap(ProcessRole.init(rawValue:)))
    case "simulate": return [.simulator]
    case "offer": return [.tools]
    default: return ProcessRole(rawValue: name).map { [$0] } ?? [.tools]
    }
}
