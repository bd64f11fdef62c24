import AppStoreServerAPI
import AppleDecoding
import Configuration
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
import Synchronization

/// A recovery pass (`storeledger recover notifications`, `storeledger worker recover`): Apple's
/// notification history for a window, and what the pipeline never saw fed into the raw topic.
public enum RecoveryPass {
    /// One recovery pass over `[from, to)` per environment: page the history, skip what the dedupe
    /// stage already saw (with a database), feed the rest (without a producer: only report).
    public static func recover(client: AppStoreServerAPIClient, environments: [AppStoreEnvironment], from: Int64, to: Int64, onlyFailures: Bool,
                               producer: KafkaProducer?, database: PGConnection?) throws -> [RecoveryReport] {
        try environments.map { environment in
            var report = RecoveryReport(environment: environment.rawValue)
            let walker = Walker(client: client, environment: environment, onlyFailures: onlyFailures, producer: producer, database: database)
            try walker.recover(from: from, to: to, into: &report)
            return report
        }
    }

    /// Windows narrower than this are not split again: a walk cut short there stays `truncated`.
    static let narrowestWindowMs: Int64 = 60_000

    private struct Walker {
        let client: AppStoreServerAPIClient
        let environment: AppStoreEnvironment
        let onlyFailures: Bool
        let producer: KafkaProducer?
        let database: PGConnection?

        /// A walk that stops at the page limit covers only the start of its window, and the next pass
        /// would read the same pages again: its entries are left and each half of the window is walked
        /// instead, so a busy week is recovered whole. A walk Apple's cursor ended (repeated or left
        /// out) is not split: narrower windows would only repeat it, thousands of times.
        func recover(from: Int64, to: Int64, into report: inout RecoveryReport) throws {
            let request = NotificationHistoryRequest(startDate: from, endDate: to, onlyFailures: onlyFailures ? true : nil)
            let walk: NotificationHistoryWalk
            switch client.notificationHistory(request, environment: environment) {
            case .failure(let failure):
                report.error = report.error ?? failure.description
                return
            case .success(let value): walk = value
            }
            report.pages += walk.pages
            if walk.reachedPageLimit, to - from >= 2 * RecoveryPass.narrowestWindowMs {
                let middle = from + (to - from) / 2
                try recover(from: from, to: middle, into: &report)
                try recover(from: middle, to: to, into: &report)
                return
            }
            let seen = try database.map { try RecoveryPass.seenUUIDs(walk.entries, decoder: NotificationV2Decoder(verifier: client.verifier), db: $0) } ?? []
            let plan = NotificationRecovery.plan(walk.entries, alreadySeen: seen)
            report.truncated = report.truncated || walk.truncated
            report.found += walk.entries.count
            report.neverDelivered += walk.entries.filter(\.neverDelivered).count
            report.alreadyIngested += plan.alreadyIngested
            report.duplicatesInHistory += plan.duplicatesInHistory
            report.withoutUUID += plan.withoutUUID
            report.unusable += plan.unusable
            report.toFeed += plan.toFeed.count
            report.uuids += plan.toFeed.map(\.notificationUUID)
            for item in plan.toFeed {
                guard let producer else { continue }
                do {
                    _ = try producer.sendAndWait(topic: Topic.notificationsRaw, key: nil, value: item.rawBody,
                                                 headers: RecoveryPass.headers(nowMs: currentTimeMs()), timeout: .seconds(30))
                    report.fed += 1
                } catch {
                    report.failed += 1
                }
            }
        }
    }

    /// What ingest writes for a notification, plus where it came from.
    static func headers(nowMs: Int64) -> [KafkaHeader] {
        [KafkaHeader(name: RecordHeader.receivedAt, value: Array(String(nowMs).utf8)),
         KafkaHeader(name: RecordHeader.source, value: Array(RawSource.appStoreNotification.rawValue.utf8)),
         KafkaHeader(name: RecordHeader.contentType, value: Array("application/json".utf8)),
         KafkaHeader(name: NotificationRecovery.provenanceHeader, value: Array(NotificationRecovery.provenanceRecovered.utf8))]
    }

