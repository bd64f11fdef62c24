@testable import AppleDecoding
import Crypto
import Foundation
import TestSupport
import XCTest

/// Differential test against Apple's official Python library (app-store-server-library in a
/// private venv made by scripts/python-env.sh, which the test command runs): a generated corpus
/// of valid and hostile signed data, each case verified by Apple's SignedDataVerifier (online
/// checks off) and by ours with the same configuration; every verdict must agree.
final class DifferentialTests: XCTestCase {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    private func python() throws -> String {
        _ = try Fixtures.path("apple-lib/certs/testCA.der")  // scripts/apple_python_verify.py mixes Apple's test chain in
        let venvPython = Self.packageRoot.appendingPathComponent(".venv/bin/python").path
        if !FileManager.default.isExecutableFile(atPath: venvPython) || run([Self.packageRoot.appendingPathComponent("scripts/python-env.sh").path]) != 0 {
            throw XCTSkip("Apple's Python library is not installed and PyPI could not be reached (scripts/python-env.sh failed)")
        }
        return venvPython
    }

    @discardableResult
    private func run(_ command: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.currentDirectoryURL = Self.packageRoot
        do { try process.run() } catch { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }

    func testVerdictsAgreeWithApplesPythonLibrary() throws {
        let python = try python()
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("storeledger-differential-\(getpid()).json")
        defer { try? FileManager.default.removeItem(at: out) }
        let seed = Int.random(in: 1...1_000_000)
        XCTAssertEqual(run([python, Self.packageRoot.appendingPathComponent("scripts/apple_python_verify.py").path,
                            "corpus", "--out", out.path, "--seed", String(seed), "--count", "300"]), 0, "corpus generation failed")
        let root = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: out)) as? [String: Any])
        let cases = try XCTUnwrap(root["cases"] as? [[String: Any]])
        XCTAssertEqual(cases.count, 300)
        var verdicts: [String: Int] = [:]
        var disagreements: [String] = []
        for item in cases {
            let apple = try XCTUnwrap(item["apple"] as? String)
            XCTAssertFalse(apple.hasPrefix("EXCEPTION"), "Apple's library raised outside its verdicts for \(item["id"]!)")
            let ours = try verdict(item)
            verdicts[apple, default: 0] += 1
            if ours != apple { disagreements.append("\(item["id"]!): Apple \(apple), ours \(ours)") }
        }
        XCTAssertEqual(disagreements, [], "seed \(seed)")
        // The corpus must exercise every verdict, not only failures.
        for status in ["VERIFIED", "VERIFICATION_FAILURE", "INVALID_APP_IDENTIFIER", "INVALID_ENVIRONMENT",
                       "INVALID_CHAIN_LENGTH", "INVALID_CERTIFICATE"] {
            XCTAssertGreaterThan(verdicts[status] ?? 0, 0, "no \(status) case in the corpus (seed \(seed))")
        }
    }

    private func verdict(_ item: [String: Any]) throws -> String {
        let roots = try (item["roots"] as? [String] ?? []).map { try X509Certificate(der: try XCTUnwrap(Base64.decode($0))) }
        let environment = try XCTUnwrap(AppStoreEnvironment(rawValue: try XCTUnwrap(item["environment"] as? String)))
        let verifier: SignedDataVerifier
        do {
            verifier = try SignedDataVerifier(roots: roots, bundleId: try XCTUnwrap(item["bundle_id"] as? String),
                                              appAppleId: (item["app_apple_id"] as? NSNumber)?.int64Value,
                                              environments: [environment], strictChecks: item["strict"] as? Bool ?? true)
        } catch {
            return "CONFIG_ERROR"
        }
        let token = try XCTUnwrap(item["token"] as? String)
        let result: Result<VerifiedSignedData, JWSVerificationFailure>
        switch item["kind"] as? String {
        case "notification": result = verifier.verifyNotification(token)
        case "transaction": result = verifier.verifyTransaction(token)
        default: result = verifier.verifyRenewalInfo(token)
        }
        return result.failureValue?.status.rawValue ?? "VERIFIED"
    }
}
