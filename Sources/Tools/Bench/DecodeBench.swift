import AppleDecoding
import Configuration
import Crypto
import Domain
import Foundation
import Runtime

/// `storeledger bench decode`: V2 notifications/s and receipts/s on one core, measured in the same
/// run as Apple's Python verifier (scripts/apple_python_verify.py in the private .venv) and
/// `openssl speed` (the ceiling: ECDSA P-256 verifies and RSA-2048 verifies per second).
/// Inputs: Apple's published test chain and real receipts from ../shared/fixtures (--fixtures DIR).
public enum DecodeBench {
    /// Whether the sample data the suite reads is there.
    public static func hasFixtures(_ arguments: Arguments) -> Bool {
        (try? BenchConfiguration.read(arguments)).map { FileManager.default.fileExists(atPath: $0.fixtures) } ?? false
    }

    public static func run(_ arguments: Arguments) throws -> Int32 {
        let seconds = arguments.has("quick") ? 1.0 : Double(try arguments.int("seconds", default: 3))
        let settings = try BenchConfiguration.read(arguments)
        let fixtures = settings.fixtures
        guard FileManager.default.fileExists(atPath: fixtures) else {
            throw UsageError("fixtures folder \(fixtures) not found (run from the repository root or set \(Setting.fixtures))")
        }
        // Setting.benchOnly=notifications|receipts runs one part (for profiling with perf).
        let only = settings.only
        var figures: [String: Double] = [:]
        if only == nil || only == "notifications" {
            figures["v2_notifications_per_second"] = try notifications(fixtures: fixtures, seconds: seconds)
        }
        if only == nil || only == "receipts" {
            let receipts = try receipts(fixtures: fixtures, seconds: seconds)
            figures["receipts_per_second"] = receipts.perSecond
            figures["receipt_purchases_average"] = receipts.averagePurchases
        }
        if only == nil {
            if let python = python(arguments, seconds: seconds) { figures["apple_python_v2_notifications_per_second"] = python }
            figures.merge(opensslSpeed(seconds: max(1, Int(seconds)))) { $1 }
        }
        report(figures, json: arguments.has("json"))
        return 0
    }

    // MARK: - StoreLedger

