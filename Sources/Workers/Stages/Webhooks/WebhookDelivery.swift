import Crypto
import AppleDecoding
import Domain
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Postgres
import Store
import Runtime
import Synchronization

/// Signs a webhook body: `StoreLedger-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
public struct WebhookSigner: Sendable {
    private let secret: [UInt8]
    public init(secret: [UInt8]) { self.secret = secret }

    public func header(body: [UInt8], timestamp: Int64) -> String {
        WebhookSignature.headerValue(timestamp: timestamp,
                                     mac: HMACSHA256.authenticate(WebhookSignature.signedPayload(timestamp: timestamp, body: body), key: secret))
    }

    /// What a receiver does: recompute and compare in constant time, refusing old timestamps.
    public func verify(header: String, body: [UInt8], nowSeconds: Int64, tolerance: Int64 = 300) -> Bool {
        guard let parsed = WebhookSignature.parse(header), abs(nowSeconds - parsed.timestamp) <= tolerance else { return false }
        let expected = Array(WebhookSignature.hex(HMACSHA256.authenticate(
            WebhookSignature.signedPayload(timestamp: parsed.timestamp, body: body), key: secret)).utf8)
        return parsed.signatures.contains { HMACSHA256.constantTimeEqual(Array($0.utf8), expected) }
    }
}

/// Delivers membership events to the configured webhook endpoints (`storeledger worker webhooks`).
/// Each endpoint has its own thread, PostgreSQL connection and cursor, so a slow or failing endpoint
/// delays only itself; the pipeline never waits for any of them (they read the outbox afterwards).
// @unchecked: `run` is entered once, on the service thread; other threads read only `ready` (Atomic).
public final class WebhookDeliveryService: Service, @unchecked Sendable {
    public let name = "webhooks"
    private let config: WebhookConfig
    private let databaseURL: String
    private let ready = Atomic<Bool>(false)
    private let logger = Logger(component: "webhooks")
    /// Rounds wait this long when there is nothing to do.
    public var idleWait: Duration = .milliseconds(200)
    /// A standby (another worker delivers to the endpoint) asks for the endpoint this often.
    public var standbyWait: Duration = .seconds(1)

    public init(config: WebhookConfig, databaseURL: String) {
        self.config = config
        self.databaseURL = databaseURL
    }

    public var isReady: Bool { ready.load(ordering: .acquiring) }

    public func run(until stop: StopSignal) throws -> Int32 {
        let done = DispatchGroup()
        let failures = Mutex<[String]>([])
        for endpoint in config.endpoints {
            done.enter()
            let thread = Thread { [self] in
                defer { done.leave() }
                do {
                    try deliverLoop(endpoint, until: stop)
                } catch {
                    failures.withLock { $0.append("\(endpoint.id): \(error)") }
                    logger.error("webhook_endpoint_failed", ["endpoint": .string(endpoint.id), "error": .string("\(error)")])
                    stop.stop()
                }
            }
            thread.name = "webhook-\(endpoint.id)"
            thread.start()
        }
        ready.store(true, ordering: .releasing)
        logger.info("webhooks_started", ["endpoints": .string(config.endpoints.map(\.id).joined(separator: ","))])
        done.wait()
        return failures.withLock { $0.isEmpty } ? 0 : 1
    }

    /// One endpoint's rounds. Another worker may run beside this one (scale-out, a rolling deploy):
    /// the endpoint's session lock makes one of them the deliverer and the others stand by, taking
    /// over when its session ends.
    private func deliverLoop(_ endpoint: WebhookConfig.Endpoint, until stop: StopSignal) throws {
        var db: PGConnection?
        defer { db?.close() }
        var delivering = false
        let signer = WebhookSigner(secret: endpoint.secret)
        // Kept for the endpoint's life: its connections are reused from one POST to the next.
        let http = BoundedHTTPClient(maxConnectionsPerHost: endpoint.concurrency)
        while !stop.isStopped {
            do {
                if db == nil || db?.isBroken == true {
                    db?.close()
                    db = nil
                    delivering = false
                    db = try PGConnection(url: databaseURL)
                }
                let store = WebhookStore(db!)
                if !delivering {
                    delivering = try store.tryTakeDelivererLock(endpoint: endpoint.id)
                    guard delivering else {
                        _ = stop.wait(timeout: standbyWait)
                        continue
                    }
                    logger.info("webhook_delivering", ["endpoint": .string(endpoint.id)])
                }
                try store.enqueue(endpoint: endpoint.id, start: endpoint.start)
                let due = try store.due(endpoint: endpoint.id, nowMs: currentTimeMs())
                // Nothing recorded: nothing due, or only rows a newer release's deliverer sends.
                if try deliver(due, endpoint, signer, http, store, until: stop) == 0 { _ = stop.wait(timeout: idleWait) }
            } catch let error as PGError {
                // PostgreSQL away: wait and reconnect (the next round); nothing is lost, the rows wait
                // in the outbox.
                logger.warning("webhook_database_error", ["endpoint": .string(endpoint.id), "error": .string(error.description)])
                _ = stop.wait(timeout: .seconds(1))
            }
        }
    }