    /// The UUIDs (lower case) of the entries the dedupe stage already saw.
    static func seenUUIDs(_ entries: [NotificationHistoryEntry], decoder: NotificationV2Decoder, db: PGConnection) throws -> Set<String> {
        let inputs = entries.compactMap { seenInput(signedPayload: $0.signedPayload, decoder: decoder) }
        return Set(try DedupeStore(db).sightings(inputs).map { String($0.eventKey.dropFirst("uuid:".count)) })
    }

    /// What the dedupe stage records a V2 notification as: `uuid:<notificationUUID>` under the
    /// subscription it is about, found by decoding it as the decode stage does (seen_events' key is
    /// the pair). Nil without a UUID, or when it does not decode: the pipeline cannot have seen it.
    public static func seenInput(signedPayload: String, decoder: NotificationV2Decoder) -> DedupeStore.SeenEvent? {
        guard case .success(let event) = decoder.decode(signedPayload: signedPayload, receivedAtMs: 0, rawPosition: nil),
              let uuid = event.notification?.uuid, !uuid.isEmpty else { return nil }
        return DedupeStore.SeenEvent(subscriptionKey: event.subscriptionKey, eventKey: seenKey(of: event))
    }
}

/// What one environment's recovery did.
public struct RecoveryReport: Codable, Sendable {
    var environment: String
    var error: String?
    var pages = 0
    /// A walk stopped at --max-pages in a window too narrow to split again, or on a cursor Apple
    /// repeated or left out (never split).
    var truncated = false
    var found = 0
    var neverDelivered = 0
    var alreadyIngested = 0
    var duplicatesInHistory = 0
    var withoutUUID = 0
    var unusable = 0
    var toFeed = 0
    var fed = 0
    var failed = 0
    var uuids: [String] = []

    init(environment: String) { self.environment = environment }

    public var complete: Bool { error == nil && !truncated && failed == 0 }

    public var summary: String {
        if let error { return "recover notifications \(environment): FAILED \(error)" }
        return "recover notifications \(environment): \(found) in history (\(neverDelivered) never delivered) over \(pages) page(s)"
            + "\(truncated ? " TRUNCATED" : ""); \(alreadyIngested) already ingested, \(duplicatesInHistory) duplicate(s), "
            + "\(withoutUUID) without UUID, \(unusable) unusable; fed \(fed) of \(toFeed)\(failed > 0 ? ", \(failed) FAILED" : "")"
    }
}

/// Option parsing for recovery, kept apart so it is plain functions.
public enum RecoveryTime {
    public static func parse(_ text: String) -> Int64? {
        if let ms = Int64(text), ms >= 0 { return ms }
        let formatter = ISO8601DateFormatter()
        return formatter.date(from: text).map { Int64($0.timeIntervalSince1970 * 1000) }
    }

    public static func environments(_ text: String) throws -> [AppStoreEnvironment] {
        try text.split(separator: ",").map { name in
            guard let environment = AppStoreEnvironment(lenient: String(name)), !environment.isLocal else {
                throw UsageError("--environment: Production or Sandbox, got \"\(name)\"")
            }
            return environment
        }
    }

    /// Apple's endpoints unless the settings name others (the simulator's, in tests).
    public static func baseURLs(_ settings: ServerAPIConfiguration) throws -> APIBaseURLs {
        func url(_ setting: Setting, _ given: String?, _ fallback: URL) throws -> URL {
            guard let text = given else { return fallback }
            guard let url = URL(string: text), url.scheme == "https" || url.scheme == "http" else {
                throw UsageError("\(setting) is not an http(s) URL")
            }
            return url
        }
        return APIBaseURLs(production: try url(.apiProductionURL, settings.productionURL, APIBaseURLs.appleProduction),
                           sandbox: try url(.apiSandboxURL, settings.sandboxURL, APIBaseURLs.appleSandbox))
    }
}

