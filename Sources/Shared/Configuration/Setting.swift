/// One setting a process reads at start: an environment variable, maybe a command-line flag that
/// overrides it, its type and bounds, its default, the roles that read it and whether it is secret.
/// `Setting.all` (Settings.swift) is the one list; docs/configuration.md documents each entry.
public struct Setting: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        case text
        /// A file or folder (read by the module that uses it).
        case path
        case url
        case boolean
        case integer(ClosedRange<Int64>)
        case decimal(ClosedRange<Double>)
        case choice([String])
        /// Comma-separated values.
        case list
    }

    public let name: String
    /// The option (`--bootstrap`) that wins over the variable, if any.
    public let flag: String?
    public let kind: Kind
    /// The default as documented; `nil` where unset means off, or the setting is required.
    public let defaultValue: String?
    public let roles: Set<ProcessRole>
    public let isSecret: Bool
    public let doc: String

    public init(_ name: String, _ kind: Kind, flag: String? = nil, default defaultValue: String? = nil, roles: Set<ProcessRole>,
                secret: Bool = false, doc: String) {
        self.name = name
        self.kind = kind
        self.flag = flag
        self.defaultValue = defaultValue
        self.roles = roles
        self.isSecret = secret
        self.doc = doc
    }

    /// The variable's name, so messages can say `"\(Setting.catalog) is not readable"`.
    public var description: String { name }

    public var bounds: ClosedRange<Int64>? {
        if case .integer(let range) = kind { return range }
        return nil
    }
}

/// Who reads a setting: each `storeledger` command role, and the tools around them.
public enum ProcessRole: String, Sendable, Hashable, CaseIterable, Comparable {
    case ingest, decode, dedupe, classify, membership, consumption, relay, webhooks, signer, recover, refresh, replay
    case support, doctor, migrate, broker, dev, simulator, bench, fuzz, tools

    public static func < (a: ProcessRole, b: ProcessRole) -> Bool { a.rawValue < b.rawValue }

    /// The consumer-group members built on the one consumer loop.
    public static let loopMembers: Set<ProcessRole> = [.decode, .dedupe, .classify, .membership, .consumption, .signer]
    /// Every process that talks to Kafka.
    public static let kafkaClients: Set<ProcessRole> = loopMembers.union([.ingest, .relay, .recover, .refresh, .support, .doctor, .replay, .tools, .bench])
    /// Every process that talks to PostgreSQL.
    public static let databaseClients: Set<ProcessRole> = [.ingest, .dedupe, .membership, .consumption, .relay, .webhooks, .recover, .refresh,
                                                    .replay, .support, .migrate, .tools, .dev, .bench]
    /// Every long-running process of a deployment and the tools beside them.
    public static let everyProcess: Set<ProcessRole> = Set(allCases).subtracting([.fuzz])
    /// Whoever verifies Apple's signed data with the decode worker's settings.
    public static let appleVerifiers: Set<ProcessRole> = [.decode, .ingest, .recover, .refresh, .support, .doctor, .consumption, .tools]
}
