import Foundation
import Synchronization

/// A load client for `storeledger bench e2e`: posts requests built beforehand (so signing is
/// outside the measured window) from `connections` keep-alive connections, each its own thread,
/// either flat out or paced to a fixed rate, and records when each request was written and how
/// it was answered. Unlike `Driver` it injects nothing (no duplicates, retries or reordering):
/// every request is one measured event.
public enum LoadClient {
    public struct Request: Sendable {
        public var path: String
        public var body: [UInt8]
        public init(path: String, body: [UInt8]) {
            self.path = path
            self.body = body
        }
    }

    public struct Result: Sendable {
        /// Wall-clock time (ms since 1970) each request was written; NaN if it was never sent.
        public var sentAtMs: [Double]
        /// Each request's HTTP status; 0 for a transport error or a request never sent.
        public var status: [Int]
        public var startedAtMs: Double
        public var finishedAtMs: Double
        public var accepted: Int { status.reduce(0) { $0 + ((200...206).contains($1) ? 1 : 0) } }
        public var seconds: Double { max(0.001, (finishedAtMs - startedAtMs) / 1000) }
    }

    /// Posts every request once, in order of index across the connections; with `ratePerSecond`,
    /// request i is not written before start + i / rate (an open-loop schedule: a slow answer does
    /// not delay the requests after it as long as a connection is free).
    public static func post(_ requests: [Request], to baseURL: String, connections: Int, ratePerSecond: Double?) throws -> Result {
        let count = requests.count
        let next = Atomic<Int>(0)
        let results = Mutex((sent: [Double](repeating: .nan, count: count), status: [Int](repeating: 0, count: count)))
        let threads = max(1, connections)
        // Connect everything before the clock starts.
        let opened = try (0..<threads).map { _ in ConnectionBox(connection: try HTTPConnection(baseURL: baseURL)) }
        for box in opened { _ = try box.connection.get("/healthz") }
        let startNs = DispatchTime.now().uptimeNanoseconds
        let startMs = Date().timeIntervalSince1970 * 1000
        let group = DispatchGroup()
        for box in opened {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index < count else { return }
                    if let rate = ratePerSecond {
                        let due = startNs + UInt64(Double(index) / rate * 1e9)
                        let now = DispatchTime.now().uptimeNanoseconds
                        if due > now { usleep(UInt32((due - now) / 1000)) }
                    }
                    let sent = Date().timeIntervalSince1970 * 1000
                    let status = (try? box.connection.post(requests[index].path, body: requests[index].body).status) ?? 0
                    results.withLock {
                        $0.sent[index] = sent
                        $0.status[index] = status
                    }
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        let finished = Date().timeIntervalSince1970 * 1000
        return results.withLock { Result(sentAtMs: $0.sent, status: $0.status, startedAtMs: startMs, finishedAtMs: finished) }
    }

    /// Posts `requests` round and round flat out for `seconds` (the same mix of bodies as a phase
    /// of `post`); returns the requests answered 2xx and the time taken.
    public static func repeatPost(_ requests: [Request], to baseURL: String, connections: Int, seconds: Double) throws -> (accepted: Int, seconds: Double) {
        precondition(!requests.isEmpty, "repeatPost needs at least one request")
        let accepted = Atomic<Int>(0)
        let next = Atomic<Int>(0)
        let threads = max(1, connections)
        let opened = try (0..<threads).map { _ in ConnectionBox(connection: try HTTPConnection(baseURL: baseURL)) }
        for box in opened { _ = try box.connection.get("/healthz") }
        let started = DispatchTime.now().uptimeNanoseconds
        let end = started + UInt64(seconds * 1e9)
        let group = DispatchGroup()
        for box in opened {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                while DispatchTime.now().uptimeNanoseconds < end {
                    let request = requests[next.add(1, ordering: .relaxed).oldValue % requests.count]
                    if let status = try? box.connection.post(request.path, body: request.body).status, (200...206).contains(status) {
                        accepted.add(1, ordering: .relaxed)
                    }
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        return (accepted.load(ordering: .relaxed), Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
    }
}

/// Safe: each box is created on the calling thread and then used by exactly one load thread.
private final class ConnectionBox: @unchecked Sendable {
    let connection: HTTPConnection
    init(connection: HTTPConnection) { self.connection = connection }
}

/// Traffic for `storeledger bench e2e`: each request a first purchase of a fresh subscription by a
/// fresh user (so each one must travel every stage and leave its own ledger entry), rotating
/// V1 notification (INITIAL_BUY), V2 notification (SUBSCRIBED, three ES256 JWS) and receipt upload
/// (PKCS#7) as `channels` lists them.
public enum BenchTraffic {
    public struct Event: Sendable {
        public var request: LoadClient.Request
        public var channel: Delivery.Channel
        /// The ledger's `subscription_key` of the entry this request must cause.
        public var subscriptionKey: String
    }

    /// `count` signed requests; `block` numbers this batch's id range (distinct per call in one store).
    public static func make(emitter: WireEmitter, count: Int, block: Int,
                            channels: [Delivery.Channel] = [.notificationV1, .notificationV2, .receiptUpload]) throws -> [Event] {
        var events: [Event] = []
        events.reserveCapacity(count)
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        for offset in 0..<count {
            let index = block + offset
            var state = StoreState(config: emitter.config, block: index)
            let user = StoreState.userUUID(seed: 0xE2E, index: index)
            state.addUser(user)
            try state.addAppleID(user: user)
            let atMs = nowMs - 60_000
            let t = try state.purchase(user: user, appleId: 0, productId: "vip.a.1m", atMs: atMs)
            let channel = channels[offset % channels.count]
            let delivery: Delivery
            switch channel {
            case .notificationV1: delivery = try emitter.v1(state, otid: t.originalTransactionId, type: "INITIAL_BUY", atMs: atMs)
            case .notificationV2:
                delivery = try emitter.v2(state, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: atMs)
            case .receiptUpload: delivery = try emitter.receiptUpload(state, user: user, appleId: 0, atMs: atMs, focus: t)
            }
            events.append(Event(request: LoadClient.Request(path: delivery.path, body: delivery.body), channel: channel,
                                subscriptionKey: t.originalTransactionId))
        }
        return events
    }
}