    /// One POST made: what was sent, when, and what came back.
    struct Sent: Sendable {
        var delivery: WebhookStore.Due
        var startedMs: Int64
        var endedMs: Int64
        var result: Result<Int, WebhookHTTPFailure>
    }

    /// POSTs a round's deliveries, `endpoint.concurrency` at a time, and records each as it returns.
    /// Each is the oldest pending event of a different user (`WebhookStore.due`), so sending them side by
    /// side keeps per-user order; a slow receiver costs a round its slowest answers, not their sum. The
    /// sending threads never touch PostgreSQL: this thread records, so a record that fails (PostgreSQL
    /// lost, and the deliverer lock with it) stops the round at once: no POST starts after it, and the
    /// round ends when those under way have returned, before a standby can send the same events. A stop
    /// likewise starts no more.
    ///
    /// An event this release cannot rebuild is not POSTed. One a newer release wrote stays pending for
    /// that release's deliverer. One nothing can rebuild is given up at once (shown by `webhooks show`):
    /// retried, it would hold the user's later events for the whole retry window.
    /// - Returns: how many attempts it recorded.
    private func deliver(_ due: [WebhookStore.Due], _ endpoint: WebhookConfig.Endpoint, _ signer: WebhookSigner,
                         _ http: BoundedHTTPClient, _ store: WebhookStore, until stop: StopSignal) throws -> Int {
        var recorded = 0
        var sendable: [(delivery: WebhookStore.Due, payload: [UInt8])] = []
        for delivery in due {
            switch delivery.payload {
            case .success(let payload): sendable.append((delivery, payload))
            case .failure(let unreadable) where unreadable.writtenByNewerRelease: continue
            case .failure(let unreadable):
                let nowMs = currentTimeMs()
                try record(Sent(delivery: delivery, startedMs: nowMs, endedMs: nowMs,
                                result: .failure(WebhookHTTPFailure(reason: "not sent: \(unreadable)"))),
                           endpoint, store, next: .giveUp)
                recorded += 1
            }
        }
        guard !sendable.isEmpty else { return recorded }
        let posts = sendable
        let round = Round(posts.count)
        // Threads of their own: each blocks on its answer, which GCD's pool must not run out of.
        for _ in 0..<min(endpoint.concurrency, posts.count) {
            round.started()
            Thread.detachNewThread {
                defer { round.stopped() }
                while !stop.isStopped, let index = round.take() {
                    round.finished(Self.send(posts[index].delivery, posts[index].payload, endpoint, signer, http))
                }
            }
        }
        defer { round.abandon() }
        while let sent = round.nextFinished() {
            try record(sent, endpoint, store)
            recorded += 1
        }
        return recorded
    }

    /// One round as its sending threads and the recording thread share it: which delivery to POST next,
    /// the POSTs made and not yet recorded, and how many threads still send.
    private final class Round: Sendable {
        private struct State {
            var next = 0
            var made: [Sent] = []
            var sending = 0
            var abandoned = false
        }
        private let count: Int
        private let state = Mutex(State())
        private let changed = DispatchSemaphore(value: 0)
        init(_ count: Int) { self.count = count }

