import Configuration
import Crypto
import Foundation
import Runtime

/// Everything StoreLedger's workers need to accept the simulated App Store as if it were Apple:
/// its root certificate (JWS and receipts), bundle id, app Apple id, environments, the V1 shared
/// secret and the catalog. `prepare` writes the files into one directory and returns the
/// environment variables (docs/configuration.md) to start the workers with.
public struct SimulatorSetup: Sendable {
    public let directory: String
    public let pki: SimulatorPKI
    public let config: StoreConfig
    public let environment: [String: String]
    /// The promotional-offer signing key the setup made for the signer (`signing.p8`).
    public let offerSigningKey: P256PrivateKey
    public static let offerKeyId = "SIMKEY0001"

    public static let appAppleId: Int64 = 1_234_567_890
    public static let sharedSecret = "simulator-shared-secret"

    /// Reuses a PKI already in `directory` (so running workers keep trusting it), else creates one.
    public static func prepare(directory: String, runId: Int? = nil, verifyReceiptURL: String? = nil) throws -> SimulatorSetup {
        let pki = try SimulatorPKI.loadOrCreate(directory: directory)
        let catalogPath = "\(directory)/catalog.json"
        try SimulatorCatalog.json().write(to: URL(fileURLWithPath: catalogPath))
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, appAppleId: appAppleId, sharedSecret: sharedSecret,
                                 catalog: SimulatorCatalog.standard, runId: runId ?? Int.random(in: 0..<900_000))
        let keyPath = "\(directory)/signing.p8"
        let offerKey: P256PrivateKey
        if let pem = try? String(contentsOfFile: keyPath, encoding: .utf8) {
            offerKey = try P256PrivateKey(pem: pem)
        } else {
            offerKey = try P256PrivateKey.generate()
            try PrivateFile.write(Array(try offerKey.pkcs8PEM().utf8), to: keyPath)
        }
        let root = "\(directory)/\(SimulatorPKI.rootFile)"
        var environment = [
            Setting.appleRoots.name: root,
            Setting.receiptRoots.name: root,
            Setting.bundleId.name: config.bundleId,
            Setting.appAppleId.name: String(appAppleId),
            Setting.environment.name: "Production,Sandbox",
            Setting.v1SharedSecrets.name: sharedSecret,
            Setting.catalog.name: catalogPath,
            Setting.signingKeys.name: "\(offerKeyId)=\(keyPath)",
            Setting.signingDefaultKeyId.name: offerKeyId,
        ]
        if let verifyReceiptURL { environment.merge(verifyReceiptEnvironment(verifyReceiptURL)) { $1 } }
        let lines = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "\n") + "\n"
        try Data(lines.utf8).write(to: URL(fileURLWithPath: "\(directory)/workers.env"))
        return SimulatorSetup(directory: directory, pki: pki, config: config, environment: environment, offerSigningKey: offerKey)
    }

    /// Makes the decode worker validate receipts through the simulator's verifyReceipt endpoint
    /// (production first, `21007` → sandbox) instead of locally.
    public static func verifyReceiptEnvironment(_ baseURL: String) -> [String: String] {
        [Setting.verifyReceiptURLs.name: "\(baseURL)/production/verifyReceipt,\(baseURL)/sandbox/verifyReceipt",
         Setting.receiptValidation.name: "verify-receipt"]
    }
}
