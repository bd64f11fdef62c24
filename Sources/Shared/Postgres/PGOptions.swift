import Foundation

/// Client-side limits every connection gets (docs/configuration.md, "PostgreSQL"), so an
/// unreachable or hung server turns into an error the caller can classify as an outage instead
/// of a thread blocked for minutes: libpq's `connect_timeout`, the session's `statement_timeout`,
/// and TCP keepalives so a peer that vanished without a FIN (host down, network cut) is noticed.
public struct PGOptions: Sendable, Equatable {
    /// libpq `connect_timeout` in seconds (libpq's minimum effective value is 2).
    public var connectTimeoutSeconds = 5
    /// The session's `statement_timeout` in milliseconds; 0 disables it.
    public var statementTimeoutMs = 30_000
    /// `keepalives_idle` in seconds (then 3 probes 5 s apart).
    public var keepaliveIdleSeconds = 10

    public init() {}

    public static let connectTimeoutVariable = "STORELEDGER_PG_CONNECT_TIMEOUT_S"
    public static let statementTimeoutVariable = "STORELEDGER_PG_STATEMENT_TIMEOUT_MS"

    /// Reads and validates the settings; throws a message naming the variable and its range.
    public static func parse(_ environment: [String: String]) throws(PGOptionsError) -> PGOptions {
        var options = PGOptions()
        func number(_ name: String, _ range: ClosedRange<Int>) throws(PGOptionsError) -> Int? {
            guard let text = environment[name], !text.isEmpty else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw PGOptionsError(description: "\(name) must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return value
        }
        if let connect = try number(connectTimeoutVariable, 2...300) { options.connectTimeoutSeconds = connect }
        if let statement = try number(statementTimeoutVariable, 0...3_600_000) { options.statementTimeoutMs = statement }
        return options
    }

    /// What connections use unless given other options: this process's environment, validated
    /// at startup by the CLI (an invalid value stops the command there; here it falls back).
    public static let process: PGOptions = (try? parse(ProcessInfo.processInfo.environment)) ?? PGOptions()

    /// libpq keywords appended after the caller's URL (later keywords win in PQconnectdbParams).
    /// `options` sets the session parameters at connect time (no statement): the output formats
    /// this module parses, whatever the server's defaults, and the statement timeout. It replaces
    /// an `options` parameter of the URL.
    var connectKeywords: [(String, String)] {
        [("connect_timeout", String(connectTimeoutSeconds)), ("keepalives", "1"),
         ("keepalives_idle", String(keepaliveIdleSeconds)), ("keepalives_interval", "5"), ("keepalives_count", "3"),
         ("client_encoding", "UTF8"),
         ("options", "-c DateStyle=ISO,MDY -c TimeZone=UTC -c bytea_output=hex -c statement_timeout=\(statementTimeoutMs)")]
    }
}

public struct PGOptionsError: Error, CustomStringConvertible {
    public let description: String
}
