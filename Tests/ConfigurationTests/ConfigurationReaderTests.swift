import Configuration
import XCTest

/// The reader: defaults when nothing is set, bounds, flags over variables, every problem at once,
/// and no secret's value in any message.
final class ConfigurationReaderTests: XCTestCase {
    func testNothingSetGivesTheDocumentedDefaults() throws {
        var reader = ConfigurationReader(environment: [:])
        let ingest = IngestConfiguration(&reader), loop = LoopConfiguration(&reader), bench = BenchConfiguration(&reader)
        let process = ProcessConfiguration(&reader), kafka = KafkaClientConfiguration(&reader)
        XCTAssertNoThrow(try reader.validate())
        XCTAssertEqual(ingest, IngestConfiguration())
        XCTAssertEqual(ingest.offerSignTimeoutMs, 2000)
        XCTAssertFalse(ingest.serverAPIRoutes)
        XCTAssertEqual(loop, LoopConfiguration())
        XCTAssertNil(loop.maxAttempts, "unset: the loop keeps its own default")
        XCTAssertEqual([bench.members, bench.batch, bench.connections, bench.sessionTimeoutMs], [1, 500, 64, 6_000])
        XCTAssertEqual(process, ProcessConfiguration())
        XCTAssertNil(kafka.bootstrapServers)
        XCTAssertEqual(kafka.securityVariables, [:])
    }

    func testValuesAreTypedAndBounded() throws {
        var reader = ConfigurationReader(environment: [
            "STORELEDGER_LOOP_MAX_ATTEMPTS": "1000", "STORELEDGER_LOOP_BASE_BACKOFF_MS": "1", "STORELEDGER_PORT": "9090",
            "STORELEDGER_INGEST_SERVER_API": "on", "STORELEDGER_CODE_VERSION": String(repeating: "v", count: 101),
            "KAFKA_SSL_CA_LOCATION": "/ca.pem", "KAFKA_SECURITY_PROTOCOL": "ssl", "KAFKA_OTHER": "x", "STORELEDGER_PG_CONNECT_TIMEOUT_S": "",
        ])
        let loop = LoopConfiguration(&reader), ingest = IngestConfiguration(&reader), process = ProcessConfiguration(&reader)
        let kafka = KafkaClientConfiguration(&reader)
        XCTAssertNoThrow(try reader.validate())
        XCTAssertEqual(loop.maxAttempts, 1000)
        XCTAssertEqual(loop.baseBackoffMs, 1)
        XCTAssertEqual(ingest.port, 9090)
        XCTAssertTrue(ingest.serverAPIRoutes)
        XCTAssertNil(process.codeVersion, "longer than 100 bytes: the built-in version stays")
        XCTAssertNil(process.pgConnectTimeoutSeconds, "empty counts as unset")
        XCTAssertEqual(kafka.securityVariables, ["KAFKA_SSL_CA_LOCATION": "/ca.pem", "KAFKA_SECURITY_PROTOCOL": "ssl"])

        for (name, bad) in [("STORELEDGER_LOOP_MAX_ATTEMPTS", "0"), ("STORELEDGER_LOOP_MAX_ATTEMPTS", "1001"),
                            ("STORELEDGER_PG_CONNECT_TIMEOUT_S", "1"), ("STORELEDGER_KAFKA_LINGER_MS", "soon")] {
            var reader = ConfigurationReader(environment: [name: bad])
            _ = LoopConfiguration(&reader)
            _ = ProcessConfiguration(&reader)
            _ = KafkaClientConfiguration(&reader)
            XCTAssertThrowsError(try reader.validate(), "\(name)=\(bad)") { error in
                let problems = (error as? InvalidConfiguration)?.problems ?? []
                XCTAssertEqual(problems.map(\.setting), [name])
                XCTAssertTrue(problems.first?.message.contains(bad) == true, "a non-secret value is shown: \(problems)")
            }
        }
    }

    func testAFlagWinsOverItsVariable() {
        var reader = ConfigurationReader(environment: ["KAFKA_BOOTSTRAP_SERVERS": "env:9092", "STORELEDGER_PORT": "1"],
                                         flags: ["bootstrap": "flag:9092"])
        XCTAssertEqual(KafkaClientConfiguration(&reader).bootstrapServers, "flag:9092")
        XCTAssertEqual(IngestConfiguration(&reader).port, 1, "no --port: the variable")
    }