        func started() { state.withLock { $0.sending += 1 } }
        func stopped() {
            state.withLock { $0.sending -= 1 }
            changed.signal()
        }
        /// The next delivery to POST, nil when none is left or the round was abandoned.
        func take() -> Int? {
            state.withLock { state in
                guard !state.abandoned, state.next < count else { return nil }
                defer { state.next += 1 }
                return state.next
            }
        }
        func finished(_ sent: Sent) {
            state.withLock { $0.made.append(sent) }
            changed.signal()
        }
        /// The next POST made, waiting for one; nil once every thread has stopped and all were handed out.
        func nextFinished() -> Sent? {
            while true {
                let (sent, sending) = state.withLock { state in
                    (state.made.isEmpty ? nil : state.made.removeFirst(), state.sending)
                }
                if let sent { return sent }
                if sending == 0 { return nil }
                changed.wait()
            }
        }
        /// Starts no more POSTs and waits for those under way (each ends within its timeout).
        func abandon() {
            state.withLock { $0.abandoned = true }
            while state.withLock({ $0.sending }) > 0 { changed.wait() }
        }
    }

    private static func send(_ delivery: WebhookStore.Due, _ payload: [UInt8], _ endpoint: WebhookConfig.Endpoint,
                             _ signer: WebhookSigner, _ http: BoundedHTTPClient) -> Sent {
        let startedMs = currentTimeMs()
        var request = URLRequest(url: endpoint.url, timeoutInterval: Double(endpoint.timeout.milliseconds) / 1000)
        request.httpMethod = "POST"
        request.httpBody = Data(payload)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue(signer.header(body: payload, timestamp: startedMs / 1000), forHTTPHeaderField: WebhookSignature.header)
        request.setValue("ledger-\(delivery.entryId)", forHTTPHeaderField: "StoreLedger-Event-Id")
        request.setValue(delivery.eventType, forHTTPHeaderField: "StoreLedger-Event-Type")
        request.setValue("StoreLedger-Webhooks/1", forHTTPHeaderField: "User-Agent")
        let result = WebhookHTTP.post(request, timeout: endpoint.timeout, on: http)
        return Sent(delivery: delivery, startedMs: startedMs, endedMs: currentTimeMs(), result: result)
    }

    /// Logs one POST's attempt and moves its delivery on (delivered, retry at, or given up). A failure
    /// to send goes on as the retry policy says, unless `next` says otherwise.
    private func record(_ sent: Sent, _ endpoint: WebhookConfig.Endpoint, _ store: WebhookStore,
                        next: WebhookRetryPolicy.Decision? = nil) throws {
        let delivery = sent.delivery
        let outcome: WebhookStore.Outcome
        switch sent.result {
        case .success(let status) where (200..<300).contains(status):
            outcome = .delivered(status: status)
            Metrics.shared.increment("storeledger_webhook_deliveries_total", ["endpoint": endpoint.id, "result": "delivered"])
        case .success(let status):
            outcome = .failed(status: status, error: "HTTP \(status)",
                              next: delivery.afterFailure(config.retry, startedMs: sent.startedMs, endedMs: sent.endedMs))
            Metrics.shared.increment("storeledger_webhook_deliveries_total", ["endpoint": endpoint.id, "result": "failed"])
        case .failure(let error):
            outcome = .failed(status: nil, error: error.reason,
                              next: next ?? delivery.afterFailure(config.retry, startedMs: sent.startedMs, endedMs: sent.endedMs))
            Metrics.shared.increment("storeledger_webhook_deliveries_total", ["endpoint": endpoint.id, "result": "failed"])
        }
        try store.record(endpoint: endpoint.id, entryId: delivery.entryId, attempt: delivery.attempts + 1, atMs: sent.startedMs,
                         durationMs: Int(sent.endedMs - sent.startedMs), outcome: outcome)
    }
}

/// One synchronous POST with a hard deadline (URLSession's timeout is an idle timeout), on the
/// endpoint's client (its connections kept open between POSTs). Only the status matters: at most
/// `maxBodyBytes` of the answer are read. A redirect is the answer, not followed (a 3xx is a failed
/// attempt): following it would move the signed body to another host, or turn the POST into a GET
/// whose 2xx would pass for delivery.
enum WebhookHTTP {
    static let maxBodyBytes = 64 * 1024

    static func post(_ request: URLRequest, timeout: Duration, on http: BoundedHTTPClient) -> Result<Int, WebhookHTTPFailure> {
        http.send(request, limit: maxBodyBytes, timeout: Double(timeout.milliseconds) / 1000, grace: 0.5, statusOnly: true)
            .map(\.status)
            .mapError { WebhookHTTPFailure(reason: $0.description) }
    }
}

/// Why a POST got no HTTP answer (connection refused, timeout); goes to the delivery log.
struct WebhookHTTPFailure: Error { let reason: String }
