import CRdKafka
import Runtime
import Synchronization

/// A consumer-group member with manual offset commits (at-least-once), synchronous or asynchronous.
///
/// Meant for one worker thread: `poll`, `commit` and `close` block, so never call them on the
/// Swift cooperative pool. It is `Sendable` so it can be built on one thread and handed to the
/// worker; calling it from several threads at once is safe but pointless.
///
/// Replay: a group remembers its offsets, so to re-read a topic from the start either join a
/// new group id (`auto.offset.reset=earliest` then starts at the beginning) or, once
/// partitions are assigned, call `seekToBeginning()`.
public final class KafkaConsumer: Sendable {
    public let groupId: String
    private let client: RdKafkaClient
    private let state = Mutex(ConsumerState())
    private let rebalances = RebalanceCounter()
    private let asyncCommits = AsyncCommitResults()
    /// The consumer queue, where the results of asynchronous commits are served by `poll`.
    private let queue: QueueHandle

    private struct ConsumerState {
        var closed = false
        /// An error met while draining after records were already collected; thrown by the
        /// next `poll` so those records are not lost.
        var pendingError: KafkaError?
    }

    public init(config: KafkaConfig, groupId: String, topics: [String]) throws(KafkaError) {
        self.groupId = groupId
        // The consumer loop drops what it holds on every rebalance and relies on librdkafka restarting
        // each assigned partition from its commit: an incremental (cooperative) protocol keeps the
        // partitions it does not move, and their dropped records would be skipped.
        if let strategy = config.consumerProperties(groupId: groupId)["partition.assignment.strategy"], strategy.contains("cooperative") {
            throw KafkaError(.configuration, "partition.assignment.strategy \(strategy): cooperative assignment is not supported (use range or roundrobin)")
        }
        let counter = Unmanaged.passUnretained(rebalances).toOpaque()
        client = try RdKafkaClient(RD_KAFKA_CONSUMER,
                                   properties: config.consumerProperties(groupId: groupId)) { conf in
            rd_kafka_conf_set_rebalance_cb(conf, serveRebalance)
            // The counter lives as long as this consumer, which outlives the handle's callbacks.
            rd_kafka_conf_set_opaque(conf, counter)
        }
        // Route everything (rebalances, errors, messages) to rd_kafka_consumer_poll.
        rd_kafka_poll_set_consumer(client.pointer)
        queue = QueueHandle(pointer: rd_kafka_queue_get_consumer(client.pointer))
        let list = rd_kafka_topic_partition_list_new(Int32(topics.count))
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics { rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA) }
        let error = rd_kafka_subscribe(client.pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            if let pointer = queue.pointer { rd_kafka_queue_destroy(pointer) }
            throw KafkaError(error, "subscribe to \(topics.joined(separator: ","))")
        }
    }

    deinit {
        close()
        // The queue reference must go before the handle (RdKafkaClient's deinit destroys it).
        if let pointer = queue.pointer { rd_kafka_queue_destroy(pointer) }
    }

    /// Waits up to `timeout` for one record, then takes whatever else is already fetched, up to
    /// `maxRecords`. Returns `[]` when nothing arrived (including while the broker is away:
    /// librdkafka reconnects by itself and logs it). Partition-EOF events are skipped; any other
    /// consumer error (e.g. an unknown topic, a fatal error) is thrown: back off and poll again,
    /// or stop on `.fatal`.
    public func poll(maxRecords: Int, timeout: Duration) throws(KafkaError) -> [KafkaRecord] {
        let (closed, pending) = state.withLock { state in
            defer { state.pendingError = nil }
            return (state.closed, state.pendingError)
        }
        if closed { throw KafkaError(.closed, "consumer \(groupId) is closed") }
        if let pending { throw pending }

        var records: [KafkaRecord] = []
        var wait = timeout.rdMilliseconds
        while records.count < maxRecords, let message = rd_kafka_consumer_poll(client.pointer, wait) {
            wait = 0
            defer { rd_kafka_message_destroy(message) }
            let error = message.pointee.err
            if error == RD_KAFKA_RESP_ERR_NO_ERROR {
                records.append(KafkaRecord(message))
            } else if error != RD_KAFKA_RESP_ERR__PARTITION_EOF {
                let failure = KafkaError(error, "consume \(describeSource(of: message))",
                                         detail: String(cString: rd_kafka_message_errstr(message)))
                if records.isEmpty { throw failure }
                state.withLock { $0.pendingError = failure }
                break
            }
        }
        return records
    }

    /// Commits, synchronously and per partition, the offset after the highest record given, and
    /// nothing else. Call it only once the records' effects are durable.
    public func commit(_ records: [KafkaRecord]) throws(KafkaError) {
        var next: [PartitionID: Int64] = [:]
        for record in records { next[record.partitionID] = max(next[record.partitionID] ?? 0, record.offset + 1) }
        try commit(offsets: next)
    }

    /// Commits, synchronously, these next offsets (the offset after the last finished record).
    public func commit(offsets next: [PartitionID: Int64]) throws(KafkaError) {
        guard !next.isEmpty else { return }
        let list = try partitionList(next)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_commit(client.pointer, list, 0)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "commit for group \(groupId)") }
        if let failure = firstPartitionError(list, "commit for group \(groupId)") { throw failure }
    }

    /// Sends these next offsets to the group coordinator without waiting for its answer. Like
    /// `commit(offsets:)`, call it only once the records' effects are durable: every offset sent is
    /// then one that may be committed, so a commit that fails, or lands after a later one, only
    /// means records are delivered again, which at-least-once consumers absorb. The answer is
    /// served by a later `poll`; failures are collected for `takeAsyncCommitFailures()`.
    /// Throws only if librdkafka refused to send it.
    public func commitAsync(offsets next: [PartitionID: Int64]) throws(KafkaError) {
        guard !next.isEmpty else { return }
        let list = try partitionList(next)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_commit_queue(client.pointer, list, queue.pointer, serveAsyncCommit,
                                          Unmanaged.passUnretained(asyncCommits).toOpaque())
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "commit for group \(groupId)") }
    }

    /// The asynchronous commits whose failure `poll` has served since the last call.
    public func takeAsyncCommitFailures() -> [KafkaError] {
        asyncCommits.failures.withLock { failures in
            defer { failures.removeAll() }
            return failures
        }
    }

    private func partitionList(_ offsets: [PartitionID: Int64]) throws(KafkaError) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        guard let list = rd_kafka_topic_partition_list_new(Int32(offsets.count)) else {
            throw KafkaError(.other, "commit: cannot allocate partition list")
        }
        for (key, offset) in offsets {
            rd_kafka_topic_partition_list_add(list, key.topic, key.partition).pointee.offset = offset
        }
        return list
    }

    /// The group's committed offset (the next record to read) for each partition of `topic`;
    /// partitions with no commit are left out.
    public func committedOffsets(topic: String, partitions: [Int32], timeout: Duration) throws(KafkaError) -> [Int32: Int64] {
        guard let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else {
            throw KafkaError(.other, "committed: cannot allocate partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for partition in partitions { rd_kafka_topic_partition_list_add(list, topic, partition) }
        let error = rd_kafka_committed(client.pointer, list, timeout.rdMilliseconds)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "committed offsets of \(topic)") }
        if let failure = firstPartitionError(list, "committed offsets of \(topic)") { throw failure }
        var offsets: [Int32: Int64] = [:]
        for element in elements(of: list) where element.offset >= 0 {
            offsets[element.partition] = element.offset
        }
        return offsets
    }

    /// Consumer lag per partition: the high watermark librdkafka last saw in a fetch reply (cached,
    /// no request) minus `committed[p]`, the next offset this member committed, or else its fetch
    /// position (where it resumed from the group's commit). Partitions with neither are left out.
    /// `queried`: high watermarks asked of the broker (`queryHighWatermarks`), for partitions whose
    /// cached one stands still because they are paused (a paused partition is not fetched).
    public func lag(of partitions: Set<PartitionID>, committed: [PartitionID: Int64],
                    queried: [PartitionID: Int64] = [:]) -> [PartitionID: Int64] {
        guard !partitions.isEmpty, let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else { return [:] }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for partition in partitions { rd_kafka_topic_partition_list_add(list, partition.topic, partition.partition) }
        _ = rd_kafka_position(client.pointer, list)
        var lags: [PartitionID: Int64] = [:]
        for element in elements(of: list) {
            let id = PartitionID(topic: String(cString: element.topic), partition: element.partition)
            var low: Int64 = -1
            var high: Int64 = -1
            let cached = rd_kafka_get_watermark_offsets(client.pointer, element.topic, element.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR
            high = max(cached ? high : -1, queried[id] ?? -1)
            guard high >= 0 else { continue }
            guard let from = committed[id] ?? (element.offset >= 0 ? element.offset : nil) else { continue }
            lags[id] = max(0, high - from)
        }
        return lags
    }

    /// The broker's high watermarks of `partitions`, one request each within `timeout`; stops at the
    /// first that fails (a broker that does not answer one will not answer the next).
    public func queryHighWatermarks(_ partitions: [PartitionID], timeout: Duration) -> [PartitionID: Int64] {
        var highs: [PartitionID: Int64] = [:]
        for partition in partitions {
            var low: Int64 = -1
            var high: Int64 = -1
            guard rd_kafka_query_watermark_offsets(client.pointer, partition.topic, partition.partition, &low, &high,
                                                   Int32(clamping: timeout.rdMilliseconds)) == RD_KAFKA_RESP_ERR_NO_ERROR else { break }
            highs[partition] = high
        }
        return highs
    }

    /// How many partitions this member holds now: 0 until the first group join completed
    /// (which takes seconds on a fresh group).
    public var assignedPartitionCount: Int {
        var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(client.pointer, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return 0 }
        defer { rd_kafka_topic_partition_list_destroy(assignment) }
        return Int(assignment.pointee.cnt)
    }

    /// The partitions this member holds now.
    public var assignment: Set<PartitionID> {
        var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(client.pointer, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return [] }
        defer { rd_kafka_topic_partition_list_destroy(assignment) }
        return Set(elements(of: assignment).map { PartitionID(topic: String(cString: $0.topic), partition: $0.partition) })
    }

    /// How many rebalance callbacks (assign or revoke) this member has served: a change means the
    /// partitions may have moved away and back, so work held for them is stale.
    public var rebalanceGeneration: Int { rebalances.count.load(ordering: .acquiring) }

    /// Stops fetching these partitions (already fetched records of them are discarded by
    /// librdkafka); `poll` keeps serving the group. Resuming fetches from the position after
    /// the last record `poll` returned.
    public func pause(_ partitions: [PartitionID]) throws(KafkaError) {
        try pauseOrResume(partitions, pause: true)
    }

    public func resume(_ partitions: [PartitionID]) throws(KafkaError) {
        try pauseOrResume(partitions, pause: false)
    }

    private func pauseOrResume(_ partitions: [PartitionID], pause: Bool) throws(KafkaError) {
        guard !partitions.isEmpty else { return }
        guard let list = rd_kafka_topic_partition_list_new(Int32(partitions.count)) else {
            throw KafkaError(.other, "pause: cannot allocate partition list")
        }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for id in partitions { rd_kafka_topic_partition_list_add(list, id.topic, id.partition) }
        let what = pause ? "pause" : "resume"
        let error = pause ? rd_kafka_pause_partitions(client.pointer, list) : rd_kafka_resume_partitions(client.pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "\(what) partitions of group \(groupId)") }
        if let failure = firstPartitionError(list, "\(what) partitions of group \(groupId)") { throw failure }
    }

    /// Rewinds every currently assigned partition to its earliest offset. Partitions assigned
    /// later start from the group's committed offsets as usual.
    public func seekToBeginning(timeout: Duration = .seconds(5)) throws(KafkaError) {
        var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        let error = rd_kafka_assignment(client.pointer, &assignment)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else {
            throw KafkaError(error, "read assignment of group \(groupId)")
        }
        defer { rd_kafka_topic_partition_list_destroy(assignment) }
        for index in 0..<Int(assignment.pointee.cnt) {
            assignment.pointee.elems[index].offset = Int64(RD_KAFKA_OFFSET_BEGINNING)
        }
        if let failure = rd_kafka_seek_partitions(client.pointer, assignment, timeout.rdMilliseconds) {
            throw KafkaError.consuming(failure, "seek to beginning")
        }
        if let failure = firstPartitionError(assignment, "seek to beginning") { throw failure }
    }

    /// Leaves the group (revoking partitions through the rebalance callback) and stops
    /// fetching. Idempotent; `deinit` calls it. The handle itself is freed in `deinit`.
    public func close() {
        let wasClosed = state.withLock { state in
            defer { state.closed = true }
            return state.closed
        }
        guard !wasClosed else { return }
        _ = rd_kafka_consumer_close(client.pointer)
    }

    private func describeSource(of message: UnsafePointer<rd_kafka_message_t>) -> String {
        message.pointee.rkt == nil ? "group \(groupId)"
            : "\(topicName(of: message))[\(message.pointee.partition)]"
    }
}

