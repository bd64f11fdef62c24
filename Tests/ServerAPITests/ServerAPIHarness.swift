import AppStoreServerAPI
import AppleDecoding
import Crypto
import Foundation
import Signer
@testable import Simulator
import Synchronization
import XCTest

/// One simulated App Store serving the App Store Server API on loopback, a signer-side token
/// issuer holding a freshly generated In-App Purchase key, and a client wired to both exactly as
/// production wires it to Apple (real HTTP, real ES256 tokens, real chain verification). Sleeps
/// are recorded instead of slept, so Retry-After and backoff are asserted, not waited for.
final class ServerAPIHarness: @unchecked Sendable {
    // @unchecked: every stored property is immutable after init and itself thread-safe.
    static let pki = Result { try SimulatorPKI.generate() }
    static let keyId = "SIMIAPKEY1"
    static let issuerId = "6f1b1f4e-0000-4000-8000-000000000001"

    let store: AppStore
    let emitter: WireEmitter
    let server: ServerAPIServer
    let key: P256PrivateKey
    let issuer: APITokenIssuer
    let verifier: SignedDataVerifier
    let slept = SleepLog()
    let nowMs = Int64(Date().timeIntervalSince1970 * 1000)

    init(pageSize: Int = 3, testNotificationSink: (@Sendable (Delivery) -> Bool)? = nil) throws {
        let pki = try Self.pki.get()
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, catalog: SimulatorCatalog.standard, runId: Int.random(in: 0..<900_000))
        store = AppStore(config: config)
        emitter = WireEmitter(pki: pki, config: config)
        key = try P256PrivateKey.generate()
        issuer = APITokenIssuer(keys: try SigningKeyRing(keys: [Self.keyId: key]), issuerId: Self.issuerId)
        server = ServerAPIServer(store: store, pki: pki,
                                 policy: APITokenPolicy(publicKey: key.publicKey, bundleId: config.bundleId, keyId: Self.keyId, issuerId: Self.issuerId),
                                 pageSize: pageSize, testNotificationSink: testNotificationSink)
        try server.start()
        verifier = try SignedDataVerifier(roots: [pki.chain.root.certificate], bundleId: config.bundleId,
                                          appAppleId: config.appAppleId, environments: [.production, .sandbox])
    }

    deinit { server.stop() }

    /// The signer's answer as a token provider (in production it arrives from the signer process).
    static func tokens(_ issuer: APITokenIssuer, bundleId: String) -> any APITokenProvider {
        CachingTokenProvider {
            do throws(SignerError) {
                let minted = try issuer.mint(bundleId: bundleId)
                return .success(APIToken(value: minted.token, expiresAt: minted.expiresAt))
            } catch {
                return .failure(APIFailure(.noToken, error.description))
            }
        }
    }

    func client(tokens: (any APITokenProvider)? = nil, verifier: SignedDataVerifier? = nil, maxPages: Int = 50,
                retry: RetryPolicy = RetryPolicy(maxAttempts: 4, initialBackoff: .milliseconds(10), maxBackoff: .milliseconds(40), maxRetryAfter: .seconds(30)),
                transport: any APITransport = URLSessionAPITransport()) -> AppStoreServerAPIClient {
        let settings = AppStoreServerAPIClient.Settings(
            baseURLs: APIBaseURLs(production: URL(string: server.baseURL(for: .production))!, sandbox: URL(string: server.baseURL(for: .sandbox))!),
            environment: .production, timeout: 10, retry: retry, maxPages: maxPages)
        let slept = self.slept
        return AppStoreServerAPIClient(settings: settings, tokens: tokens ?? Self.tokens(issuer, bundleId: store.config.bundleId),
                                       verifier: verifier ?? self.verifier, transport: transport,
                                       sleep: { duration in slept.record(duration) })
    }

    /// A user with one Apple ID in `environment` who bought `productId` `daysAgo` days ago.
    func subscriber(_ userId: String, environment: SimEnvironment = .production, productId: String = "vip.a.1m",
                    daysAgo: Int64 = 5) throws -> SimTransaction {
        try store.mutate { state in
            state.addUser(userId)
            let index = try state.addAppleID(user: userId, environment: environment)
            return try state.purchase(user: userId, appleId: index, productId: productId, atMs: nowMs - daysAgo * 86_400_000)
        }
    }

    func requests(_ prefix: String) -> Int {
        server.state.requests.filter { $0.key.hasPrefix(prefix) }.values.reduce(0, +)
    }

    static func string(_ data: VerifiedSignedData, _ field: String) -> String? { data.payload[field] as? String }
    static func int64(_ data: VerifiedSignedData, _ field: String) -> Int64? { (data.payload[field] as? NSNumber)?.int64Value }
}

/// The client's sleeps, recorded instead of slept.
final class SleepLog: Sendable {
    private let durations = Mutex<[Duration]>([])
    func record(_ duration: Duration) { durations.withLock { $0.append(duration) } }
    var all: [Duration] { durations.withLock { $0 } }
}

extension Result {
    /// The success value, or a test failure naming the error.
    func value(file: StaticString = #filePath, line: UInt = #line) throws -> Success {
        switch self {
        case .success(let value): return value
        case .failure(let error):
            XCTFail("expected success, got \(error)", file: file, line: line)
            throw error
        }
    }

    func failure(file: StaticString = #filePath, line: UInt = #line) throws -> Failure {
        switch self {
        case .success:
            XCTFail("expected a failure", file: file, line: line)
            throw XCTSkip("no failure")
        case .failure(let error): return error
        }
    }
}
