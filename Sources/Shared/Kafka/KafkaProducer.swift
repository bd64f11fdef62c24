import CRdKafka
import Dispatch
import Foundation
import Synchronization

/// An idempotent Kafka producer (`enable.idempotence=true`, `acks=all`, lz4).
///
/// Thread-safe: any thread may call `send`. Delivery reports are served by the producer's own
/// background thread, which loops on `rd_kafka_poll`; every `send` completion runs there,
/// exactly once, so completions must be quick and must not block.
///
/// How long a write may stay unconfirmed is bounded by `KafkaConfig.deliveryTimeout`
/// (`message.timeout.ms`, covering queue time, retries and the in-flight request). The
/// connection settings this module adds (`reconnect.backoff.max.ms=1000`,
/// `socket.connection.setup.timeout.ms=5000`) only decide how soon a returning broker is used.
public final class KafkaProducer: Sendable {
    private let client: RdKafkaClient
    private let state: ProducerState
    private let closeTimeout: Duration

    public init(config: KafkaConfig) throws(KafkaError) {
        client = try RdKafkaClient(RD_KAFKA_PRODUCER, properties: config.producerProperties()) { conf in
            rd_kafka_conf_set_dr_msg_cb(conf, serveDeliveryReport)
        }
        state = ProducerState()
        closeTimeout = config.deliveryTimeout + .seconds(2)
        startPollThread()
    }

    deinit { close() }

    /// Queues one record. `completion` runs exactly once on the producer's poll thread, with the
    /// broker's report or the reason the record was not stored (also for records refused
    /// immediately, e.g. `.queueFull`). After `close()` it runs at once on the caller's thread
    /// with `.closed`.
    public func send(
        topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
        partition: Int32? = nil,
        completion: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) {
        // `activeSends` lets close() wait out sends that passed the closed check (see close()).
        state.activeSends.add(1, ordering: .sequentiallyConsistent)
        defer { state.activeSends.subtract(1, ordering: .sequentiallyConsistent) }
        guard !state.closed.load(ordering: .sequentiallyConsistent) else {
            completion(.failure(KafkaError(.closed, "producer is closed")))
            return
        }
        let ticket = DeliveryTicket(completion: completion, state: state)
        state.inFlight.add(1, ordering: .relaxed)
        let opaque = Unmanaged.passRetained(ticket).toOpaque()
        if let error = produce(topic: topic, key: key, value: value, headers: headers,
                               partition: partition, opaque: opaque) {
            // librdkafka refused it: no delivery report will come, so hand the failure to the
            // poll thread ourselves to keep "completions run on the poll thread".
            Unmanaged<DeliveryTicket>.fromOpaque(opaque).release()
            state.refused.withLock { $0.append((ticket, error)) }
            rd_kafka_yield(client.pointer)
        }
    }

    /// Sends one record and blocks the calling thread until the broker confirms it or `timeout`
    /// passes (then `.timedOut`; the record may still be delivered later). Never call it on the
    /// Swift cooperative pool, nor from a completion (the poll thread would wait for itself).
    public func sendAndWait(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
                            partition: Int32? = nil, timeout: Duration) throws(KafkaError) -> KafkaDeliveryReport {
        let outcome = Outcome()
        send(topic: topic, key: key, value: value, headers: headers, partition: partition) { result in
            outcome.result.withLock { $0 = result }
            outcome.done.signal()
        }
        guard outcome.done.wait(timeout: .now() + .milliseconds(Int(timeout.rdMilliseconds))) == .success,
              let result = outcome.result.withLock({ $0 }) else {
            throw KafkaError(.timedOut, "no delivery report for \(topic) within \(timeout)")
        }
        return try result.get()
    }

    /// Blocks until every record sent so far has its completion run, or `timeout` passes.
    /// Connects and caches metadata for `topics` now, so the first real send does not pay for it
    /// (a stage's first record would otherwise wait for connection and metadata round trips).
    public func warmUp(topics: [String], timeout: Duration) {
        for name in topics {
            guard let topic = rd_kafka_topic_new(client.pointer, name, nil) else { continue }
            defer { rd_kafka_topic_destroy(topic) }
            var metadata: UnsafePointer<rd_kafka_metadata>?
            if rd_kafka_metadata(client.pointer, 0, topic, &metadata, timeout.rdMilliseconds) == RD_KAFKA_RESP_ERR_NO_ERROR {
                rd_kafka_metadata_destroy(metadata)
            }
        }
    }

