import Configuration
import Foundation
import Runtime

/// Kafka transport security for every process (docs/security.md, "Transport"): librdkafka's
/// `security.protocol`, `sasl.*` and `ssl.*` properties, passed through unchanged from
/// - environment variables: `KAFKA_SECURITY_PROTOCOL`, `KAFKA_SASL_<NAME>`, `KAFKA_SSL_<NAME>`
///   (lower-cased, `_` read as `.`: KAFKA_SSL_CA_LOCATION → ssl.ca.location), and
/// - `Setting.kafkaPropertiesFile`: `name=value` lines (`#` comments), so a SASL password
///   need not sit in the environment.
/// Other properties are refused: this is the security passthrough, not a way to retune clients.
/// Values never appear in errors or logs (they may be credentials).
public enum KafkaSecurity {
    public static func properties(_ settings: KafkaClientConfiguration) throws -> [String: String] {
        var properties: [String: String] = [:]
        if let path = settings.propertiesFile {
            guard let data = FileManager.default.contents(atPath: path), data.count <= 1 << 20 else {
                throw UsageError("\(Setting.kafkaPropertiesFile): cannot read \(path) (at most 1 MiB)")
            }
            for (number, raw) in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = raw.trimmingCharacters(in: .whitespaces)
                if line.isEmpty || line.hasPrefix("#") { continue }
                let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, !parts[0].isEmpty else { throw UsageError("\(Setting.kafkaPropertiesFile) line \(number + 1): expected name=value") }
                try allow(parts[0], from: Setting.kafkaPropertiesFile.name)
                properties[parts[0]] = parts[1]
            }
        }
        // The environment wins over the file, as everywhere else.
        for (name, value) in settings.securityVariables where !value.isEmpty {
            properties[String(name.dropFirst("KAFKA_".count)).lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        if let protocolName = properties["security.protocol"],
           !["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"].contains(protocolName.lowercased()) {
            throw UsageError("security.protocol must be plaintext, ssl, sasl_plaintext or sasl_ssl")
        }
        return properties
    }

    private static func allow(_ name: String, from source: String) throws {
        guard name == "security.protocol" || name.hasPrefix("sasl.") || name.hasPrefix("ssl.") else {
            throw UsageError("\(source): only security.protocol, sasl.* and ssl.* are accepted, not \(name)")
        }
    }
}
