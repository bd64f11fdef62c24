import Foundation
import Simulator
import XCTest

/// Contract: `storeledger receipt decode` reads a receipt wherever support staff find one (base64, an
/// upload body, a V1 notification's `unified_receipt.latest_receipt`) and, without `--root`,
/// verifies against the configured receipt roots as the decode worker does.
final class DecodeCommandTests: XCTestCase {
    func testAReceiptInsideAV1NotificationVerifiesAgainstTheConfiguredRoots() throws {
        let directory = NSTemporaryDirectory() + "decode-cli-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pki = try SimulatorPKI.generate()
        try pki.write(to: directory)
        let config = StoreConfig(bundleId: "com.storeledger.cli", catalog: SimulatorCatalog.standard, runId: 3)
        var state = StoreState(config: config)
        state.addUser("cli")
        try state.addAppleID(user: "cli", environment: .sandbox)
        let t0: Int64 = 1_735_732_800_000
        let purchase = try state.purchase(user: "cli", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let receipt = try WireEmitter(pki: pki, config: config).receipt(state, user: "cli", appleId: 0, atMs: t0 + 10)
        let notification = try JSONSerialization.data(withJSONObject: [
            "notification_type": "DID_RENEW", "environment": "Sandbox", "unified_receipt": ["latest_receipt": receipt, "status": 0],
        ])
        let file = directory + "/notification.json"
        try notification.write(to: URL(fileURLWithPath: file))
        let root = directory + "/" + SimulatorPKI.rootFile

        let configured = try run(["receipt", "decode", file, "--json", "--no-strict"], environment: ["STORELEDGER_RECEIPT_ROOTS": root])
        XCTAssertEqual(configured.status, 0, configured.output)
        let answer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(configured.output.utf8)) as? [String: Any])
        XCTAssertEqual(answer["verified"] as? Bool, true)
        XCTAssertEqual((answer["in_app"] as? [[String: Any]])?.compactMap { $0["transaction_id"] as? String }, [purchase.transactionId])

        let unconfigured = try run(["receipt", "decode", file, "--json", "--no-strict"], environment: ["STORELEDGER_RECEIPT_ROOTS": ""])
        XCTAssertEqual(unconfigured.status, 1, "decoded, not verified: \(unconfigured.output)")
        XCTAssertTrue(unconfigured.output.contains("no --root certificate given"), unconfigured.output)
    }

    private func run(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }.filter { !$0.value.isEmpty }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
