import Auth
import Crypto
import Foundation
import HTTPServer
import LocalStack
import Runtime
import XCTest

/// Contract: `storeledger dev` (what the README's run command starts) brings up broker, private
/// PostgreSQL, migrations, ingest, the signer and every worker as separate processes on ports the
/// caller chose; a notification POSTed once dev's own `/readyz` answers 200 is visible in the API
/// within 2 seconds; SIGINT stops every process and removes the private PostgreSQL directory.
/// Nothing here reads dev's output: readiness is `/readyz`, processes come from /proc.
final class DevCommandTests: XCTestCase {
    func testDevRunsEverythingShowsANotificationWithin2SecondsAndStopsCleanly() throws {
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: "000000000000000"))
        let dev = try DevRun(["--partitions", "4"])
        defer { dev.kill() }
        try dev.waitUntilReady(timeout: 90)
        XCTAssertEqual(try HTTP.get("\(dev.ingest)/readyz", authorization: nil).status, 200, "ingest listens on the port the test chose")
        let children = dev.children()
        XCTAssertEqual(children.count, 8, "broker, ingest, signer, four stage workers and the events relay run as separate processes: \(children)")
        XCTAssertEqual(children.values.filter { $0.hasPrefix("worker relay") }.count, 1)

        XCTAssertEqual(try HTTP.post("\(dev.ingest)/v1/notifications/appstore", body: body).status, 200)
        let posted = Date()
        try waitUntil("the notification's grant is visible", timeout: 2, interval: 0.05) {
            let view = try HTTP.get("\(dev.ingest)/v1/subscriptions/000000000000000", authorization: dev.apiKey)
            return view.status == 200 && ((view.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        print("dev: notification visible in the API after \(String(format: "%.3f", Date().timeIntervalSince(posted))) s")

        let postgresDirectories = try dev.temporaryEntries().filter { processes(mentioning: $0) != [] }
        XCTAssertFalse(postgresDirectories.isEmpty, "the private PostgreSQL runs in dev's temporary directory")
        try dev.interrupt()
        XCTAssertEqual(dev.process.terminationStatus, 0)
        for pid in children.keys {
            XCTAssertNotEqual(Foundation.kill(pid, 0), 0, "process \(pid) is still running after dev stopped")
        }
        XCTAssertEqual(try dev.temporaryEntries(), [], "the private PostgreSQL directory and the signing key are removed")
        for directory in postgresDirectories {
            XCTAssertEqual(processes(mentioning: directory), [], "no PostgreSQL process of dev's cluster is left")
        }
    }

    /// `--workers stage=N` (issue 13): N members of the stage, each its own process in the stage's
    /// consumer group with its own admin port; dev's /readyz answers 200 only once every member holds
    /// partitions; a notification is granted once; SIGINT stops every member.
    func testDevWorkersRunsSeveralMembersPerStage() throws {
        let key = "1300\(Int.random(in: 100_000_000...999_999_999))"
        let body = try V1Bodies.data(V1Bodies.initialBuy(originalTransactionId: key))
        let dev = try DevRun(["--partitions", "4", "--workers", "dedupe=2,membership=3"])
        defer { dev.kill() }
        try dev.waitUntilReady(timeout: 120)
        let children = dev.children()
        XCTAssertEqual(children.count, 11, "the 8 processes of a plain dev plus a second dedupe and a second and third membership member")
        for (stage, count) in ["decode": 1, "dedupe": 2, "classify": 1, "membership": 3] {
            let members = children.values.filter { $0.hasPrefix("worker \(stage) ") }
            XCTAssertEqual(members.count, count, "members of \(stage)")
            for member in members {
                // Each member's admin port, as dev told it (--admin-port in its command line).
                let words = member.split(separator: " ")
                let port = try XCTUnwrap(words.firstIndex(of: "--admin-port").flatMap { Int(words[$0 + 1]) }, member)
                XCTAssertEqual(ReadinessProbe.status(port: port), 200, "\(member) holds partitions (dev is ready only with every member)")
            }
        }

        XCTAssertEqual(try HTTP.post("\(dev.ingest)/v1/notifications/appstore", body: body).status, 200)
        try waitUntil("the notification's grant is visible", timeout: 30, interval: 0.1) {
            let view = try HTTP.get("\(dev.ingest)/v1/subscriptions/\(key)", authorization: dev.apiKey)
            return view.status == 200 && ((view.json?["ledger"] as? [Any])?.count ?? 0) == 1
        }
        try dev.interrupt(timeout: 60)
        XCTAssertEqual(dev.process.terminationStatus, 0)
        for pid in children.keys { XCTAssertNotEqual(Foundation.kill(pid, 0), 0, "process \(pid) is still running after dev stopped") }
    }

    /// A component that does not come up fails dev's boot with its name and the end of its standard
    /// error, instead of a stack that never gets ready: here ingest, given a port that is taken.
    func testDevNamesTheComponentThatDidNotComeUp() throws {
        let taken = try FreePort.loopback()
        let listener = HTTPServer(port: taken, threads: 1, maxBodyBytes: 0) { _, responder in _ = responder.respond(.error(status: 503, reason: "taken")) }
        try listener.start()
        defer { listener.stop() }
        // A file, not a pipe: nobody reads while dev runs.
        let errors = NSTemporaryDirectory() + "dev-errors-\(UUID().uuidString).log"
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: errors) }
        let dev = try DevRun(["--partitions", "2"], ingestPort: taken, standardError: try XCTUnwrap(FileHandle(forWritingAtPath: errors)))
        defer { dev.kill() }
        try waitUntil("dev gives up", timeout: 120) { !dev.process.isRunning }
        XCTAssertNotEqual(dev.process.terminationStatus, 0)
        let text = try String(contentsOfFile: errors, encoding: .utf8)
        XCTAssertTrue(text.contains("ingest kept exiting while starting"), text)
        XCTAssertTrue(text.contains("the end of its standard error"), "the error quotes ingest's own last lines: \(text)")
        XCTAssertEqual(try dev.temporaryEntries(), [], "what had started is stopped and removed")
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

/// `storeledger dev` as a child on ports the test chose (ingest, dev's own admin server), with a
/// service key the test made and a private temporary directory; nothing is read from its output.
final class DevRun: @unchecked Sendable {
    // Safe: set in init, read afterwards on the test thread.
    let process = Process()
    let ingest: String
    let adminPort: Int
    let apiKey: String
    let temporaryDirectory: String

    init(_ arguments: [String], ingestPort: Int? = nil, environment extra: [String: String] = [:], standardOutput: Pipe? = nil,
         standardError: FileHandle? = nil) throws {
        let port = try ingestPort ?? FreePort.loopback()
        adminPort = try FreePort.loopback()
        ingest = "http://127.0.0.1:\(port)"
        let key = try APIKeyRing.generateKey(prefix: "slk_test")
        apiKey = TestCredentials.bearer(key)
        temporaryDirectory = NSTemporaryDirectory() + "dev-run-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: temporaryDirectory, withIntermediateDirectories: false)
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = ["dev", "--port", String(port), "--admin-port", String(adminPort)] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["STORELEDGER_LOG_LEVEL"] = "warning"
        environment.removeValue(forKey: "DATABASE_URL")
        // The test's V1 bodies carry this password; dev makes every other credential itself.
        environment["STORELEDGER_V1_SHARED_SECRETS"] = TestCredentials.v1Secret
        environment["STORELEDGER_DEV_API_KEY"] = key
        environment["TMPDIR"] = temporaryDirectory
        environment.merge(extra) { $1 }
        process.environment = environment
        process.standardOutput = standardOutput ?? FileHandle.nullDevice
        if let standardError { process.standardError = standardError }
        try process.run()
    }

    /// dev's own /readyz: every process it started is ready.
    func waitUntilReady(timeout: TimeInterval) throws {
        try waitUntil("dev's /readyz answers 200", timeout: timeout, interval: 0.2) {
            guard process.isRunning else { throw ClusterError("dev exited with status \(process.terminationStatus) before it was ready") }
            return ReadinessProbe.status(port: adminPort) == 200
        }
    }

    /// dev's child processes of the storeledger binary, by pid, with their arguments ("worker decode --admin-port 4711").
    func children() -> [Int32: String] {
        let binary = URL(fileURLWithPath: (try? Cluster.binary()) ?? "").resolvingSymlinksInPath().path
        var found: [Int32: String] = [:]
        for pid in ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap(Int32.init) {
            // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after the last ')'.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, Int32(fields[1]) == process.processIdentifier,
                  let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { continue }
            guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == binary else { continue }
            let words = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            found[pid] = words.dropFirst().joined(separator: " ")
        }
        return found
    }

    /// What is left in dev's temporary directory (full paths).
    func temporaryEntries() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: temporaryDirectory).map { temporaryDirectory + "/" + $0 }
    }

    /// SIGINT, as Ctrl-C; waits until dev exited.
    func interrupt(timeout: TimeInterval = 30) throws {
        Foundation.kill(process.processIdentifier, SIGINT)
        try waitUntil("dev exits", timeout: timeout) { !process.isRunning }
    }

    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(atPath: temporaryDirectory)
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
        // The credentials dev made are for the developer to read (printed once); this test reads them
        // from there, while readiness is dev's /readyz.
        let output = Pipe()
        let lines = LineCollector()
        let reader = output.fileHandleForReading
        Thread.detachNewThread { reader.readChunksUntilEnd { lines.append($0) } }
        let dev = try DevRun(["--partitions", "4", "--catalog", catalog.path], environment: ["STORELEDGER_V1_SHARED_SECRETS": ""],
                             standardOutput: output)
        defer {
            if dev.process.isRunning { try? dev.interrupt() }
            dev.kill()
        }
        try dev.waitUntilReady(timeout: 90)
        try waitUntil("dev printed its credentials", timeout: 10) { lines.all.contains { $0.contains("curl -H 'Authorization: Bearer") } }
        let ingest = dev.ingest
        let apiKey = dev.apiKey
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
