import Foundation
import XCTest

/// Contract: the OpenAPI 3.1 document ingest serves at `/openapi.json` describes the running server.
/// schemathesis (PyPI, in the private venv scripts/schemathesis-env.sh makes) reads the document from
/// the server and runs its examples, coverage and fuzzing phases against every operation, with a
/// bounded number of examples per operation so CI stays fast, and every check it has: no 5xx,
/// schema-valid requests accepted,
/// only documented status codes, content types, headers and bodies, secured operations refuse
/// requests without credentials, 405 with Allow for other methods. It runs against a cluster with
/// offers (catalog and signer), so the offer operations answer for real. Positive mode: the document
/// promises a narrower id grammar than the edge accepts (the edge takes any bounded id without
/// control characters, for ids already in use), so schema-invalid requests are not all refused.
final class OpenAPIContractTests: XCTestCase {
    func testSchemathesisPassesAgainstTheRunningIngest() throws {
        let st = try schemathesis()
        let offers = try OfferCluster()
        try offers.start()
        defer { offers.stop() }
        let ingest = offers.cluster.ingestURL

        let document = try XCTUnwrap(try HTTP.get("\(ingest)/openapi.json", authorization: nil).json)
        XCTAssertEqual(document["openapi"] as? String, "3.1.0")
        let paths = try XCTUnwrap(document["paths"] as? [String: Any])
        for route in ["/v1/notifications/appstore", "/v1/receipts", "/v1/offers/signature", "/v1/subscriptions/{subscription_key}",
                      "/v1/users/{user_id}/membership", "/v1/users/{user_id}/offers", "/v1/users/{user_id}/ledger",
                      "/v1/admin/users/{user_id}", "/v1/admin/webhooks", "/v1/admin/webhooks/{endpoint}/deliveries",
                      "/v1/admin/reports/{report}", "/healthz", "/readyz", "/metrics", "/openapi.json"] {
            XCTAssertNotNil(paths[route], "\(route) is documented")
        }

        // Client operations with the service key, then the support operations (and metrics) with the admin key.
        XCTAssertEqual(try run(st, ingest, key: HTTP.serviceKey, only: nil), 0, "schemathesis found failures (output above)")
        XCTAssertEqual(try run(st, ingest, key: TestCredentials.bearer(TestCredentials.adminKey), only: "^/(v1/admin/|metrics)"), 0,
                       "schemathesis found failures on the support routes (output above)")
    }

    private func run(_ st: String, _ ingest: String, key: String, only paths: String?) throws -> Int32 {
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("schemathesis-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: report) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: st)
        // schemathesis keeps a cache in its working directory: give it the throwaway one.
        try FileManager.default.createDirectory(at: report, withIntermediateDirectories: true)
        process.currentDirectoryURL = report
        process.arguments = ["run", "\(ingest)/openapi.json", "--url", ingest, "--checks", "all",
                             // use_after_free and ensure_resource_availability need DELETE operations, which ingest has none of.
                             "--exclude-checks", "use_after_free,ensure_resource_availability",
                             "--max-examples", "15", "--mode", "positive", "--phases", "examples,coverage,fuzzing", "--workers", "2",
                             "--seed", "11", "--request-timeout", "10", "--no-color", "--suppress-health-check", "all",
                             "--generation-database", "none", "--report-dir", report.path, "-H", "Authorization: \(key)"]
            + (paths.map { ["--include-path-regex", $0] } ?? [])
        var environment = ProcessInfo.processInfo.environment
        environment["SCHEMATHESIS_TELEMETRY"] = "false"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        let started = Date()
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        print(text)
        print("schemathesis took \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        return process.terminationStatus
    }

    /// The `st` executable, or a skip when PyPI cannot be reached to install it.
    private func schemathesis() throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: root.appendingPathComponent("scripts/schemathesis-env.sh").path)
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let path = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        process.waitUntilExit()
        guard process.terminationStatus == 0, FileManager.default.isExecutableFile(atPath: path) else {
            throw XCTSkip("schemathesis is not installed and PyPI could not be reached (scripts/schemathesis-env.sh failed)")
        }
        return path
    }
}
