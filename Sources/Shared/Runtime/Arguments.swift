import Configuration
import Foundation

/// A small command-line parser: `--name value`, `--name=value`, repeated options, flags and
/// positionals. Usage errors are thrown as `UsageError` so `main` can print help and exit 2.
public struct Arguments: Sendable {
    public private(set) var options: [String: [String]] = [:]
    public private(set) var flags: Set<String> = []
    public private(set) var positionals: [String] = []

    /// `flagNames` lists options that take no value (e.g. "json", "help").
    public init(_ argv: [String], flagNames: Set<String> = ["help"]) throws {
        var index = 0
        var onlyPositionals = false
        while index < argv.count {
            let arg = argv[index]
            index += 1
            if onlyPositionals || !arg.hasPrefix("--") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            var name = String(arg.dropFirst(2))
            var value: String?
            if let eq = name.firstIndex(of: "=") {
                value = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if flagNames.contains(name) {
                guard value == nil else { throw UsageError("--\(name) takes no value") }
                flags.insert(name)
                continue
            }
            if value == nil {
                guard index < argv.count else { throw UsageError("--\(name) needs a value") }
                value = argv[index]
                index += 1
            }
            options[name, default: []].append(value!)
        }
    }

    public func has(_ flag: String) -> Bool { flags.contains(flag) }
    public func value(_ name: String) -> String? { options[name]?.last }
    public func values(_ name: String) -> [String] { options[name] ?? [] }
    /// `--name`, else the setting's variable when set and not empty (an option wins over the environment).
    public func value(_ name: String, or setting: Setting) -> String? {
        value(name) ?? ConfigurationReader(environment: ProcessEnvironment.current).raw(setting)
    }

    public func int(_ name: String, default fallback: Int) throws -> Int {
        guard let text = value(name) else { return fallback }
        guard let number = Int(text) else { throw UsageError("--\(name) must be an integer, got \"\(text)\"") }
        return number
    }

    /// Rejects options the command does not know, so a typo never silently falls back to a default.
    public func rejectUnknown(allowed: Set<String>) throws {
        for name in options.keys where !allowed.contains(name) { throw UsageError("unknown option --\(name)") }
        for name in flags where !allowed.contains(name) { throw UsageError("unknown flag --\(name)") }
    }
}

public struct UsageError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
