import Configuration
import Foundation
import Runtime

// `storeledger`: one binary, one subcommand per process role. main stays thin: parse, build, run.
let commands: [CLICommand] = [
    BrokerCommand(), TopicsCommand(), MigrateCommand(), IngestCommand(), WorkerCommand(), DevCommand(), BenchCommand(),
    DeadLetterCommand(), RecoverCommand(), RefreshCommand(), SupportCommand(), DoctorCommand(), ProbeCommand(), UserCommand(),
    WebhooksCommand(), ReportCommand(), CredentialsCommand(), ReplayCommand(), ConfigCommand(),
] + decodeCommands + offerCommands + simulatorCommands

func printUsage(_ commands: [CLICommand]) {
    var text = "usage: storeledger <command> [options]   (storeledger <command> --help for details)\n\ncommands:\n"
    for command in commands { text += "  \(command.name.padding(toLength: 10, withPad: " ", startingAt: 0)) \(command.summary)\n" }
    text += "\nenvironment: KAFKA_BOOTSTRAP_SERVERS, DATABASE_URL, \(Setting.catalog), \(Setting.v1SharedSecrets), \(Setting.apiKeys) (docs/security.md; storeledger config lists every setting)\n"
    FileHandle.standardOutput.write(Data(text.utf8))
}

let argv = Array(CommandLine.arguments.dropFirst())
guard let name = argv.first, name != "--help", name != "-h", name != "help" else {
    printUsage(commands)
    exit(argv.isEmpty ? 2 : 0)
}
guard let command = commands.first(where: { $0.name == name }) else {
    FileHandle.standardError.write(Data("storeledger: unknown command \(name)\n".utf8))
    printUsage(commands)
    exit(2)
}
exit(runCommand(command, Array(argv.dropFirst())))
