/// Connection and tuning settings shared by producers, consumers and the admin client.
///
/// Defaults suit a small deployment against real Kafka or the embedded broker. `extra` holds raw
/// librdkafka properties (see librdkafka's CONFIGURATION.md) and overrides everything this type
/// sets, so an operator can change any knob without a code change.
public struct KafkaConfig: Sendable {
    /// Comma-separated `host:port` list used only for the first connection; clients then follow
    /// the addresses the brokers advertise in metadata.
    public var bootstrapServers: String
    public var clientId: String

    /// Producer `linger.ms`: how long a message may wait to share a batch.
    public var linger: Duration
    /// Producer `message.timeout.ms`: the longest a write stays unconfirmed before its delivery
    /// report fails with `.timedOut`. It covers queueing, retries and the in-flight request
    /// (librdkafka sets each ProduceRequest's timeout from its first message's remaining time),
    /// so it bounds delivery even when the broker process is gone. librdkafka scans for expired
    /// messages once a second, so a report may arrive up to ~1 s after the bound.
    public var deliveryTimeout: Duration
    /// Consumer `session.timeout.ms`: a member silent this long is evicted; on the embedded
    /// broker each rebalance also waits about this long minus one second.
    public var sessionTimeout: Duration
    /// Consumer `heartbeat.interval.ms`.
    public var heartbeatInterval: Duration
    /// Consumer `fetch.wait.max.ms`. Real Kafka answers a fetch as soon as data arrives, so this
    /// only sets how often an idle consumer asks. The embedded broker answers an empty fetch
    /// only after this wait and does not wake for new data, so there it is the idle
    /// produce-to-consume latency (measured: 10 ms -> ~10 ms, 500 ms -> ~500 ms); use ~10 ms.
    public var fetchMaxWait: Duration
    /// Raw librdkafka properties applied last (they win over everything above).
    public var extra: [String: String]

    public init(
        bootstrapServers: String = "127.0.0.1:9092",
        clientId: String = "storeledger",
        linger: Duration = .milliseconds(5),
        deliveryTimeout: Duration = .seconds(5),
        sessionTimeout: Duration = .seconds(10),
        heartbeatInterval: Duration = .seconds(1),
        fetchMaxWait: Duration = .milliseconds(100),
        extra: [String: String] = [:]
    ) {
        self.bootstrapServers = bootstrapServers
        self.clientId = clientId
        self.linger = linger
        self.deliveryTimeout = deliveryTimeout
        self.sessionTimeout = sessionTimeout
        self.heartbeatInterval = heartbeatInterval
        self.fetchMaxWait = fetchMaxWait
        self.extra = extra
    }
}

/// Record size limits, consistent end to end (docs/configuration.md, "Record sizes"): ingest
/// accepts at most `maxValueBytes` of body, which leaves `headerAllowance` for the copied HTTP
/// headers and, in a dead letter, the provenance headers, under `messageMaxBytes`.
public enum KafkaLimits {
    /// `message.max.bytes` of every client (librdkafka checks key + value against it when
    /// producing); real Kafka's broker default (1,048,588 per batch) is above it.
    public static let messageMaxBytes = 1_000_000
    /// Room for headers: libmicrohttpd caps a request's header block (ingest copies it into the raw
    /// record) well under 32 KiB, and dead-letter provenance adds under 2 KiB.
    public static let headerAllowance = 64 * 1024
    /// The largest record value (and so the largest request body ingest accepts).
    public static let maxValueBytes = messageMaxBytes - headerAllowance
}

extension KafkaConfig {
    /// Settings every client gets.
    private var common: [String: String] {
        [
            "bootstrap.servers": bootstrapServers,
            "client.id": clientId,
            // After a broker restart reconnect within a second instead of backing off to 10 s.
            "reconnect.backoff.max.ms": "1000",
            // Bound a TCP connect to an unreachable host (default 30 s).
            "socket.connection.setup.timeout.ms": "5000",
            "message.max.bytes": String(KafkaLimits.messageMaxBytes),
        ]
    }

    func producerProperties() -> [String: String] {
        var properties = common
        properties.merge([
            // Exactly-once per partition on the wire; requires acks=all.
            "enable.idempotence": "true",
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": String(linger.rdMilliseconds),
            "message.timeout.ms": String(deliveryTimeout.rdMilliseconds),
            // Java's default partitioner: a key lands on the same partition whichever client
            // (librdkafka, kcat, JVM) writes it.
            "partitioner": "murmur2_random",
        ]) { _, new in new }
        return properties.merging(extra) { _, override in override }
    }

    func consumerProperties(groupId: String) -> [String: String] {
        var properties = common
        properties.merge([
            "group.id": groupId,
            // At-least-once: offsets move only through KafkaConsumer.commit, after the caller's
            // effects are durable.
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "earliest",
            // Eager `range` rather than `cooperative-sticky` (docs/configuration.md, "Partition
            // assignment", with the measurements on the embedded broker): the consumer loop drops
            // queued records on every rebalance, correct only when librdkafka restarts each
            // assigned partition from its commit (eager); and librdkafka 2.0.2's cooperative
            // assignor has known hangs (librdkafka#4312, fixed in 2.2; #4783, fixed in 2.6).
            // Eager rebalances redeliver in-flight work, which the idempotent stages absorb.
            // Every member must use the same one.
            "partition.assignment.strategy": "range",
            "session.timeout.ms": String(sessionTimeout.rdMilliseconds),
            "heartbeat.interval.ms": String(heartbeatInterval.rdMilliseconds),
            "fetch.wait.max.ms": String(fetchMaxWait.rdMilliseconds),
            "enable.partition.eof": "false",
            // The prefetch queue, 64 MiB by default: behind a backlog of V2 bodies (~14 kB each) decode's
            // RSS reached 145 MB in `bench e2e`. 16 MiB still holds more than two batches of the largest
            // records ahead of the loop.
            "queued.max.messages.kbytes": "16384",
        ]) { _, new in new }
        return properties.merging(extra) { _, override in override }
    }

    func adminProperties() -> [String: String] {
        common.merging(extra) { _, override in override }
    }
}

extension Duration {
    /// Whole milliseconds, clamped to librdkafka's `int` range (negative becomes 0).
    var rdMilliseconds: Int32 {
        let (seconds, attoseconds) = components
        let millis = seconds.multipliedReportingOverflow(by: 1000)
        guard !millis.overflow else { return seconds < 0 ? 0 : Int32.max }
        return Int32(clamping: max(0, millis.partialValue + attoseconds / 1_000_000_000_000_000))
    }
}
