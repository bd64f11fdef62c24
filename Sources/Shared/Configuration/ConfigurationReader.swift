import Foundation

/// The process's environment: the one place StoreLedger reads it. Everything else receives
/// values from a `ConfigurationReader` (or, spawning a child, passes this on with additions).
public enum ProcessEnvironment {
    public static var current: [String: String] { ProcessInfo.processInfo.environment }
}

/// A problem with one setting. Never holds a secret's value (`Setting.isSecret`).
public struct ConfigurationProblem: Sendable, Equatable, CustomStringConvertible {
    public let setting: String
    public let message: String
    public var description: String { "\(setting): \(message)" }
}

/// Every problem found, so an operator fixes them in one round rather than one per restart.
public struct InvalidConfiguration: Error, Sendable, Equatable, CustomStringConvertible {
    public let problems: [ConfigurationProblem]
    public var description: String {
        problems.count == 1 ? problems[0].description : "\(problems.count) configuration problems: " + problems.map(\.description).joined(separator: "; ")
    }
}

/// Reads settings from an environment (a dictionary, so tests pass their own) and parsed flags,
/// collecting problems instead of stopping at the first. Flags win over variables; an empty
/// value counts as unset. Build role configurations from it, then call `validate()`.
public struct ConfigurationReader: Sendable {
    public let environment: [String: String]
    public let flags: [String: String]
    public private(set) var problems: [ConfigurationProblem] = []

    public init(environment: [String: String], flags: [String: String] = [:]) {
        self.environment = environment
        self.flags = flags
    }

    /// One configuration read from `environment` and `flags`, or every problem found.
    public static func read<Value>(_ environment: [String: String], flags: [String: String] = [:], roles: Set<ProcessRole>? = nil,
                                   _ make: (inout ConfigurationReader) -> Value) throws(InvalidConfiguration) -> Value {
        var reader = ConfigurationReader(environment: environment, flags: flags)
        let value = make(&reader)
        try reader.validate(roles: roles)
        return value
    }

    /// The setting's text as given (flag first), `nil` when unset or empty.
    public func raw(_ setting: Setting) -> String? {
        if let flag = setting.flag, let value = flags[flag], !value.isEmpty { return value }
        guard let value = environment[setting.name], !value.isEmpty else { return nil }
        return value
    }

    public mutating func text(_ setting: Setting) -> String? { raw(setting) }

    /// The text without surrounding spaces (`nil` when nothing is left).
    public mutating func trimmed(_ setting: Setting) -> String? {
        raw(setting).map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Comma-separated values, trimmed, empty items dropped.
    public mutating func list(_ setting: Setting) -> [String] {
        (raw(setting) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// An integer within the setting's bounds; `nil` when unset or wrong (the problem is recorded).
    public mutating func integer(_ setting: Setting) -> Int64? {
        guard let text = trimmed(setting) else { return nil }
        let range = setting.bounds ?? Int64.min...Int64.max
        guard let value = Int64(text), range.contains(value) else {
            let bounds = range == Int64.min...Int64.max ? "an integer" : "an integer in \(range.lowerBound)...\(range.upperBound)"
            report(setting, "must be \(bounds), got \(shown(setting, text))")
            return nil
        }
        return value
    }

    /// A finite number within the setting's bounds; `nil` when unset or wrong.
    public mutating func decimal(_ setting: Setting) -> Double? {
        guard let text = trimmed(setting) else { return nil }
        let range: ClosedRange<Double> = if case .decimal(let bounds) = setting.kind { bounds } else { -Double.greatestFiniteMagnitude...Double.greatestFiniteMagnitude }
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            report(setting, "must be a number in \(range.lowerBound)...\(range.upperBound), got \(shown(setting, text))")
            return nil
        }
        return value
    }

    /// `true`/`false` (any case; also 1/0, yes/no, on/off); `nil` when unset or wrong.
    public mutating func boolean(_ setting: Setting) -> Bool? {
        guard let text = trimmed(setting) else { return nil }
        switch text.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default:
            report(setting, "must be true or false, got \(shown(setting, text))")
            return nil
        }
    }

    /// One of the setting's choices (in any case), as listed; `nil` when unset or unknown.
    public mutating func choice(_ setting: Setting) -> String? {
        guard let text = trimmed(setting) else { return nil }
        guard case .choice(let choices) = setting.kind else { return text }
        guard let chosen = choices.first(where: { $0 == text.lowercased() }) else {
            report(setting, "must be one of \(choices.joined(separator: ", ")), got \(shown(setting, text))")
            return nil
        }
        return chosen
    }

    /// Records a problem found by a check across settings (or by a module's own parser).
    public mutating func report(_ setting: Setting, _ message: String) {
        let problem = ConfigurationProblem(setting: setting.name, message: message)
        if !problems.contains(problem) { problems.append(problem) }
    }

    /// Checks the type and bounds of every listed setting the roles read that is set.
    public mutating func check(roles: Set<ProcessRole>) {
        for setting in Setting.all where !setting.roles.isDisjoint(with: roles) {
            switch setting.kind {
            case .integer: _ = integer(setting)
            case .decimal: _ = decimal(setting)
            case .boolean: _ = boolean(setting)
            case .choice: _ = choice(setting)
            case .text, .path, .url, .list: break
            }
        }
    }

    /// Throws every problem recorded so far; with `roles`, only those of settings the roles read.
    public func validate(roles: Set<ProcessRole>? = nil) throws(InvalidConfiguration) {
        let relevant = problems.filter { problem in
            guard let roles, let setting = Setting.named(problem.setting) else { return true }
            return !setting.roles.isDisjoint(with: roles)
        }
        guard relevant.isEmpty else { throw InvalidConfiguration(problems: relevant) }
    }

    /// A value as an error may show it: a secret's never.
    private func shown(_ setting: Setting, _ value: String) -> String {
        setting.isSecret ? "a value (not shown: secret)" : "\"\(value)\""
    }
}
