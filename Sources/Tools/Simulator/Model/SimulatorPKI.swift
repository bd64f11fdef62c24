import Crypto
import Foundation
import Runtime

/// The simulated App Store's signing keys: one Apple-shaped chain (root → intermediate with
/// `…100.6.2.1` → leaf with `…100.6.11.1`) signs V2 JWS (`x5c`) and PKCS#7 receipts alike.
/// Persisted as PEM files so that the pipeline's workers can be pointed at `root.pem`.
public final class SimulatorPKI: Sendable {
    public let chain: TestCertificateChain
    let receiptSigner: PKCS7Signer

    public static let rootFile = "root.pem"

    public init(chain: TestCertificateChain) throws {
        self.chain = chain
        self.receiptSigner = try PKCS7Signer(chain: chain)
    }

    /// A fresh chain valid 2015-2045, so simulated years and old-date scenarios all fall inside it.
    public static func generate() throws -> SimulatorPKI {
        try SimulatorPKI(chain: TestCertificateChain.generate(
            name: "StoreLedger Simulated App Store",
            notBefore: Date(timeIntervalSince1970: 1_420_070_400), notAfter: Date(timeIntervalSince1970: 2_366_841_600)))
    }

    /// Loads the chain from `directory`, creating and saving one there if it holds none.
    public static func loadOrCreate(directory: String) throws -> SimulatorPKI {
        let files = ["root", "intermediate", "leaf"]
        let manager = FileManager.default
        if files.allSatisfy({ manager.fileExists(atPath: "\(directory)/\($0).pem") && manager.fileExists(atPath: "\(directory)/\($0).key") }) {
            func issued(_ name: String) throws -> IssuedCertificate {
                IssuedCertificate(certificate: try X509Certificate(pem: try String(contentsOfFile: "\(directory)/\(name).pem", encoding: .utf8)),
                                  key: try P256PrivateKey(pem: try String(contentsOfFile: "\(directory)/\(name).key", encoding: .utf8)))
            }
            return try SimulatorPKI(chain: TestCertificateChain(root: try issued("root"), intermediate: try issued("intermediate"),
                                                                leaf: try issued("leaf")))
        }
        let pki = try generate()
        try pki.write(to: directory)
        return pki
    }

    /// Apple's published test PKI (`apple-lib/certs` in the fixtures: testCA, testIntermediate,
    /// testLeaf with its key), for signing exactly as Apple's own library tests do. Its
    /// certificates lack key identifiers: the workers need `Setting.x509Strict=false`, which
    /// StoreLedger accepts only without Production (`Setting.environment=Sandbox`).
    public static func appleTestChain(directory: String) throws -> SimulatorPKI {
        func certificate(_ name: String) throws -> X509Certificate {
            let text = try String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)
            return try X509Certificate(pem: text)
        }
        func key(_ name: String) throws -> P256PrivateKey {
            try P256PrivateKey(pem: try String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8))
        }
        return try SimulatorPKI(chain: TestCertificateChain(
            root: IssuedCertificate(certificate: try certificate("testCA.pem"), key: try key("testCA.key")),
            intermediate: IssuedCertificate(certificate: try certificate("testIntermediate.pem"), key: try key("testIntermediate.key")),
            leaf: IssuedCertificate(certificate: try certificate("testLeaf.pem"), key: try key("testLeaf.key"))))
    }

    /// Writes `<role>.pem` and `<role>.key` (PKCS#8, mode 0600) for root, intermediate and leaf.
    public func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for (name, issued) in [("root", chain.root), ("intermediate", chain.intermediate), ("leaf", chain.leaf)] {
            try Data(issued.certificate.pem.utf8).write(to: URL(fileURLWithPath: "\(directory)/\(name).pem"))
            let keyPath = "\(directory)/\(name).key"
            try PrivateFile.write(Array(try issued.key.pkcs8PEM().utf8), to: keyPath)
        }
    }

    public var rootPEM: String { chain.root.certificate.pem }
}