private func elements(of list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> UnsafeMutableBufferPointer<rd_kafka_topic_partition_t> {
    UnsafeMutableBufferPointer(start: list.pointee.elems, count: Int(list.pointee.cnt))
}

private func firstPartitionError(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, _ context: String) -> KafkaError? {
    for element in elements(of: list) where element.err != RD_KAFKA_RESP_ERR_NO_ERROR {
        return KafkaError(element.err, "\(context), \(String(cString: element.topic))[\(element.partition)]")
    }
    return nil
}

extension KafkaRecord {
    /// Copies a consumed message out of librdkafka's memory.
    init(_ message: UnsafeMutablePointer<rd_kafka_message_t>) {
        let raw = message.pointee
        var headers: [KafkaHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var index = 0
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(list, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(KafkaHeader(name: name.map { String(cString: $0) } ?? "",
                                           value: copyBytes(value, size)))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        self.init(topic: topicName(of: message), partition: raw.partition, offset: raw.offset,
                  key: raw.key.map { copyBytes($0, raw.key_len) }, value: copyBytes(raw.payload, raw.len),
                  headers: headers, timestamp: rd_kafka_message_timestamp(message, &timestampType))
    }
}

private func copyBytes(_ pointer: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
    guard let pointer, count > 0 else { return [] }
    return [UInt8](UnsafeRawBufferPointer(start: pointer, count: count))
}

private let rebalanceLogger = Logger(component: "kafka")

/// Counts rebalance callbacks; reached from the C callback through the handle's opaque pointer.
private final class RebalanceCounter: Sendable {
    let count = Atomic<Int>(0)
}

/// Failures of asynchronous commits, filled by `serveAsyncCommit` inside `poll` (or `close`).
private final class AsyncCommitResults: Sendable {
    let failures = Mutex<[KafkaError]>([])
}

/// The consumer queue reference. Safe to send: librdkafka's queues are thread-safe, and the
/// pointer is only passed to librdkafka and destroyed once, in the consumer's `deinit`.
private struct QueueHandle: @unchecked Sendable {
    let pointer: OpaquePointer?
}

/// The result of one `commitAsync`, served on the thread that polls the consumer. The results
/// object lives as long as the consumer, whose `close` serves the last of these callbacks.
private func serveAsyncCommit(_ client: OpaquePointer?, _ error: rd_kafka_resp_err_t,
                              _ offsets: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
                              _ opaque: UnsafeMutableRawPointer?) {
    guard let opaque else { return }
    let failure = error != RD_KAFKA_RESP_ERR_NO_ERROR ? KafkaError(error, "asynchronous commit")
        : offsets.flatMap { firstPartitionError($0, "asynchronous commit") }
    guard let failure else { return }
    Unmanaged<AsyncCommitResults>.fromOpaque(opaque).takeUnretainedValue().failures.withLock { $0.append(failure) }
}

/// Rebalance callback, run inside `rd_kafka_consumer_poll` (or `rd_kafka_consumer_close`) on
/// the worker's thread. Handles both protocols so an `extra` override of
/// `partition.assignment.strategy` keeps working. Nothing is committed on revoke: offsets only
/// move after durable effects, so a revoked partition's uncommitted records are redelivered.
private func serveRebalance(_ client: OpaquePointer?, _ event: rd_kafka_resp_err_t,
                            _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
                            _ opaque: UnsafeMutableRawPointer?) {
    guard let client else { return }
    if let opaque { Unmanaged<RebalanceCounter>.fromOpaque(opaque).takeUnretainedValue().count.add(1, ordering: .releasing) }
    let cooperative = rd_kafka_rebalance_protocol(client).map { String(cString: $0) } == "COOPERATIVE"
    let count = partitions.map { Int($0.pointee.cnt) } ?? 0
    var failure: KafkaError?
    switch event {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        if cooperative {
            if let error = rd_kafka_incremental_assign(client, partitions) {
                failure = KafkaError.consuming(error, "incremental assign")
            }
        } else {
            let error = rd_kafka_assign(client, partitions)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR { failure = KafkaError(error, "assign") }
        }
        // librdkafka keeps an application's pause across unassign and assign (librdkafka#1849): a
        // partition paused before a rebalance would come back paused while the loop, which starts
        // every new assignment unpaused, never resumes it, and it would never be read again. The loop
        // pauses again whatever an outage or retry still holds.
        if failure == nil, let partitions { _ = rd_kafka_resume_partitions(client, partitions) }
        rebalanceLogger.info("kafka_partitions_assigned", ["client": .string(String(cString: rd_kafka_name(client))),
                                                           "partitions": .of(count)])
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        if cooperative {
            if let error = rd_kafka_incremental_unassign(client, partitions) {
                failure = KafkaError.consuming(error, "incremental unassign")
            }
        } else {
            let error = rd_kafka_assign(client, nil)
            if error != RD_KAFKA_RESP_ERR_NO_ERROR { failure = KafkaError(error, "unassign") }
        }
        rebalanceLogger.info("kafka_partitions_revoked", ["client": .string(String(cString: rd_kafka_name(client))),
                                                          "partitions": .of(count)])
    default:
        // A rebalance error: drop the whole assignment; the group will reassign.
        failure = KafkaError(event, "rebalance")
        if cooperative {
            if let error = rd_kafka_incremental_unassign(client, partitions) { rd_kafka_error_destroy(error) }
        } else {
            _ = rd_kafka_assign(client, nil)
        }
    }
    if let failure { rebalanceLogger.error("kafka_rebalance_failed", ["error": .string(failure.description)]) }
}