    func testEveryProblemIsReportedTogether() {
        var reader = ConfigurationReader(environment: [
            "STORELEDGER_LOOP_MAX_ATTEMPTS": "many", "STORELEDGER_HTTP_IDLE_TIMEOUT_S": "0", "STORELEDGER_LOG_LEVEL": "loud",
            "STORELEDGER_X509_STRICT": "maybe", "STORELEDGER_RATE_LIMIT_USER_PER_S": "0",
        ])
        reader.check(roles: [.ingest, .decode])
        _ = LoopConfiguration(&reader)
        _ = IngestConfiguration(&reader)
        _ = ProcessConfiguration(&reader)
        XCTAssertThrowsError(try reader.validate()) { error in
            let problems = (error as? InvalidConfiguration)?.problems ?? []
            XCTAssertEqual(Set(problems.map(\.setting)), ["STORELEDGER_LOOP_MAX_ATTEMPTS", "STORELEDGER_HTTP_IDLE_TIMEOUT_S", "STORELEDGER_LOG_LEVEL",
                                                          "STORELEDGER_X509_STRICT", "STORELEDGER_RATE_LIMIT_USER_PER_S"])
            XCTAssertEqual(problems.count, 5, "each problem once, though checked and read: \(problems)")
            XCTAssertTrue(String(describing: error).hasPrefix("5 configuration problems: "), "\(error)")
        }
    }

    func testOnlyTheRolesSettingsAreChecked() {
        var reader = ConfigurationReader(environment: ["STORELEDGER_NONCES_PER_HOUR": "lots", "STORELEDGER_FAILPOINT_MAX": "x"])
        reader.check(roles: [.ingest])
        _ = ProcessConfiguration(&reader)
        XCTAssertNoThrow(try reader.validate(roles: [.ingest]), "neither is read by ingest")
        XCTAssertThrowsError(try reader.validate(roles: [.dedupe]))
        reader.check(roles: [.signer])
        XCTAssertEqual(reader.problems.map(\.setting), ["STORELEDGER_FAILPOINT_MAX", "STORELEDGER_NONCES_PER_HOUR"])
    }

    func testASecretsValueIsNeverEchoed() {
        let pin = Setting("TEST_SECRET_PIN", .integer(1...9), roles: [.tools], secret: true, doc: "a secret number")
        let mode = Setting("TEST_SECRET_MODE", .choice(["a", "b"]), roles: [.tools], secret: true, doc: "a secret choice")
        let flag = Setting("TEST_SECRET_FLAG", .boolean, roles: [.tools], secret: true, doc: "a secret flag")
        let rate = Setting("TEST_SECRET_RATE", .decimal(1...2), roles: [.tools], secret: true, doc: "a secret rate")
        var reader = ConfigurationReader(environment: ["TEST_SECRET_PIN": "hunter2", "TEST_SECRET_MODE": "hunter3",
                                                       "TEST_SECRET_FLAG": "hunter4", "TEST_SECRET_RATE": "hunter5"])
        XCTAssertNil(reader.integer(pin))
        XCTAssertNil(reader.choice(mode))
        XCTAssertNil(reader.boolean(flag))
        XCTAssertNil(reader.decimal(rate))
        XCTAssertThrowsError(try reader.validate()) { error in
            let text = String(describing: error)
            XCTAssertEqual((error as? InvalidConfiguration)?.problems.count, 4)
            XCTAssertFalse(text.contains("hunter"), "a secret's value is never echoed: \(text)")
            XCTAssertTrue(text.contains("TEST_SECRET_PIN") && text.contains("not shown"), text)
        }
    }
}

/// The list itself: one entry per name, each with a role, a doc line and a default inside its bounds.
final class SettingListTests: XCTestCase {
    func testTheListIsConsistent() {
        XCTAssertEqual(Set(Setting.all.map(\.name)).count, Setting.all.count, "a name appears once")
        let flags = Setting.all.compactMap(\.flag)
        XCTAssertEqual(Set(flags).count, flags.count, "a flag belongs to one setting")
        for setting in Setting.all {
            XCTAssertFalse(setting.roles.isEmpty, "\(setting) names who reads it")
            XCTAssertFalse(setting.doc.isEmpty, "\(setting) has a doc line")
            XCTAssertEqual(Setting.named(setting.name), setting)
            if let bounds = setting.bounds, let value = setting.defaultValue.flatMap({ Int64($0) }) {
                XCTAssert(bounds.contains(value), "\(setting)'s default \(value) is within \(bounds)")
            }
            if case .choice(let choices) = setting.kind, let value = setting.defaultValue, value != "both" {
                XCTAssert(choices.contains(value), "\(setting)'s default is one of its choices")
            }
        }
        for secret in [Setting.databaseURL, .v1SharedSecrets, .signingKeys, .verifyReceiptPassword, .devAPIKey, .apiKey] {
            XCTAssertTrue(secret.isSecret, "\(secret) is secret")
        }
    }
}
