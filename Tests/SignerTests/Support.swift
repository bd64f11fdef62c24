import Crypto
import Foundation
import TestSupport
import XCTest

/// The signer tests' key (generated) and vectors (ours, plus Apple's from ../shared when present).
enum SignerFixtures {
    static let packageRoot = SharedFixtures.packageRoot

    static func path(_ relative: String) throws -> String { try SharedFixtures.path(relative) }

    /// StoreLedger's generated offer key (TestSupport.GeneratedPKI), not Apple's published one.
    static var signingKeyPath: String { get throws { try GeneratedPKI.shared().offerKeyPath } }

    static func signingKey() throws -> P256PrivateKey { try GeneratedPKI.shared().offerKey }

    typealias Vector = OfferVector

    static func appleInputs() throws -> AppleOfferInputs { try AppleOfferInputs.load() }

    static func vectors() throws -> [Vector] { try OfferVector.all() }
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
/// creates it on first use; that needs PyPI: without it the comparison is skipped, saying why).
enum ApplePython {
    static func python() throws -> String {
        let script = SignerFixtures.packageRoot.appendingPathComponent("scripts/offer-python-env.sh").path
        let output: Data
        do { output = try runTool("/bin/bash", [script]) } catch {
            throw XCTSkip("Apple's Python library is not installed and PyPI could not be reached: \(error)")
        }
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
