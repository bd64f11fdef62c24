import Crypto
import Foundation
import Runtime
import XCTest

/// Contract: `storeledger dev` (what the README's run command starts) brings up broker, private
/// PostgreSQL, migrations, ingest and every worker as separate processes; a notification POSTed
/// once it reports READY is visible in the API within 2 seconds; SIGINT stops every process and
/// removes the private PostgreSQL directory.
final class DevCommandTests: XCTestCase {
    func testDevRunsEverythingShowsANotificationWithin2SecondsAndStopsCleanly() throws {
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: "000000000000000"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["dev", "--port", "0", "--partitions", "4"]
        var environment = ProcessInfo.processInfo.environment
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        environment.removeValue(forKey: "DATABASE_URL")
        // The test's V1 bodies carry this password; dev makes every other credential itself.
        environment["STORELEDGER_V1_SHARED_SECRETS"] = TestCredentials.v1Secret
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil } else { lines.append(data) }
        }
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        try waitUntil("dev prints READY", timeout: 60) { lines.contains("READY") }
        let ingest = try XCTUnwrap(lines.value(after: "INGEST="))
        let apiKey = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "API_KEY=")))
        let pids = lines.all.filter { $0.hasPrefix("PID ") }.compactMap { Int32($0.split(separator: "=").last ?? "") }
        XCTAssertEqual(pids.count, 8, "broker, ingest, signer, four stage workers and the events relay run as separate processes")
        XCTAssertTrue(lines.all.contains { $0.hasPrefix("PID relay=") })

        XCTAssertEqual(try HTTP.post("\(ingest)/v1/notifications/appstore", body: body).status, 200)
        let posted = Date()
        try waitUntil("the notification's grant is visible", timeout: 2, interval: 0.05) {
            let view = try HTTP.get("\(ingest)/v1/subscriptions/000000000000000", authorization: apiKey)
            return view.status == 200 && ((view.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        print("dev: notification visible in the API after \(String(format: "%.3f", Date().timeIntervalSince(posted))) s")

        let postgresDirectory = try XCTUnwrap(lines.value(after: "POSTGRES_DIR="))
        XCTAssertTrue(FileManager.default.fileExists(atPath: postgresDirectory))
        kill(process.processIdentifier, SIGINT)
        try waitUntil("dev exits", timeout: 30) { !process.isRunning }
        XCTAssertEqual(process.terminationStatus, 0)
        for pid in pids {
            XCTAssertNotEqual(kill(pid, 0), 0, "process \(pid) is still running after dev stopped")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: postgresDirectory), "the private PostgreSQL directory is removed")
        XCTAssertEqual(processes(mentioning: postgresDirectory), [], "no PostgreSQL process of dev's cluster is left")
    }

    /// `--workers stage=N` (issue 13): N members of the stage, each its own process in the stage's
    /// consumer group with its own admin port; dev reports READY only once every member holds
    /// partitions; a notification is granted once; SIGINT stops every member.
    func testDevWorkersRunsSeveralMembersPerStage() throws {
        let key = "1300\(Int.random(in: 100_000_000...999_999_999))"
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: key))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["dev", "--port", "0", "--partitions", "4", "--workers", "dedupe=2,membership=3"]
        var environment = ProcessInfo.processInfo.environment
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        environment.removeValue(forKey: "DATABASE_URL")
        environment["STORELEDGER_V1_SHARED_SECRETS"] = TestCredentials.v1Secret
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil } else { lines.append(data) }
        }
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        try waitUntil("dev prints READY", timeout: 120) { lines.contains("READY") }
        let ingest = try XCTUnwrap(lines.value(after: "INGEST="))
        let apiKey = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "API_KEY=")))
        let pids = lines.all.filter { $0.hasPrefix("PID ") }.compactMap { Int32($0.split(separator: "=").last ?? "") }
        XCTAssertEqual(pids.count, 11, "the 8 processes of a plain dev plus a second dedupe and a second and third membership member")
        for role in ["dedupe", "dedupe-2", "membership", "membership-2", "membership-3"] {
            let admin = try XCTUnwrap(lines.value(after: "ADMIN \(role)="), "dev prints \(role)'s admin URL")
            XCTAssertEqual(try HTTP.get("\(admin)/readyz").status, 200, "\(role) holds partitions (READY waits for every member)")
        }
        XCTAssertNil(lines.value(after: "ADMIN decode-2="), "stages not named keep one member")

        XCTAssertEqual(try HTTP.post("\(ingest)/v1/notifications/appstore", body: body).status, 200)
        try waitUntil("the notification's grant is visible", timeout: 30, interval: 0.1) {
            let view = try HTTP.get("\(ingest)/v1/subscriptions/\(key)", authorization: apiKey)
            return view.status == 200 && ((view.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        kill(process.processIdentifier, SIGINT)
        try waitUntil("dev exits", timeout: 60) { !process.isRunning }
        XCTAssertEqual(process.terminationStatus, 0)
        for pid in pids { XCTAssertNotEqual(kill(pid, 0), 0, "process \(pid) is still running after dev stopped") }
    }

    /// `--workers` is validated before anything starts: unknown stages, counts outside 1...16 and
    /// repeated stages are usage errors (exit 2).
    func testDevWorkersRejectsBadCounts() throws {
        XCTAssertEqual(try MemberCounts.parse("decode=2,dedupe=2,classify=1,membership=3", stages: ["decode", "dedupe", "classify", "membership"]),
                       MemberCounts(["decode": 2, "dedupe": 2, "classify": 1, "membership": 3]))
        XCTAssertEqual(MemberCounts.role("membership", member: 1), "membership")
        XCTAssertEqual(MemberCounts.role("membership", member: 3), "membership-3")
        for bad in ["relay=2", "decode=0", "decode=17", "decode=2,decode=3", "decode", "decode=x", "", "decode=2,", "=2", "decode=99999999999999999999"] {
            XCTAssertThrowsError(try MemberCounts.parse(bad, stages: ["decode", "dedupe", "classify", "membership"]), bad)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try Cluster.binary())
            process.arguments = ["dev", "--port", "0", "--workers", bad]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            try waitUntil("dev refuses --workers \(bad)", timeout: 20) { !process.isRunning }
            XCTAssertEqual(process.terminationStatus, 2, "--workers \(bad)")
        }
    }
}