    /// Whether the cluster answers a metadata request about `topic` within `timeout`: a readiness
    /// check (librdkafka queues sends while no broker answers, so a send alone cannot tell). Never
    /// while the producer has failed for good (`fatalFailure`): it would answer, but send nothing.
    public func brokerAnswers(topic: String, timeout: Duration) -> Bool {
        fatalFailure == nil && (try? client.partitionCount(topic: topic, timeout: timeout)) != nil
    }

    /// librdkafka's fatal error, if one was raised (an idempotent producer that can no longer keep
    /// its ordering guarantee): every later send fails, and only a new producer sends again.
    public var fatalFailure: String? {
        var text = [CChar](repeating: 0, count: 512)
        guard rd_kafka_fatal_error(client.pointer, &text, text.count) != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Raises a fatal error as librdkafka would (tests of what a process does then).
    public func raiseFatalErrorForTesting(_ reason: String) {
        _ = rd_kafka_test_fatal_error(client.pointer, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, reason)
    }

    public func flush(timeout: Duration) throws(KafkaError) {
        let deadline = ContinuousClock.now + timeout
        while state.inFlight.load(ordering: .acquiring) > 0 {
            guard ContinuousClock.now < deadline else {
                throw KafkaError(.timedOut, "flush: \(state.inFlight.load(ordering: .relaxed)) records still unconfirmed after \(timeout)")
            }
            // Completions run on the poll thread; a short sleep keeps this simple and flush is rare.
            usleep(1000)
        }
    }

    /// Flushes (up to the delivery timeout plus 2 s), fails whatever is still queued with
    /// `.closed`, and stops the poll thread. Idempotent; `deinit` calls it.
    public func close() {
        guard state.closed.compareExchange(expected: false, desired: true,
                                           ordering: .sequentiallyConsistent).exchanged else { return }
        // A send that saw `closed == false` is still inside produce: let it finish so its
        // record is counted before we drain.
        while state.activeSends.load(ordering: .sequentiallyConsistent) > 0 { sched_yield() }
        if state.isPollThread {
            // Dropped from inside a completion: we cannot wait for ourselves. The loop ends
            // after this callback; anything unconfirmed is purged when the handle is destroyed.
            state.running.store(false, ordering: .releasing)
            return
        }
        if (try? flush(timeout: closeTimeout)) == nil {
            rd_kafka_purge(client.pointer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT)
            try? flush(timeout: .seconds(1))
        }
        state.running.store(false, ordering: .releasing)
        rd_kafka_yield(client.pointer)
        state.stopped.wait()
    }

    /// `rd_kafka_produceva` with the payload copied (`RD_KAFKA_MSG_F_COPY`), so the Swift arrays
    /// need only live for the call. Returns librdkafka's refusal, if any.
    private func produce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
                         partition: Int32?, opaque: UnsafeMutableRawPointer) -> KafkaError? {
        // Headers are built as a list librdkafka copies into and then owns (on success).
        let headerList = headers.isEmpty ? nil : rd_kafka_headers_new(headers.count)
        for header in headers {
            _ = header.value.withUnsafeBytes { bytes in
                rd_kafka_header_add(headerList, header.name, -1, bytes.baseAddress, bytes.count)
            }
        }
        return topic.withCString { topicName in
            value.withUnsafeBytes { valueBytes in
                withOptionalBytes(key) { keyBytes in
                    var fields: [rd_kafka_vu_t] = []
                    fields.reserveCapacity(7)
                    fields.append(field(RD_KAFKA_VTYPE_TOPIC) { $0.cstr = topicName })
                    fields.append(field(RD_KAFKA_VTYPE_VALUE) {
                        $0.mem.ptr = UnsafeMutableRawPointer(mutating: valueBytes.baseAddress)
                        $0.mem.size = valueBytes.count
                    })
                    if let keyBytes {
                        fields.append(field(RD_KAFKA_VTYPE_KEY) {
                            $0.mem.ptr = UnsafeMutableRawPointer(mutating: keyBytes.baseAddress)
                            $0.mem.size = keyBytes.count
                        })
                    }
                    if let partition { fields.append(field(RD_KAFKA_VTYPE_PARTITION) { $0.i32 = partition }) }
                    if let headerList { fields.append(field(RD_KAFKA_VTYPE_HEADERS) { $0.headers = headerList }) }
                    fields.append(field(RD_KAFKA_VTYPE_MSGFLAGS) { $0.i = RD_KAFKA_MSG_F_COPY })
                    fields.append(field(RD_KAFKA_VTYPE_OPAQUE) { $0.ptr = opaque })
                    guard let error = rd_kafka_produceva(client.pointer, fields, fields.count) else { return nil }
                    if let headerList { rd_kafka_headers_destroy(headerList) }
                    return KafkaError.consuming(error, "produce to \(topic)")
                }
            }
        }
    }

