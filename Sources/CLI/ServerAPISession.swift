import AppStoreServerAPI
import AppleDecoding
import Configuration
import Domain
import Foundation
import Kafka
import Runtime

/// What every process that calls the App Store Server API needs, built one way: the verifier of
/// Apple's signed answers (the decode worker's settings), the sealed token exchange with the signer
/// (this process never sees the key), and the client. `close` ends the exchange.
final class ServerAPISession: Sendable {
    let client: AppStoreServerAPIClient
    let verifier: SignedDataVerifier
    let bundleId: String
    let environments: [AppStoreEnvironment]
    let exchange: SignerExchange
    /// The signer's tokens (cached until shortly before they expire).
    let tokens: CachingTokenProvider

    init(kafka: KafkaConfig, keyId: String?, maxPages: Int = 50) throws {
        let decoding = try AppleDecodingConfiguration(Environment.read(DecodingConfiguration.init))
        try decoding.validate()
        guard let bundleId = decoding.bundleId, !decoding.appleRoots.isEmpty else {
            throw UsageError("\(Setting.appleRoots) and \(Setting.bundleId) are required: every answer from Apple is verified")
        }
        verifier = try SignedDataVerifier(roots: decoding.appleRoots, bundleId: bundleId, appAppleId: decoding.appAppleId,
                                          environments: decoding.environments, strictChecks: decoding.strictX509)
        self.bundleId = bundleId
        environments = decoding.environments.filter { !$0.isLocal }
        exchange = try SignerExchange(kafka: kafka)
        // Before any token request, so the group join (seconds) never eats a request's deadline.
        guard exchange.awaitReader(deadlineMs: currentTimeMs() + 30_000) else {
            exchange.close()
            throw SignerExchangeError("the sign reply topic could not be read within 30 s (is the broker up?)")
        }
        tokens = CachingTokenProvider(fetch: SignerTokenProvider(bundleId: bundleId, keyId: keyId, timeoutMs: 10_000,
                                                                     exchange: exchange.exchange).token)
        var settings = AppStoreServerAPIClient.Settings(baseURLs: try RecoveryTime.baseURLs(Environment.variables))
        settings.maxPages = maxPages
        client = AppStoreServerAPIClient(settings: settings, tokens: tokens, verifier: verifier)
    }

    convenience init(_ arguments: Arguments, clientId: String, maxPages: Int = 50) throws {
        try self.init(kafka: try Environment.kafka(arguments, clientId: clientId),
                      keyId: Environment.value(arguments, option: "key-id", setting: .apiKeyId), maxPages: maxPages)
    }

    func close() { exchange.close() }
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
