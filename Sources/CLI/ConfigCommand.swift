import Configuration
import Foundation
import Runtime

/// `storeledger config [ROLE]`: the settings of one role (or all), from the one list, so an
/// operator sees what a process reads without opening the documentation.
struct ConfigCommand: CLICommand {
    let name = "config"
    let summary = "List the settings (variable, flag, type, default, roles, secret) of one role, or of all: docs/configuration.md."
    var usage: String { "[" + ProcessRole.allCases.map(\.rawValue).joined(separator: "|") + "]" }
    let optionNames: Set<String> = []

    func check(_ arguments: Arguments) throws {
        guard arguments.positionals.count <= 1 else { throw UsageError("name at most one role") }
        if let role = arguments.positionals.first, ProcessRole(rawValue: role) == nil { throw UsageError("unknown role \(role)") }
    }

    func roles(_ arguments: Arguments) -> Set<ProcessRole> { [.tools] }

    func run(_ arguments: Arguments) throws -> Int32 {
        let role = arguments.positionals.first.flatMap(ProcessRole.init(rawValue:))
        var text = ""
        for setting in Setting.all where role.map(setting.roles.contains) ?? true {
            var line = setting.name
            if let flag = setting.flag { line += " (--\(flag))" }
            line += "  \(Self.describe(setting.kind))"
            if let value = setting.defaultValue { line += ", default \(value)" }
            if setting.isSecret { line += ", secret" }
            line += "  [\(setting.roles.sorted().map(\.rawValue).joined(separator: ","))]\n    \(setting.doc)\n"
            text += line
        }
        FileHandle.standardOutput.write(Data(text.utf8))
        return 0
    }

    private static func describe(_ kind: Setting.Kind) -> String {
        switch kind {
        case .text: "text"
        case .path: "path"
        case .url: "url"
        case .boolean: "true|false"
        case .integer(let range): range == Int64.min...Int64.max ? "integer" : "integer \(range.lowerBound)...\(range.upperBound)"
        case .decimal(let range): "number \(range.lowerBound)...\(range.upperBound)"
        case .choice(let choices): choices.joined(separator: "|")
        case .list: "comma-separated list"
        }
    }
}