struct SignerExchangeError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Synchronous request/reply with the signer for API tokens: the request goes to the sign request
/// topic, the reply is read from the reply topic with a consumer group of this process's own. A
/// probe reply read back first proves the reader is assigned, so the real reply cannot be missed.
/// The reader is polled only during an exchange: idle longer than librdkafka's max.poll.interval
/// (5 min; tokens last as long), it leaves its group and would rejoin only after the next reply was
/// written, past it (`latest`), so after a pause the probe proves the assignment again first.
final class SignerExchange: Sendable {
    private let producer: KafkaProducer
    private let consumer: KafkaConsumer
    private let ready = Mutex(false)
    private let lock = Mutex(())
    private let lastPollMs = Atomic<Int64>(0)
    /// Well inside max.poll.interval.ms (300 s).
    static let reprobeAfterIdleMs: Int64 = 60_000

    init(kafka: KafkaConfig) throws {
        var consumerKafka = kafka
        consumerKafka.extra = ["auto.offset.reset": "latest", "fetch.wait.max.ms": "10"].merging(kafka.extra) { _, given in given }
        var producerKafka = kafka
        producerKafka.linger = .milliseconds(0)
        producer = try KafkaProducer(config: producerKafka)
        consumer = try KafkaConsumer(config: consumerKafka, groupId: "storeledger-recover-\(UUID().uuidString.lowercased())",
                                     topics: [Topic.signReplies])
    }

    func close() {
        consumer.close()
        producer.close()
    }

    /// The reply to `request`, or nil by its deadline. Call `awaitReader` first.
    @Sendable func exchange(_ request: APITokenRequest) -> APITokenReply? {
        lock.withLock { _ in
            if currentTimeMs() - lastPollMs.load(ordering: .relaxed) > Self.reprobeAfterIdleMs {
                ready.withLock { $0 = false }
                guard probe(deadlineMs: request.deadlineMs) else { return nil }
            }
            guard ready.withLock({ $0 }), let value = try? JSONEncoder().encode(request),
                  (try? producer.sendAndWait(topic: Topic.signRequests, key: Array(request.correlationId.utf8), value: [UInt8](value),
                                             timeout: .seconds(10))) != nil else { return nil }
            return read(until: request.deadlineMs) { $0.correlationId == request.correlationId && $0.kind == APITokenReply.kindValue }
        }
    }

    /// Proves the reply reader is assigned by reading back a probe it wrote; false by the deadline.
    func awaitReader(deadlineMs: Int64) -> Bool {
        lock.withLock { _ in
            if ready.withLock({ $0 }), currentTimeMs() - lastPollMs.load(ordering: .relaxed) <= Self.reprobeAfterIdleMs { return true }
            return probe(deadlineMs: deadlineMs)
        }
    }

    private func probe(deadlineMs: Int64) -> Bool {
        let probeId = "probe-" + UUID().uuidString.lowercased()
        let probe = APITokenReply(correlationId: probeId, status: .refused, reason: "reader probe")
        guard let value = try? JSONEncoder().encode(probe) else { return false }
        while currentTimeMs() < deadlineMs {
            producer.send(topic: Topic.signReplies, key: Array(probeId.utf8), value: [UInt8](value)) { _ in }
            if read(until: min(deadlineMs, currentTimeMs() + 500), { $0.correlationId == probeId }) != nil {
                ready.withLock { $0 = true }
                return true
            }
        }
        return false
    }

    private func read(until deadlineMs: Int64, _ matches: (APITokenReply) -> Bool) -> APITokenReply? {
        let decoder = JSONDecoder()
        while currentTimeMs() < deadlineMs {
            defer { lastPollMs.store(currentTimeMs(), ordering: .relaxed) }
            guard let records = try? consumer.poll(maxRecords: 100, timeout: .milliseconds(100)) else { continue }
            for record in records {
                if let reply = try? decoder.decode(APITokenReply.self, from: Data(record.value)), matches(reply) { return reply }
            }
        }
        return nil
    }
}
