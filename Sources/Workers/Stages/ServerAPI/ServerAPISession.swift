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
public final class ServerAPISession: Sendable {
    public let client: AppStoreServerAPIClient
    public let verifier: SignedDataVerifier
    public let bundleId: String
    public let environments: [AppStoreEnvironment]
    let exchange: SignerExchange
    /// The signer's tokens (cached until shortly before they expire).
    public let tokens: CachingTokenProvider

    /// - Parameters: decoding: the decode worker's settings; baseURLs: Apple's endpoints (or the simulator's).
    public init(kafka: KafkaConfig, keyId: String?, decoding: AppleDecodingConfiguration, baseURLs: APIBaseURLs, maxPages: Int = 50) throws {
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
        var settings = AppStoreServerAPIClient.Settings(baseURLs: baseURLs)
        settings.maxPages = maxPages
        client = AppStoreServerAPIClient(settings: settings, tokens: tokens, verifier: verifier)
    }

    public func close() { exchange.close() }
}
