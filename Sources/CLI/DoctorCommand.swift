import AppStoreServerAPI
import AppleDecoding
import Configuration
import Domain
import Foundation
import Postgres
import Runtime
import Stages
import Store

/// `storeledger doctor`: is this deployment able to talk to Apple? Checks, in order, the
/// verification settings and roots, the key (a token from the signer: the key itself is never
/// read here), each environment's endpoint (Request a Test Notification), and the round trip:
/// Apple reports the test notification delivered and, with DATABASE_URL, the dedupe stage saw it.
struct DoctorCommand: CLICommand {
    let name = "doctor"
    let summary = "Check configuration, Apple roots, the signer's key (by a token), App Store Server API reachability and a test-notification round trip through the pipeline."
    let usage = "[--environment Production,Sandbox] [--wait S] [--json] [--bootstrap B] [--database-url URL] [--key-id ID]"
    let optionNames: Set<String> = ["environment", "wait", "bootstrap", "database-url", "key-id"]
    let flagNames: Set<String> = ["json"]

    struct Check: Codable {
        var name: String
        var ok: Bool
        var detail: String
    }

    func run(_ arguments: Arguments) throws -> Int32 {
        var checks: [Check] = []
        let wait = TimeInterval(max(1, min(try arguments.int("wait", default: 30), 600)))
        defer {
            printReport(checks, key: "doctor", json: arguments.has("json")) {
                checks.map { "\($0.ok ? "ok  " : "FAIL") \($0.name): \($0.detail)" }.joined(separator: "\n")
            }
        }
        do {
            let decoding = try AppleDecodingConfiguration(Environment.read(arguments, DecodingConfiguration.init))
            try decoding.validate()
            checks.append(Check(name: "configuration", ok: decoding.bundleId != nil,
                                detail: "bundle \(decoding.bundleId ?? "<none: set \(Setting.bundleId)>"), environments "
                                    + decoding.environments.map(\.rawValue).joined(separator: ",")
                                    + "; API \(try apiBaseURLs().production.absoluteString), \(try apiBaseURLs().sandbox.absoluteString)"))
            checks.append(Check(name: "roots", ok: !decoding.appleRoots.isEmpty,
                                detail: "\(decoding.appleRoots.count) Apple root certificate(s) from \(Setting.appleRoots)"))
        } catch {
            checks.append(Check(name: "configuration", ok: false, detail: "\(error)"))
            return 1
        }
        let session: ServerAPISession
        do {
            session = try ServerAPISession(arguments, clientId: "storeledger-doctor")
        } catch {
            checks.append(Check(name: "key", ok: false, detail: "\(error)"))
            return 1
        }
        defer { session.close() }
        switch session.tokens.token() {
        case .success(let token):
            checks.append(Check(name: "key", ok: true, detail: "the signer minted an API token (expires \(TimeText.iso(token.expiresAt * 1000)))"))
        case .failure(let failure):
            checks.append(Check(name: "key", ok: false, detail: "no token from the signer: \(failure)"))
            return 1
        }
        let database = try Environment.databaseURL(arguments).map { try PGConnection(url: $0) }
        defer { database?.close() }
        let environments = try arguments.value("environment").map(RecoveryTime.environments) ?? session.environments
        for environment in environments {
            checks += roundTrip(session.client, environment, database: database, wait: wait)
        }
        return checks.allSatisfy(\.ok) ? 0 : 1
    }

    func roundTrip(_ client: AppStoreServerAPIClient, _ environment: AppStoreEnvironment, database: PGConnection?, wait: TimeInterval) -> [Check] {
        let env = environment.rawValue
        let token: String
        switch client.requestTestNotification(environment: environment) {
        case .success(let value): token = value
        case .failure(let failure): return [Check(name: "endpoint \(env)", ok: false, detail: failure.description)]
        }
        var checks = [Check(name: "endpoint \(env)", ok: true, detail: "Request a Test Notification accepted")]
        let deadline = Date().addingTimeInterval(wait)
        var uuid: String?
        var signedPayload: String?
        var delivered = false
        var last = "no answer"
        while Date() < deadline, !delivered {
            switch client.testNotificationStatus(token: token, environment: environment) {
            case .success(let status):
                uuid = (status.notification.payload["notificationUUID"] as? String)?.lowercased()
                signedPayload = status.signedPayload
                delivered = status.sendAttempts.contains { $0.sendAttemptResult == .success }
                last = status.sendAttempts.last?.rawSendAttemptResult ?? "no attempt yet"
            case .failure(let failure):
                last = failure.description
            }
            if !delivered { Thread.sleep(forTimeInterval: 1) }
        }
        checks.append(Check(name: "delivery \(env)", ok: delivered, detail: delivered ? "Apple delivered the test notification" : "last attempt: \(last)"))
        guard delivered, let database, let uuid, let signedPayload else { return checks }
        guard let input = RecoveryPass.seenInput(signedPayload: signedPayload, decoder: NotificationV2Decoder(verifier: client.verifier)) else {
            checks.append(Check(name: "pipeline \(env)", ok: false, detail: "notification \(uuid) does not decode as the decode stage would (its dead letters say why)"))
            return checks
        }
        var sighting: DedupeStore.Sighting?
        while Date() < deadline.addingTimeInterval(wait), sighting == nil {
            sighting = (try? DedupeStore(database).sightings([input]))?.first
            if sighting == nil { Thread.sleep(forTimeInterval: 0.5) }
        }
        checks.append(Check(name: "pipeline \(env)", ok: sighting != nil, detail: sighting.map {
            "the dedupe stage saw notification \(uuid) (delivered \($0.deliveries) time\($0.deliveries == 1 ? "" : "s"), last at \($0.lastSeenAt))"
        } ?? "notification \(uuid) not seen by the pipeline"))
        return checks
    }

    /// The Server API endpoints this process would call (Apple's unless set).
    private func apiBaseURLs() throws -> APIBaseURLs {
        try RecoveryTime.baseURLs(Environment.read(ServerAPIConfiguration.init))
    }
}
