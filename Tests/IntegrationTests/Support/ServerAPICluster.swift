import Crypto
import Foundation
import Simulator
import XCTest

/// A `SimulationCluster` whose signer also mints App Store Server API tokens (issuer id set), and
/// the simulated App Store Server API that accepts exactly those tokens (the signer's key). The
/// CLI commands that talk to Apple (recover, refresh, support) run with `cliEnvironment`.
final class ServerAPICluster: @unchecked Sendable {
    // Safe: set once in init on the test thread, read afterwards.
    static let issuerId = "issuer-simulated"
    let sim: SimulationCluster
    let server: ServerAPIServer

    init(extraEnvironment: [String: String] = [:], pageSize: Int = 20) throws {
        sim = try SimulationCluster(extraEnvironment: ["STORELEDGER_SIGNING_ISSUER_ID": Self.issuerId].merging(extraEnvironment) { $1 })
        let policy = APITokenPolicy(publicKey: sim.setup.offerSigningKey.publicKey, bundleId: sim.setup.config.bundleId,
                                    keyId: SimulatorSetup.offerKeyId, issuerId: Self.issuerId)
        // Test notifications go to ingest like Apple's; delivered when it answers 2xx.
        let ingestURL = sim.ingestURL
        server = ServerAPIServer(store: sim.store, pki: sim.setup.pki, policy: policy, pageSize: pageSize,
                                 testNotificationSink: { delivery in
                                     (try? HTTP.post(ingestURL + delivery.path, body: Data(delivery.body)).status).map { (200...206).contains($0) } ?? false
                                 })
        try server.start()
    }

    /// What a StoreLedger process that calls Apple needs: the decode worker's trust settings,
    /// the broker, the database and the simulator's base URLs. No key: tokens come from the signer.
    var cliEnvironment: [String: String] {
        var environment = sim.setup.environment.filter { !$0.key.hasPrefix("STORELEDGER_SIGNING_") }
        environment.merge(Self.apiEnvironment(server)) { $1 }
        environment["KAFKA_BOOTSTRAP_SERVERS"] = sim.cluster.bootstrap
        environment["DATABASE_URL"] = sim.cluster.databaseURL
        environment["STORELEDGER_KAFKA_FETCH_WAIT_MS"] = "10"
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        return environment
    }

    static func apiEnvironment(_ server: ServerAPIServer) -> [String: String] {
        ["STORELEDGER_API_PRODUCTION_URL": server.baseURL(for: .production), "STORELEDGER_API_SANDBOX_URL": server.baseURL(for: .sandbox),
         "STORELEDGER_API_KEY_ID": SimulatorSetup.offerKeyId]
    }

    /// A new customer with one Apple ID who bought `productId` at `atMs` (nothing sent to StoreLedger).
    func subscriber(_ userId: String, productId: String = "vip.a.1m", atMs: Int64) throws -> SimTransaction {
        try sim.store.mutate { state in
            state.addUser(userId)
            return try state.purchase(user: userId, appleId: try state.addAppleID(user: userId), productId: productId, atMs: atMs)
        }
    }

    func stop() {
        server.stop()
        sim.stop()
    }
}