    /// SUBSCRIBED notifications, each with a signed transaction and renewal info (3 ES256 JWS),
    /// all different (own UUID and transaction id), decoded end to end by the stage's decoder.
    static func notifications(fixtures: String, seconds: Double) throws -> Double {
        let certs = fixtures + "/apple-lib/certs/"
        let key = try P256PrivateKey(pem: String(decoding: try Data(contentsOf: URL(fileURLWithPath: certs + "testLeaf.key")), as: UTF8.self))
        let chain = try ["testLeaf.pem", "testIntermediate.pem", "testCA.der"].map { try AppleDecodingConfiguration.loadCertificate(certs + $0) }
        let header: [String: Any] = ["x5c": chain.map { Base64.encode($0.der) }]
        let decoder = NotificationV2Decoder(verifier: try SignedDataVerifier(
            roots: [chain[2]], bundleId: "com.example", appAppleId: 1234, environments: [.sandbox], strictChecks: false))
        var bodies: [[UInt8]] = []
        for index in 0..<500 {
            let original = String(1_000_000_000 + index)
            let transaction: [String: Any] = [
                "originalTransactionId": original, "transactionId": String(2_000_000_000 + index), "webOrderLineItemId": String(index),
                "bundleId": "com.example", "productId": "com.example.monthly", "purchaseDate": 1_698_148_900_000,
                "originalPurchaseDate": 1_698_148_900_000, "expiresDate": 1_700_827_300_000, "quantity": 1,
                "type": "Auto-Renewable Subscription", "inAppOwnershipType": "PURCHASED", "signedDate": 1_698_148_900_000,
                "environment": "Sandbox", "transactionReason": "PURCHASE", "storefront": "USA", "price": 9990, "currency": "USD"]
            let renewal: [String: Any] = ["originalTransactionId": original, "autoRenewProductId": "com.example.monthly",
                                          "productId": "com.example.monthly", "autoRenewStatus": 1,
                                          "signedDate": 1_698_148_900_000, "environment": "Sandbox"]
            let payload: [String: Any] = [
                "notificationType": "SUBSCRIBED", "subtype": "INITIAL_BUY", "notificationUUID": UUID().uuidString.lowercased(),
                "version": "2.0", "signedDate": 1_698_148_900_000,
                "data": ["environment": "Sandbox", "appAppleId": 1234, "bundleId": "com.example", "bundleVersion": "1", "status": 1,
                         "signedTransactionInfo": try JWSSigner.signES256(header: header, payload: transaction, key: key),
                         "signedRenewalInfo": try JWSSigner.signES256(header: header, payload: renewal, key: key)]]
            bodies.append(Array(#"{"signedPayload":"\#(try JWSSigner.signES256(header: header, payload: payload, key: key))"}"#.utf8))
        }
        return try measure(seconds: seconds, inputs: bodies) { body in
            guard case .success = decoder.decode(body: body, receivedAtMs: 0, rawPosition: nil) else { throw UsageError("bench notification did not verify") }
        }
    }

    /// Receipt uploads with 1–4 purchases (real Apple receipts), verified locally at creation date.
    static func receipts(fixtures: String, seconds: Double) throws -> (perSecond: Double, averagePurchases: Double) {
        let root = try AppleDecodingConfiguration.loadCertificate(fixtures + "/certs/apple-real/AppleIncRootCertificate.cer")
        let decoder = ReceiptUploadDecoder(validation: .local, verifier: try AppReceiptVerifier(roots: [root]), verifyReceipt: nil)
        var bodies: [[UInt8]] = []
        var purchases = 0
        for file in ["receipts/tpinappreceipt/receipt-sandbox-g5", "receipts/tpinappreceipt/receipt-production", "receipts/namecare-rust/xcode-app-receipt-legacy"] {
            let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixtures + "/" + file)))
            let base64 = Base64.decode(String(decoding: data, as: UTF8.self)) != nil ? String(decoding: data, as: UTF8.self) : Base64.encode(data)
            let body = [UInt8](try JSONSerialization.data(withJSONObject: ["user_id": "bench", "receipt_data": base64]))
            guard case .success(let events) = decoder.decode(body: body, receivedAtMs: 0, rawPosition: nil) else { throw UsageError("bench receipt \(file) did not verify") }
            purchases += events.reduce(0) { $0 + $1.transactions.count }
            bodies.append(body)
        }
        let rate = try measure(seconds: seconds, inputs: bodies) { body in
            guard case .success = decoder.decode(body: body, receivedAtMs: 0, rawPosition: nil) else { throw UsageError("bench receipt did not verify") }
        }
        return (rate, Double(purchases) / Double(bodies.count))
    }

    /// Operations per CPU-second of this thread (per core, as `openssl speed` divides by CPU user
    /// time), cycling through `inputs` for `seconds` of wall time after a short warm-up. CPU time
    /// keeps the figure honest on a machine shared with builds and fuzzers.
    static func measure(seconds: Double, inputs: [[UInt8]], _ body: ([UInt8]) throws -> Void) throws -> Double {
        for input in inputs.prefix(20) { try body(input) }
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(seconds * 1000))
        let cpuStart = CPUTime.threadSeconds()
        var count = 0
        while clock.now < deadline {
            for _ in 0..<50 {
                try body(inputs[count % inputs.count])
                count += 1
            }
        }
        return Double(count) / max(CPUTime.threadSeconds() - cpuStart, 1e-9)
    }

    // MARK: - References measured in the same run

    /// Apple's Python library (scripts/python-env.sh makes the venv; skipped if it cannot).
    static func python(_ arguments: Arguments, seconds: Double) -> Double? {
        let python = arguments.value("python") ?? ".venv/bin/python"
        if !FileManager.default.isExecutableFile(atPath: python), shell(["scripts/python-env.sh"]).status != 0 { return nil }
        let result = shell([python, "scripts/apple_python_verify.py", "bench", "--seconds", String(seconds)])
        guard result.status == 0, let object = (try? JSONSerialization.jsonObject(with: Data(result.output.utf8))) as? [String: Any] else { return nil }
        return (object["notifications_per_second"] as? NSNumber)?.doubleValue
    }

    /// `openssl speed` single-core verifies/s for ECDSA P-256 (JWS) and RSA-2048 (receipts).
    static func opensslSpeed(seconds: Int) -> [String: Double] {
        var figures: [String: Double] = [:]
        let ecdsa = shell(["openssl", "speed", "-seconds", String(seconds), "ecdsap256"]).output
        // "256 bits ecdsa (nistp256)   0.0000s   0.0001s  42000.0  13000.0"
        if let line = ecdsa.split(separator: "\n").last(where: { $0.contains("ecdsa (nistp256)") }),
           let verify = line.split(separator: " ").last.flatMap({ Double($0) }) {
            figures["openssl_ecdsap256_verifies_per_second"] = verify
        }
        let rsa = shell(["openssl", "speed", "-seconds", String(seconds), "rsa2048"]).output
        // "rsa 2048 bits 0.000600s 0.000017s 1666.0 58000.0"
        if let line = rsa.split(separator: "\n").last(where: { $0.hasPrefix("rsa 2048 bits") }),
           let verify = line.split(separator: " ").last.flatMap({ Double($0) }) {
            figures["openssl_rsa2048_verifies_per_second"] = verify
        }
        return figures
    }

    static func shell(_ command: [String]) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return (-1, "") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static func report(_ figures: [String: Double], json: Bool) {
        if json {
            let data = (try? JSONSerialization.data(withJSONObject: figures, options: [.sortedKeys])) ?? Data()
            print(String(decoding: data, as: UTF8.self))
            return
        }
        func f(_ key: String) -> String { figures[key].map { String(format: "%.0f", $0) } ?? "n/a" }
        func ratio(_ a: String, _ b: String, _ factor: Double = 1) -> String {
            guard let x = figures[a], let y = figures[b], y > 0 else { return "n/a" }
            return String(format: "%.2f", x * factor / y)
        }
        print("""
        decode bench (per core: operations per CPU-second of one thread)
          V2 notifications/s (3 ES256 JWS each)   \(f("v2_notifications_per_second"))
          Apple Python library, same work          \(f("apple_python_v2_notifications_per_second"))   ratio \(ratio("v2_notifications_per_second", "apple_python_v2_notifications_per_second"))x
          openssl speed ecdsap256 verifies/s       \(f("openssl_ecdsap256_verifies_per_second"))   StoreLedger JWS/s vs ceiling \(ratio("v2_notifications_per_second", "openssl_ecdsap256_verifies_per_second", 3))
          receipts/s (avg \(String(format: "%.1f", figures["receipt_purchases_average"] ?? 0)) purchases, RSA chain) \(f("receipts_per_second"))
          openssl speed rsa2048 verifies/s         \(f("openssl_rsa2048_verifies_per_second"))   (a receipt costs 1 RSA verify + parsing; signer chains are cached)
        """)
    }
}
