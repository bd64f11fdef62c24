import Crypto
import Foundation
import Synchronization

/// What the simulated App Store Server API remembers beside the store's ground truth: every V2
/// notification it sent (or "lost") with its send attempts, test notifications, mass extensions,
/// consumption answers received, and a plan of 429s to answer. Thread-safe: the HTTP threads and
/// the test or driver share it.
public final class ServerAPIState: Sendable {
    public struct SendAttempt: Sendable, Equatable {
        public var dateMs: Int64
        /// Apple's `sendAttemptResult` ("SUCCESS", "TIMED_OUT", ...).
        public var result: String
        public init(dateMs: Int64, result: String) {
            self.dateMs = dateMs
            self.result = result
        }
    }

    public struct NotificationRecord: Sendable, Equatable {
        public var signedPayload: String
        public var environment: SimEnvironment
        public var signedDateMs: Int64
        public var notificationType: String
        /// The transaction ids the notification is about (its transaction and that one's original).
        public var transactionIds: [String]
        public var attempts: [SendAttempt]
        public var delivered: Bool { attempts.contains { $0.result == "SUCCESS" } }
    }

    public struct MassExtension: Sendable, Equatable {
        public var productId: String
        public var environment: SimEnvironment
        public var succeeded: Int
        public var failed: Int
        public var completeMs: Int64
    }

    public struct ConsumptionAnswer: @unchecked Sendable {
        // @unchecked: the body is a JSON object from JSONSerialization, written once and then only read.
        public var transactionId: String
        public var environment: SimEnvironment
        public var body: [String: Any]
        public var receivedMs: Int64
    }

    /// Ways the simulated API can break its contract, so tests prove the client survives them.
    public enum Misbehavior: Sendable, Equatable {
        /// History answers repeat the cursor they were asked with and always claim `hasMore`.
        case repeatCursor
        /// History answers carry this many copies of their first signed item.
        case inflatePage(Int)
        /// Cursors of 5,000 bytes.
        case longCursor
        /// Answers name another app's bundle id.
        case foreignBundle
        /// 200 with a body that is not JSON.
        case notJSON
        /// Mass-extension status with negative counts.
        case negativeCounts
    }

    struct State {
        var misbehavior: Misbehavior?
        var notifications: [NotificationRecord] = []
        var testTokens: [String: Int] = [:]
        var massExtensions: [String: MassExtension] = [:]
        var appliedExtensions: Set<String> = []
        var consumption: [ConsumptionAnswer] = []
        var consumptionRequests: [String: Int64] = [:]
        var rateLimited: (remaining: Int, retryAfterSeconds: Int)?
        var requests: [String: Int] = [:]
        var lastAuthProblem: String?
    }

    let state = Mutex(State())

    public init() {}

    /// Records a notification as Apple's history shows it. A lost one has failed attempts only.
    public func record(signedPayload: String, environment: SimEnvironment, signedDateMs: Int64, notificationType: String,
                       transactionIds: [String], attempts: [SendAttempt]) {
        state.withLock {
            $0.notifications.append(NotificationRecord(signedPayload: signedPayload, environment: environment, signedDateMs: signedDateMs,
                                                       notificationType: notificationType, transactionIds: transactionIds, attempts: attempts))
        }
    }

    /// Records a V2 delivery (as the emitter made it): delivered once, or lost after Apple's retries.
    public func record(_ delivery: Delivery, delivered: Bool) {
        guard delivery.channel == .notificationV2, let facts = Self.facts(delivery.body) else { return }
        var attempts = [SendAttempt(dateMs: delivery.simMs, result: delivered ? "SUCCESS" : "TIMED_OUT")]
        if !delivered {
            var at = delivery.simMs
            for hours in delivery.retryDelaysHours {
                at += Int64(hours * 3_600_000)
                attempts.append(SendAttempt(dateMs: at, result: "NO_RESPONSE"))
            }
        }
        record(signedPayload: facts.signedPayload, environment: delivery.environment, signedDateMs: delivery.simMs,
               notificationType: facts.type, transactionIds: facts.transactionIds, attempts: attempts)
    }

    /// Apple wants the answer to a CONSUMPTION_REQUEST within 12 hours; the simulator runs in real
    /// time and allows this many milliseconds.
    public static let consumptionDeadlineMs: Int64 = 60_000

    /// Notes that a CONSUMPTION_REQUEST about `transactionId` was sent at `atMs` (real time).
    public func consumptionRequested(transactionId: String, atMs: Int64) {
        state.withLock { $0.consumptionRequests[transactionId] = atMs }
    }

    /// The first answer about a requested transaction and whether it came within the deadline.
    public func consumptionAnswer(for transactionId: String) -> (answer: ConsumptionAnswer, inTime: Bool)? {
        state.withLock { state in
            guard let sent = state.consumptionRequests[transactionId],
                  let answer = state.consumption.first(where: { $0.transactionId == transactionId && $0.receivedMs >= sent }) else { return nil }
            return (answer, answer.receivedMs - sent <= Self.consumptionDeadlineMs)
        }
    }

    /// Answer the next `count` requests 429 with `Retry-After: retryAfterSeconds`.
    public func rateLimit(next count: Int, retryAfterSeconds: Int) {
        state.withLock { $0.rateLimited = count > 0 ? (count, retryAfterSeconds) : nil }
    }

    /// nil: behave.
    public func misbehave(_ misbehavior: Misbehavior?) { state.withLock { $0.misbehavior = misbehavior } }
    var misbehavior: Misbehavior? { state.withLock { $0.misbehavior } }

    public var notifications: [NotificationRecord] { state.withLock { $0.notifications } }
    public var consumptionAnswers: [ConsumptionAnswer] { state.withLock { $0.consumption } }
    /// Requests answered, by "<METHOD> <environment> <route> <status>".
    public var requests: [String: Int] { state.withLock { $0.requests } }
    /// Why the last refused token was refused (for test diagnostics; never the token).
    public var lastAuthProblem: String? { state.withLock { $0.lastAuthProblem } }

    /// The simulator's own JWS (trusted, so no verification): type and transaction ids.
    static func facts(_ body: [UInt8]) -> (signedPayload: String, type: String, transactionIds: [String])? {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let signed = object["signedPayload"] as? String,
              let payload = claims(signed), let type = payload["notificationType"] as? String else { return nil }
        var ids: [String] = []
        if let data = payload["data"] as? [String: Any], let info = data["signedTransactionInfo"] as? String,
           let transaction = claims(info) {
            ids = [transaction["transactionId"], transaction["originalTransactionId"]].compactMap { $0 as? String }
        }
        return (signed, type, ids)
    }

    static func claims(_ jws: String) -> [String: Any]? {
        let parts = jws.split(separator: ".")
        guard parts.count == 3, let bytes = Base64URL.decode(parts[1]) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }
}
