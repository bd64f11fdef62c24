import Foundation
import Postgres
import XCTest

/// Contract: transport security settings reach the libraries that enforce them.
/// - Kafka: `KAFKA_SECURITY_PROTOCOL`, `KAFKA_SASL_*`, `KAFKA_SSL_*` and the properties file are
///   handed to librdkafka as `security.protocol`, `sasl.*`, `ssl.*` (a CA file that does not exist
///   stops the process at start, naming the setting, never echoing a SASL password); other
///   properties in the file are refused.
/// - PostgreSQL: `sslmode` in DATABASE_URL is honoured by libpq (`require` against a server
///   without TLS fails; `disable` connects).
final class TransportSecurityTests: XCTestCase {
    private func storeledger(_ arguments: [String], _ environment: [String: String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    func testKafkaSecuritySettingsReachLibrdkafka() throws {
        let password = "sasl-password-\(UUID().uuidString)"
        let refused = try storeledger(["topics", "--bootstrap", "127.0.0.1:1"], [
            "KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "KAFKA_SASL_MECHANISMS": "PLAIN", "KAFKA_SASL_USERNAME": "ingest",
            "KAFKA_SASL_PASSWORD": password, "KAFKA_SSL_CA_LOCATION": "/nonexistent/storeledger-ca.pem",
        ])
        XCTAssertNotEqual(refused.status, 0, refused.output)
        XCTAssertTrue(refused.output.contains("ssl.ca.location") || refused.output.contains("CA"), refused.output)
        XCTAssertFalse(refused.output.contains(password), "a SASL password is never echoed")

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("kafka-\(UUID().uuidString).properties")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data("# tuning is not security\nlinger.ms=1\n".utf8).write(to: file)
        let tuning = try storeledger(["topics", "--bootstrap", "127.0.0.1:1"], ["STORELEDGER_KAFKA_PROPERTIES_FILE": file.path])
        XCTAssertNotEqual(tuning.status, 0)
        XCTAssertTrue(tuning.output.contains("only security.protocol, sasl.* and ssl.* are accepted, not linger.ms"), tuning.output)

        try Data("security.protocol=ssl\nssl.ca.location=/nonexistent/from-file.pem\n".utf8).write(to: file)
        let fromFile = try storeledger(["topics", "--bootstrap", "127.0.0.1:1"], ["STORELEDGER_KAFKA_PROPERTIES_FILE": file.path])
        XCTAssertNotEqual(fromFile.status, 0, "the file's CA location reached librdkafka")

        let bogus = try storeledger(["topics", "--bootstrap", "127.0.0.1:1"], ["KAFKA_SECURITY_PROTOCOL": "carrier-pigeon"])
        XCTAssertNotEqual(bogus.status, 0)
        XCTAssertTrue(bogus.output.contains("security.protocol must be"), bogus.output)
    }

    func testPostgresSSLModeIsHonoured() throws {
        let server = try EmbeddedPostgres.start()
        defer { server.stop() }
        let separator = server.url.contains("?") ? "&" : "?"
        XCTAssertThrowsError(try PGConnection(url: server.url + separator + "sslmode=require"),
                             "the embedded server has no TLS: sslmode=require must refuse it")
        XCTAssertNoThrow(try PGConnection(url: server.url + separator + "sslmode=disable"))
    }
}