/// Pids whose command line mentions `text` (like `pgrep -f`).
func processes(mentioning text: String) -> [Int32] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap(Int32.init).filter { pid in
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self).contains(text)
    }
}

/// Collects a child's standard output lines.
final class LineCollector: @unchecked Sendable {
    // Safe: every access holds `lock`.
    private let lock = NSLock()
    private var buffer = ""
    private var lines: [String] = []

    func append(_ data: Data) {
        lock.lock()
        defer { lock.unlock() }
        buffer += String(decoding: data, as: UTF8.self)
        while let newline = buffer.firstIndex(of: "\n") {
            lines.append(String(buffer[..<newline]))
            buffer.removeSubrange(...newline)
        }
    }

    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
    func contains(_ line: String) -> Bool { all.contains(line) }
    func value(after prefix: String) -> String? { all.first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) } }
}

/// Contract (issue 11): `storeledger dev` makes working credentials and prints them (a service key,
/// a support key, a user token, the V1 secret), with strict defaults: the user token acts for its
/// user only, the service key is refused on support routes. Its signer signs the legacy form and
/// both JWS forms out of the box (a throwaway issuer id), with the header and claims Apple's own
/// PromotionalOfferV2SignatureCreator / IntroductoryOfferEligibilitySignatureCreator produce.
final class DevCredentialTests: XCTestCase {
    func testDevCredentialsWorkAndDevSignsEveryOfferForm() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dev-credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let catalog = directory.appendingPathComponent("catalog.json")
        try JSONEncoder().encode(OfferCluster.catalog).write(to: catalog)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["dev", "--port", "0", "--partitions", "4", "--catalog", catalog.path]
        var environment = ProcessInfo.processInfo.environment
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        environment.removeValue(forKey: "DATABASE_URL")
        environment.removeValue(forKey: "STORELEDGER_V1_SHARED_SECRETS")
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        let lines = LineCollector()
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil } else { lines.append(data) }
        }
        try process.run()
        defer {
            if process.isRunning { kill(process.processIdentifier, SIGINT) }
            _ = try? waitUntil("dev exits", timeout: 30) { !process.isRunning }
        }
        try waitUntil("dev prints READY", timeout: 90) { lines.contains("READY") }
        let ingest = try XCTUnwrap(lines.value(after: "INGEST="))
        let apiKey = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "API_KEY=")))
        let adminKey = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "ADMIN_KEY=")))
        let userToken = TestCredentials.bearer(try XCTUnwrap(lines.value(after: "USER_TOKEN=")))
        let user = try XCTUnwrap(lines.value(after: "USER="))
        let v1Secret = try XCTUnwrap(lines.value(after: "V1_SHARED_SECRET="))
        let issuerId = try XCTUnwrap(lines.value(after: "SIGNER_ISSUER_ID="))
        XCTAssertTrue(lines.all.contains { $0.contains("curl -H 'Authorization: Bearer") }, "dev prints how to use its credentials")

        // The user's history, as Apple reports it, with dev's V1 secret (a lapsed vip.1m month).
        let now = Int64(Date().timeIntervalSince1970 * 1000), day = OfferCluster.day
        let subscription = OfferSubscription(key: "5\(Int.random(in: 100_000...999_999))", purchases: [
            .init(transactionId: "5\(Int.random(in: 100_000...999_999))1", productId: "vip.1m", startMs: now - 60 * day, endMs: now - 30 * day),
        ])
        var body = try JSONSerialization.jsonObject(with: try subscription.notification(account: user)) as! [String: Any]
        XCTAssertEqual(try HTTP.post("\(ingest)/v1/notifications/appstore", body: try V1Bodies.data(body), authorization: nil).status, 401,
                       "the test secret is not dev's")
        body["password"] = v1Secret
        XCTAssertEqual(try HTTP.post("\(ingest)/v1/notifications/appstore", body: try V1Bodies.data(body), authorization: nil).status, 200)
        try waitUntil("the purchase is linked to \(user)", timeout: 40, interval: 0.25) {
            try HTTP.get("\(ingest)/v1/users/\(user)/membership", authorization: userToken).status == 200
        }
        XCTAssertEqual(try HTTP.get("\(ingest)/v1/users/someone-else/membership", authorization: userToken).status, 403)
        XCTAssertEqual(try HTTP.get("\(ingest)/v1/admin/users/\(user)", authorization: apiKey).status, 403)
        XCTAssertEqual(try HTTP.get("\(ingest)/v1/admin/users/\(user)", authorization: adminKey).status, 200)
        XCTAssertEqual(try HTTP.get("\(ingest)/v1/users/\(user)/ledger", authorization: nil).status, 401)

        func sign(_ request: [String: Any]) throws -> [String: Any] {
            var answer: HTTP.Response?
            // The signer joins its group a few seconds after READY: retry while it is not answering yet.
            try waitUntil("dev signs \(request)", timeout: 60, interval: 0.5) {
                answer = try HTTP.post("\(ingest)/v1/offers/signature", json: request, timeout: 10, authorization: userToken)
                return answer?.status != 504 && answer?.status != 503
            }
            XCTAssertEqual(answer?.status, 200, answer?.text ?? "")
            return try XCTUnwrap(answer?.json)
        }
        let legacy = try sign(["user_id": user, "product_id": "vip.1m"])
        XCTAssertEqual(legacy["keyIdentifier"] as? String, "DEVKEY0001")
        XCTAssertNotNil((legacy["signature"] as? String).flatMap { Data(base64Encoded: $0) })
        let transaction = subscription.purchases[0].transactionId
        let promotional = try DecodedParts(try XCTUnwrap(try sign(["user_id": user, "product_id": "vip.1m", "offer_id": "winback", "format": "jws",
                                                                  "transaction_id": transaction])["jws"] as? String))
        let intro = try DecodedParts(try XCTUnwrap(try sign(["user_id": user, "product_id": "vip.1m", "kind": "introductory-eligibility",
                                                            "transaction_id": transaction])["jws"] as? String))
        XCTAssertEqual(promotional.claims["iss"] as? String, issuerId)

        // Apple's creators with the same inputs (any key: only the shape is compared).
        let key = directory.appendingPathComponent("apple.p8")
        try Data(try P256PrivateKey.generate().pkcs8PEM().utf8).write(to: key)
        let common: [String: Any] = ["keyId": "DEVKEY0001", "issuerId": issuerId, "bundleId": OfferCluster.bundleId, "productId": "vip.1m",
                                     "transactionId": transaction]
        let applePromotional = try DecodedParts(try applePython(["apple-jws", key.path], common.merging(["kind": "promotional", "offerId": "winback"]) { $1 }))
        let appleIntro = try DecodedParts(try applePython(["apple-jws", key.path], common.merging(["kind": "intro", "allowIntroductoryOffer": true]) { $1 }))
        for (ours, apple) in [(promotional, applePromotional), (intro, appleIntro)] {
            XCTAssertEqual(ours.header as NSDictionary, apple.header as NSDictionary, "the header Apple's creator writes")
            XCTAssertEqual(Set(ours.claims.keys), Set(apple.claims.keys), "the claims Apple's creator writes")
            for name in ["iss", "aud", "bid", "productId", "offerIdentifier", "transactionId"] {
                XCTAssertEqual(ours.claims[name] as? String, apple.claims[name] as? String, name)
            }
            XCTAssertLessThan(abs(((ours.claims["iat"] as? NSNumber)?.doubleValue ?? 0) - ((apple.claims["iat"] as? NSNumber)?.doubleValue ?? 0)), 300)
        }
        XCTAssertEqual(intro.claims["allowIntroductoryOffer"] as? Bool, true, "no intro period was used in the group")
    }

    /// scripts/apple_python_offer.py with Apple's app-store-server-library (venv from scripts/offer-python-env.sh).
    private func applePython(_ arguments: [String], _ input: [String: Any]) throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func run(_ executable: String, _ arguments: [String], stdin: Data? = nil) throws -> (Int32, Data) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            let output = Pipe(), input = Pipe()
            process.standardOutput = output
            process.standardInput = input
            try process.run()
            if let stdin { input.fileHandleForWriting.write(stdin) }
            try input.fileHandleForWriting.close()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, data)
        }
        let (status, pythonPath) = try run("/bin/bash", [root.appendingPathComponent("scripts/offer-python-env.sh").path])
        guard status == 0 else { throw XCTSkip("Apple's Python library is not installed and PyPI could not be reached") }
        let python = String(decoding: pythonPath, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let (code, output) = try run(python, [root.appendingPathComponent("scripts/apple_python_offer.py").path] + arguments,
                                     stdin: try JSONSerialization.data(withJSONObject: input))
        guard code == 0, let json = try JSONSerialization.jsonObject(with: output) as? [String: Any], let jws = json["jws"] as? String else {
            throw ClusterError("apple_python_offer.py \(arguments[0]) failed")
        }
        return jws
    }
}

/// A compact JWS's header and claims.
struct DecodedParts {
    var header: [String: Any]
    var claims: [String: Any]

    init(_ jws: String) throws {
        let parts = jws.split(separator: ".").map(String.init)
        guard parts.count == 3, let header = Base64URL.decode(parts[0]), let claims = Base64URL.decode(parts[1]) else {
            throw ClusterError("not a compact JWS")
        }
        self.header = try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any] ?? [:]
        self.claims = try JSONSerialization.jsonObject(with: Data(claims)) as? [String: Any] ?? [:]
    }
}
