import Domain
import Foundation
import Kafka
import Runtime
import Synchronization

/// Why a sign request got no signature.
enum OfferSignFailure: Error, Sendable, Equatable {
    /// No reply before the deadline (the signer is down, slow or the broker is unreachable).
    case timedOut
    /// The request could not be written to the broker.
    case unavailable(String)
}

/// Request/reply with the signer over Kafka. Requests go to the request topic keyed by a fresh
/// correlation id; this process reads the whole reply topic in a consumer group of its own (so
/// every ingest instance sees every reply and keeps only its own) and resolves the waiting caller.
/// Every call ends by its deadline: a reply, or `.timedOut`.
///
/// The group starts at the latest offset (old replies are never anyone's). Because replies written
/// before the group is assigned would be missed, the client first proves its reader is live by
/// writing a probe reply and reading it back; requests made before that wait for it (within their
/// deadline).
final class OfferSignClient: Sendable {
    typealias Completion = @Sendable (Result<SignReply, OfferSignFailure>) -> Void

    private let producer: KafkaProducer
    private let consumer: KafkaConsumer
    private let logger = Logger(component: "ingest.offers")
    private let state = Mutex(State())
    private let running = Atomic<Bool>(true)
    private let stopped = DispatchSemaphore(value: 0)
    private let probeId = "probe-" + UUID().uuidString.lowercased()

    private struct State {
        var ready = false
        var waiting: [String: Completion] = [:]
        /// Requests made before the reader was proven live, sent once it is.
        var queued: [(SignRequest, [UInt8])] = []
    }

    init(kafka: KafkaConfig) throws {
        // Latency-bound: send at once; an idle fetch returns within 2 ms.
        var producerKafka = kafka
        producerKafka.linger = .milliseconds(0)
        // Small records on an idle connection: Nagle + delayed ACK would add up to 40 ms.
        producerKafka.extra = ["socket.nagle.disable": "true"].merging(kafka.extra) { _, given in given }
        var consumerKafka = kafka
        consumerKafka.extra = ["fetch.wait.max.ms": "2", "fetch.error.backoff.ms": "5", "auto.offset.reset": "latest",
                               "socket.nagle.disable": "true"]
            .merging(kafka.extra) { _, given in given }
        producer = try KafkaProducer(config: producerKafka)
        consumer = try KafkaConsumer(config: consumerKafka, groupId: "storeledger-ingest-replies-\(UUID().uuidString.lowercased())",
                                     topics: [Topic.signReplies])
        let thread = Thread { [self] in readReplies() }
        thread.name = "offer-sign-replies"
        thread.start()
    }

    /// Sends `request` and calls `completion` exactly once: with the reply, or a failure no later
    /// than `request.deadlineMs`.
    func send(_ request: SignRequest, completion: @escaping Completion) {
        guard let value = (try? JSONEncoder().encode(request)).map({ [UInt8]($0) }) else {
            completion(.failure(.unavailable("request encoding failed")))
            return
        }
        let now = currentTimeMs()
        let sendNow = state.withLock { state -> Bool in
            state.waiting[request.correlationId] = completion
            if !state.ready {
                // Requests past their deadline were answered 504 already: a long wait for the reply
                // reader keeps only the ones still worth sending.
                state.queued.removeAll { $0.0.deadlineMs < now }
                state.queued.append((request, value))
            }
            return state.ready
        }
        let remaining = max(0, request.deadlineMs - now)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(remaining))) { [self] in
            finish(request.correlationId, .failure(.timedOut))
        }
        if sendNow { write(request, value) }
    }

    func close() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        stopped.wait()
        consumer.close()
        producer.close()
        let pending = state.withLock { state in
            defer { state.waiting.removeAll() }
            return Array(state.waiting.values)
        }
        pending.forEach { $0(.failure(.unavailable("ingest is stopping"))) }
    }

    private func write(_ request: SignRequest, _ value: [UInt8]) {
        producer.send(topic: Topic.signRequests, key: Array(request.correlationId.utf8), value: value) { [self] result in
            if case .failure(let error) = result {
                finish(request.correlationId, .failure(.unavailable(error.description)))
            }
        }
    }

    private func finish(_ correlationId: String, _ result: Result<SignReply, OfferSignFailure>) {
        let completion = state.withLock { $0.waiting.removeValue(forKey: correlationId) }
        completion?(result)
    }

    private func readReplies() {
        defer { stopped.signal() }
        let decoder = JSONDecoder()
        var lastProbe = ContinuousClock.now - .seconds(1)
        while running.load(ordering: .acquiring) {
            if !state.withLock({ $0.ready }), ContinuousClock.now - lastProbe >= .milliseconds(250) {
                lastProbe = ContinuousClock.now
                let probe = SignReply(correlationId: probeId, status: .refused, reason: "reader probe")
                if let value = try? JSONEncoder().encode(probe) {
                    producer.send(topic: Topic.signReplies, key: Array(probeId.utf8), value: [UInt8](value)) { _ in }
                }
            }
            let records: [KafkaRecord]
            do {
                records = try consumer.poll(maxRecords: 500, timeout: .milliseconds(100))
            } catch {
                logger.warning("sign_reply_poll_failed", ["error": .string(error.description)])
                Thread.sleep(forTimeInterval: 0.1)
                continue
            }
            for record in records {
                guard let reply = try? decoder.decode(SignReply.self, from: Data(record.value)) else { continue }
                if reply.correlationId == probeId {
                    becomeReady()
                } else {
                    finish(reply.correlationId, .success(reply))
                }
            }
        }
    }

    private func becomeReady() {
        let queued = state.withLock { state -> [(SignRequest, [UInt8])] in
            guard !state.ready else { return [] }
            state.ready = true
            defer { state.queued.removeAll() }
            // Only those still waiting: the others already timed out.
            return state.queued.filter { state.waiting[$0.0.correlationId] != nil }
        }
        logger.info("sign_replies_reader_ready", ["queued": .of(queued.count)])
        for (request, value) in queued { write(request, value) }
    }
}
