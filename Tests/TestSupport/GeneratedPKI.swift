import Crypto
import Foundation
import Runtime

/// StoreLedger's own test keys, made once per test process: an Apple-shaped chain (root →
/// intermediate marked `…100.6.2.1` → leaf marked `…100.6.11.1`, strict-valid X.509) that signs
/// V2 JWS and PKCS#7 receipts, and a promotional-offer signing key. Fresh keys each run: tests
/// verify signatures, they never compare them. The processes under test read root.pem and
/// offer-signing-key.p8 (mode 0600) from `directory`, which is removed when the process exits.
public struct GeneratedPKI: Sendable {
    /// The chain's validity window, 2020-01-01 → 2040-01-01: every signed date the tests use falls inside.
    public static let notBefore = Date(timeIntervalSince1970: 1_577_836_800)
    public static let notAfter = Date(timeIntervalSince1970: 2_208_988_800)

    public let chain: TestCertificateChain
    public let offerKey: P256PrivateKey
    public let directory: String

    public var rootPath: String { "\(directory)/root.pem" }
    public var offerKeyPath: String { "\(directory)/offer-signing-key.p8" }

    /// `-----BEGIN PUBLIC KEY-----` text of the offer key, as `openssl pkey -pubout` writes it.
    public var offerPublicKeyPEM: String {
        let base64 = Base64.encode(offerKey.publicKey.spkiDER)
        var lines = ["-----BEGIN PUBLIC KEY-----"]
        var rest = Substring(base64)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(64)))
            rest = rest.dropFirst(64)
        }
        return (lines + ["-----END PUBLIC KEY-----"]).joined(separator: "\n") + "\n"
    }

    /// The one instance of this test process.
    public static func shared() throws -> GeneratedPKI { try made.get() }

    private static let made = Result<GeneratedPKI, Error> { try GeneratedPKI.make() }

    private static func make() throws -> GeneratedPKI {
        let chain = try TestCertificateChain.generate(name: "StoreLedger Test App Store", notBefore: notBefore, notAfter: notAfter)
        let pki = GeneratedPKI(chain: chain, offerKey: try P256PrivateKey.generate(), directory: processDirectory)
        try pki.write()
        // A C function pointer cannot capture: it reads the static path.
        atexit { try? FileManager.default.removeItem(atPath: GeneratedPKI.processDirectory) }
        return pki
    }

    private static var processDirectory: String {
        FileManager.default.temporaryDirectory.appendingPathComponent("storeledger-test-pki-\(getpid())").path
    }

    private func write() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(chain.root.certificate.pem.utf8).write(to: URL(fileURLWithPath: rootPath))
        try PrivateFile.write(Array(try offerKey.pkcs8PEM().utf8), to: offerKeyPath)
    }

    /// The negative cases of Apple's ChainVerifier tests, issued under this chain's root with fresh
    /// keys: a leaf under an intermediate marked `…100.6.2.2` instead of `…6.2.1`, and a leaf marked
    /// `…100.6.11.2` instead of `…6.11.1` under the valid intermediate. Both pass plain X.509.
    public func wrongMarkerChains() throws -> (wrongIntermediate: TestCertificateChain, wrongLeaf: TestCertificateChain) {
        func profile(_ cn: String, serial: UInt64, ca: Bool, marker: String) -> CertificateProfile {
            CertificateProfile(subject: [NameComponent("O", "StoreLedger Test App Store"), NameComponent("CN", cn)], serialNumber: serial,
                               notBefore: Self.notBefore, notAfter: Self.notAfter, isCA: ca, markerExtensionOIDs: [marker])
        }
        let badIntermediate = try CertificateIssuer.issue(profile("Wrong-OID Intermediate", serial: 13, ca: true, marker: "1.2.840.113635.100.6.2.2"),
                                                          key: try P256PrivateKey.generate(), by: chain.root)
        let leafOfBad = try CertificateIssuer.issue(profile("Leaf of Wrong-OID Intermediate", serial: 14, ca: false,
                                                            marker: TestCertificateChain.leafMarkerOID),
                                                    key: try P256PrivateKey.generate(), by: badIntermediate)
        let badLeaf = try CertificateIssuer.issue(profile("Wrong-OID Leaf", serial: 15, ca: false, marker: "1.2.840.113635.100.6.11.2"),
                                                  key: try P256PrivateKey.generate(), by: chain.intermediate)
        return (TestCertificateChain(root: chain.root, intermediate: badIntermediate, leaf: leafOfBad),
                TestCertificateChain(root: chain.root, intermediate: chain.intermediate, leaf: badLeaf))
    }

    /// A PKCS#7 SignedData receipt over `content`, signed by the leaf with the chain embedded.
    public func signReceipt(_ content: [UInt8]) throws -> [UInt8] {
        try PKCS7Signer(chain: chain).sign(content)
    }
}
