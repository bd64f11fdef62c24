import AppleDecoding
import Configuration
import Foundation
import Kafka
import Runtime
import Stages

extension ServerAPISession {
    /// From the command line: Kafka as every command reads it, the key id from --key-id or Setting.apiKeyId,
    /// the verifier's settings as the decode worker reads them.
    convenience init(_ arguments: Arguments, clientId: String, maxPages: Int = 50) throws {
        try self.init(kafka: try Environment.kafka(arguments, clientId: clientId),
                      keyId: Environment.value(arguments, option: "key-id", setting: .apiKeyId), maxPages: maxPages)
    }

    /// The same with Kafka and the key id given.
    convenience init(kafka: KafkaConfig, keyId: String?, maxPages: Int = 50) throws {
        try self.init(kafka: kafka, keyId: keyId, decoding: try AppleDecodingConfiguration(Environment.read(DecodingConfiguration.init)),
                      baseURLs: try RecoveryTime.baseURLs(Environment.read(ServerAPIConfiguration.init)), maxPages: maxPages)
    }
}

/// Prints a report as one JSON document (`--json`) or its text lines.
func printReport<Report: Encodable>(_ report: Report, key: String, json: Bool, text: () -> String) {
    let output: String
    if json {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        output = (try? encoder.encode([key: report])).map { String(decoding: $0, as: UTF8.self) + "\n" } ?? ""
    } else {
        output = text() + "\n"
    }
    FileHandle.standardOutput.write(Data(output.utf8))
}