    private func startPollThread() {
        let client = client, state = state
        let thread = Thread {
            state.pollThreadID.store(UInt(pthread_self()), ordering: .releasing)
            while state.running.load(ordering: .acquiring) {
                rd_kafka_poll(client.pointer, 100)
                state.completeRefused()
            }
            state.completeRefused()
            state.stopped.signal()
        }
        thread.name = "kafka-producer-poll"
        thread.start()
    }
}

private func field(_ type: rd_kafka_vtype_t, _ set: (inout rd_kafka_vu_t.__Unnamed_union_u) -> Void) -> rd_kafka_vu_t {
    var field = rd_kafka_vu_t()
    field.vtype = type
    set(&field.u)
    return field
}

private func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBytes { body($0) }
}

/// State shared by senders, the delivery-report callback and the poll thread.
private final class ProducerState: Sendable {
    /// Records sent whose completion has not run yet.
    let inFlight = Atomic<Int>(0)
    let activeSends = Atomic<Int>(0)
    let closed = Atomic<Bool>(false)
    let running = Atomic<Bool>(true)
    let pollThreadID = Atomic<UInt>(0)
    let stopped = DispatchSemaphore(value: 0)
    /// Records librdkafka refused synchronously, completed by the poll thread.
    let refused = Mutex<[(DeliveryTicket, KafkaError)]>([])

    var isPollThread: Bool { pollThreadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    func completeRefused() {
        let batch = refused.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
        for (ticket, error) in batch { ticket.complete(.failure(error)) }
    }
}

/// One record's completion, carried through librdkafka as the per-message opaque.
private final class DeliveryTicket: Sendable {
    let completion: @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    let state: ProducerState

    init(completion: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void, state: ProducerState) {
        self.completion = completion
        self.state = state
    }

    func complete(_ result: Result<KafkaDeliveryReport, KafkaError>) {
        completion(result)
        // After the completion, so a finished flush means every completion has run.
        state.inFlight.subtract(1, ordering: .releasing)
    }
}

private final class Outcome: Sendable {
    let result = Mutex<Result<KafkaDeliveryReport, KafkaError>?>(nil)
    let done = DispatchSemaphore(value: 0)
}

/// librdkafka's delivery-report callback, run inside `rd_kafka_poll` on the poll thread.
private func serveDeliveryReport(_ client: OpaquePointer?, _ message: UnsafePointer<rd_kafka_message_t>?,
                                 _ opaque: UnsafeMutableRawPointer?) {
    guard let message, let ticketPointer = message.pointee._private else { return }
    let ticket = Unmanaged<DeliveryTicket>.fromOpaque(ticketPointer).takeRetainedValue()
    let topic = topicName(of: message)
    let error = message.pointee.err
    if error == RD_KAFKA_RESP_ERR_NO_ERROR {
        ticket.complete(.success(KafkaDeliveryReport(topic: topic, partition: message.pointee.partition,
                                                     offset: message.pointee.offset)))
    } else {
        ticket.complete(.failure(KafkaError(error, "delivery to \(topic)")))
    }
}
