import Foundation
import LocalStack
import Runtime
import Simulator
import XCTest

/// A `Cluster` whose decode worker trusts the simulated App Store (its generated root, bundle id,
/// app Apple id, shared secret) and whose classify worker reads the simulator's catalog.
final class SimulationCluster: @unchecked Sendable {
    // Safe: set once in init on the test thread, read afterwards.
    let cluster: Cluster
    let setup: SimulatorSetup
    let store: AppStore
    let emitter: WireEmitter
    private(set) var verifyReceipt: VerifyReceiptServer?

    /// - Parameter verifyReceipt: validate receipts through the simulator's verifyReceipt endpoint.
    /// - Parameter workerExit: what happens to a worker that dies (tests that SIGKILL workers restart them).
    /// - Parameter signerAdmin: give the signer `--admin-port` (it opens no socket otherwise).
    /// - Parameter standby: PostgreSQL with a synchronous streaming standby and a multi-host `DATABASE_URL` (`Cluster.failOver()`).
    init(verifyReceipt: Bool = false, extraEnvironment: [String: String] = [:], workerExit: Supervisor.ExitPolicy = .ignore,
         signerAdmin: Bool = false, standby: Bool = false) throws {
        let directory = NSTemporaryDirectory() + "storeledger-sim-\(UUID().uuidString)"
        setup = try SimulatorSetup.prepare(directory: directory)
        store = AppStore(config: setup.config)
        emitter = WireEmitter(pki: setup.pki, config: setup.config)
        var environment = setup.environment.merging(extraEnvironment) { $1 }
        if verifyReceipt {
            let server = try VerifyReceiptServer(store: store, pki: setup.pki)
            try server.start()
            self.verifyReceipt = server
            environment.merge(SimulatorSetup.verifyReceiptEnvironment(server.url)) { $1 }
        }
        cluster = try Cluster()
        // Only the signer is told where the key is (KeyCustodyTests checks that nobody else opens it);
        // it gets an admin port (and is waited for) only with `signerAdmin`: it opens no socket otherwise.
        let signer = StackChild.signer(adminPort: signerAdmin ? 0 : nil, environment: environment.merging([
            "STORELEDGER_KAFKA_SESSION_TIMEOUT_MS": "6000", "STORELEDGER_LOG_LEVEL": "warning"]) { $1 }, onExit: .ignore)
        try cluster.start(extraEnvironment: environment.filter { !$0.key.hasPrefix("STORELEDGER_SIGNING_KEYS") }, workerExit: workerExit, standby: standby,
                          extraChildren: [signer])
    }

    /// The signer's admin server (`/metrics`), when started with `signerAdmin`.
    var signerAdminURL: String? { cluster.adminURLs["signer"] }

    var ingestURL: String { cluster.ingestURL }

    var scenarioContext: ScenarioContext {
        var context = ScenarioContext(ingestURL: ingestURL, store: store, emitter: emitter)
        context.verifyReceipt = verifyReceipt
        context.offerPublicKey = setup.offerSigningKey.publicKey
        return context
    }

    func stop() {
        cluster.stop()
        verifyReceipt?.stop()
        try? FileManager.default.removeItem(atPath: setup.directory)
    }
}
