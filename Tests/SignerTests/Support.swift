import Crypto
import Foundation
import TestSupport
import XCTest

/// Apple's own bytes for the signer tests, from ../shared/fixtures (see TestSupport.SharedFixtures).
enum SignerFixtures {
    static let packageRoot = SharedFixtures.packageRoot

    static func path(_ relative: String) throws -> String { try SharedFixtures.path(relative) }

    /// StoreLedger's generated offer key (TestSupport.GeneratedPKI), not Apple's published one.
    static var signingKeyPath: String { get throws { try GeneratedPKI.shared().offerKeyPath } }

    static func signingKey() throws -> P256PrivateKey { try GeneratedPKI.shared().offerKey }

    struct Vector: Decodable {
        var bundleId: String
        var keyId: String
        var productId: String
        var offerId: String
        var appAccountToken_or_applicationUsername: String
        var nonce: String
        var timestamp: Int64
        var expected_payload: String
    }

    struct Inputs: Decodable {
        var public_key_spki_pem: String
        var vectors: [Vector]
    }

    /// Apple's library test vectors (promo-offer/v1-signature-inputs.json); skips when absent.
    static func appleInputs() throws -> Inputs {
        try JSONDecoder().decode(Inputs.self, from: try SharedFixtures.data("promo-offer/v1-signature-inputs.json"))
    }

    /// Our own vectors, the payload written out by hand from Apple's documented format
    /// (U+2063-joined bundle, key, product, offer, lowercased username and nonce, timestamp), plus Apple's
    /// library vectors when ../shared is present.
    static func vectors() throws -> [Vector] {
        let ours = [
            Vector(bundleId: "com.example.app", keyId: "KEY1", productId: "vip.1m", offerId: "winback",
                   appAccountToken_or_applicationUsername: "Alice-Token", nonce: "3F2504E0-4F89-41D3-9A0C-0305E82C3301",
                   timestamp: 1_700_000_000_123,
                   expected_payload: "com.example.app\u{2063}KEY1\u{2063}vip.1m\u{2063}winback\u{2063}alice-token\u{2063}"
                       + "3f2504e0-4f89-41d3-9a0c-0305e82c3301\u{2063}1700000000123"),
            Vector(bundleId: "b", keyId: "K", productId: "p", offerId: "o", appAccountToken_or_applicationUsername: "",
                   nonce: "00000000-0000-4000-8000-000000000000", timestamp: 0,
                   expected_payload: "b\u{2063}K\u{2063}p\u{2063}o\u{2063}\u{2063}00000000-0000-4000-8000-000000000000\u{2063}0"),
        ]
        return SharedFixtures.isPresent ? ours + (try appleInputs().vectors) : ours
    }
}

/// Runs a command and returns its standard output; fails the test on a non-zero exit.
func runTool(_ executable: String, _ arguments: [String], stdin: Data? = nil) throws -> Data {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let output = Pipe(), errors = Pipe(), input = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(stdin) }
    try input.fileHandleForWriting.close()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    let errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw ToolFailure(description: "\(executable) \(arguments.joined(separator: " ")) exited \(process.terminationStatus): \(errorText)")
    }
    return data
}

struct ToolFailure: Error, CustomStringConvertible { let description: String }

/// The project venv's python with Apple's app-store-server-library (scripts/offer-python-env.sh
/// creates it on first use; that needs PyPI).
enum ApplePython {
    static func python() throws -> String {
        let script = SignerFixtures.packageRoot.appendingPathComponent("scripts/offer-python-env.sh").path
        let output = try runTool("/bin/bash", [script])
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func run(_ arguments: [String], json: Any) throws -> Any {
        let script = SignerFixtures.packageRoot.appendingPathComponent("scripts/apple_python_offer.py").path
        let output = try runTool(try python(), [script] + arguments, stdin: try JSONSerialization.data(withJSONObject: json))
        return try JSONSerialization.jsonObject(with: output)
    }
}

/// A JWS split into its decoded parts.
struct DecodedJWS {
    var header: [String: Any]
    var claims: [String: Any]
    var signingInput: [UInt8]
    var signature: [UInt8]

    init(_ jws: String) throws {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let header = Base64URL.decode(parts[0]), let claims = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]) else { throw ToolFailure(description: "not a compact JWS") }
        self.header = try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any] ?? [:]
        self.claims = try JSONSerialization.jsonObject(with: Data(claims)) as? [String: Any] ?? [:]
        self.signingInput = Array((parts[0] + "." + parts[1]).utf8)
        self.signature = signature
    }
}
