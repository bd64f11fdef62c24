import Foundation
import Synchronization

/// How the simulated App Store and apps deliver to StoreLedger's ingest.
public struct DriverConfig: Sendable {
    public var ingestURL: String
    /// Concurrent keep-alive connections (each its own thread).
    public var connections = 8
    /// Requests per second across all connections; nil = as fast as ingest answers.
    public var ratePerSecond: Double?
    /// Apple's retry schedule (hours) compressed: real milliseconds per simulated hour.
    public var msPerSimHour: Double = 2
    /// A 2xx whose answer Apple "did not get" (timeout on its side): Apple retries, StoreLedger sees a duplicate.
    public var lostAckShare = 0.01
    /// Delivered twice outright.
    public var duplicateShare = 0.02
    /// Held back for up to `reorderMaxSimHours`, so it arrives after later facts (S15).
    public var reorderShare = 0.05
    public var reorderMaxSimHours = 72.0
    public var seed: UInt64 = 1
    /// Deliveries waiting before `submit` blocks (bounds memory for big populations).
    public var maxQueued = 20_000
    /// Keep a per-user log of what was sent (printed with mismatches); off for huge runs.
    public var recordPerUser = true
    /// Share of V2 notifications Apple never gets through to ingest: every attempt fails (the
    /// notification is not posted at all), so only Get Notification History still has it.
    public var lossShare = 0.0
    /// Apple's notification history (the simulated Server API's state): each V2 notification's
    /// final outcome, delivered or lost with its send attempts, is recorded there. nil: not kept.
    public var history: ServerAPIState?

    public init(ingestURL: String) { self.ingestURL = ingestURL }
}

/// Counters of one run, by channel.
public struct DriverStats: Sendable, CustomStringConvertible {
    public var submitted = 0
    public var attempts = 0
    public var accepted = 0
    public var expectedRejections = 0
    public var unexpectedStatus: [Int: Int] = [:]
    public var transportErrors = 0
    public var retries = 0
    public var duplicatesInjected = 0
    public var lostAcks = 0
    public var reordered = 0
    /// Apple gave up after its last retry (or the sandbox's single try failed).
    public var undelivered = 0
    /// V2 notifications dropped for good by `lossShare` (never posted).
    public var lost = 0
    public var byChannel: [String: Int] = [:]

    public var description: String {
        var parts = ["submitted \(submitted)", "posts \(attempts)", "accepted \(accepted)", "expected 400 \(expectedRejections)",
                     "retries \(retries)", "duplicates \(duplicatesInjected)", "lost acks \(lostAcks)", "reordered \(reordered)",
                     "undelivered \(undelivered)", "lost \(lost)", "transport errors \(transportErrors)"]
        if !unexpectedStatus.isEmpty {
            parts.append("unexpected statuses \(unexpectedStatus.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: ", "))")
        }
        parts.append("by channel \(byChannel.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        return parts.joined(separator: "; ")
    }
}

/// Posts deliveries to ingest from `connections` threads: in submission order, at the target
/// rate, with Apple's retry schedule (compressed) on anything but 2xx, injected duplicates,
/// lost acknowledgements and reordering. `pause` holds sending (backpressure when the pipeline lags).
public final class Driver: Sendable {
    public let config: DriverConfig
    private let state: Mutex<QueueState>
    private let condition = NSCondition()
    private let stats = Mutex(DriverStats())
    private let log = Mutex<[String: [String]]>([:])
    private let running = Atomic<Bool>(false)
    private let paused = Atomic<Bool>(false)
    private let finished = Atomic<Int>(0)

    struct Item {
        var delivery: Delivery
        var attempt: Int
        var dueNs: UInt64
        var sequence: Int
        var isInjectedCopy = false
    }

    struct QueueState {
        var heap = Heap()
        var sequence = 0
        var inFlight = 0
        var rng: SimRandom
        var nextSendNs: UInt64 = 0
    }

    public init(config: DriverConfig) {
        self.config = config
        self.state = Mutex(QueueState(rng: SimRandom(seed: config.seed ^ 0xD417E5)))
    }

    public func start() throws {
        // Fail fast when ingest is not there.
        _ = try HTTPConnection(baseURL: config.ingestURL).get("/healthz")
        running.store(true, ordering: .releasing)
        for index in 0..<max(1, config.connections) {
            let thread = Thread { [self] in self.work(index) }
            thread.name = "sim-driver-\(index)"
            thread.start()
        }
    }

    /// Stops the workers after their current request (pending deliveries are dropped).
    public func stop() {
        running.store(false, ordering: .releasing)
        condition.broadcast()
        let deadline = Date().addingTimeInterval(30)
        while finished.load(ordering: .acquiring) < max(1, config.connections), Date() < deadline { usleep(10_000) }
    }

    public func setPaused(_ value: Bool) {
        paused.store(value, ordering: .releasing)
        if !value { condition.broadcast() }
    }

    public var snapshot: DriverStats { stats.withLock { $0 } }
    public func sent(to userId: String) -> [String] { log.withLock { $0[userId] ?? [] } }

    /// Queues deliveries in order; blocks while more than `maxQueued` wait.
    public func submit(_ deliveries: [Delivery]) {
        for delivery in deliveries {
            if isLostForGood(delivery) { continue }
            while state.withLock({ $0.heap.count }) >= config.maxQueued, running.load(ordering: .acquiring) { usleep(2000) }
            let now = Self.nowNs()
            state.withLock { s in
                var due = now
                if !delivery.keepsOrder, s.rng.chance(config.reorderShare) {
                    due += UInt64(Double.random(in: 0...config.reorderMaxSimHours, using: &s.rng) * config.msPerSimHour * 1e6)
                    stats.withLock { $0.reordered += 1 }
                }
                s.sequence += 1
                s.heap.push(Item(delivery: delivery, attempt: 0, dueNs: due, sequence: s.sequence))
                if !delivery.keepsOrder, s.rng.chance(config.duplicateShare) {
                    s.sequence += 1
                    var copy = Item(delivery: delivery, attempt: 0, dueNs: due + UInt64(Double.random(in: 0...2, using: &s.rng) * 1e6), sequence: s.sequence)
                    copy.isInjectedCopy = true
                    s.heap.push(copy)
                    stats.withLock { $0.duplicatesInjected += 1 }
                }
            }
            stats.withLock {
                $0.submitted += 1
                $0.byChannel[delivery.channel.rawValue, default: 0] += 1
            }
            condition.broadcast()
        }
    }

    /// Draws (only when `lossShare` > 0, so other runs keep their random sequence) whether Apple
    /// never gets `delivery` through; a lost one goes into the history with its failed attempts.
    private func isLostForGood(_ delivery: Delivery) -> Bool {
        guard config.lossShare > 0, delivery.channel == .notificationV2, !delivery.expectsRejection,
              state.withLock({ $0.rng.chance(config.lossShare) }) else { return false }
        config.history?.record(delivery, delivered: false)
        stats.withLock {
            $0.submitted += 1
            $0.lost += 1
            $0.byChannel[delivery.channel.rawValue, default: 0] += 1
        }
        if config.recordPerUser {
            log.withLock { $0[delivery.userId, default: []].append("\(AppleDates.readable(delivery.simMs))  \(delivery.label) -> lost for good") }
        }
        return true
    }

    /// Waits until every delivery (and every retry) has been attempted to completion.
    @discardableResult
    public func drain(timeout: TimeInterval = 600) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if state.withLock({ $0.heap.count == 0 && $0.inFlight == 0 }) { return true }
            usleep(5000)
        }
        return false
    }

    public var pending: Int { state.withLock { $0.heap.count + $0.inFlight } }

    // MARK: workers

    private func work(_ index: Int) {
        defer { _ = finished.add(1, ordering: .acquiringAndReleasing) }
        var connection = try? HTTPConnection(baseURL: config.ingestURL)
        while running.load(ordering: .acquiring) {
            guard let item = nextItem() else { continue }
            if connection == nil { connection = try? HTTPConnection(baseURL: config.ingestURL) }
            var status: Int?
            do {
                status = try connection?.post(item.delivery.path, body: item.delivery.body).status
            } catch {
                connection?.disconnect()
                stats.withLock { $0.transportErrors += 1 }
            }
            complete(item, status: status)
        }
    }

    /// The next due item, respecting pause and rate; nil after a short wait if none is due.
    private func nextItem() -> Item? {
        condition.lock()
        defer { condition.unlock() }
        if paused.load(ordering: .acquiring) {
            _ = condition.wait(until: Date().addingTimeInterval(0.05))
            return nil
        }
        let now = Self.nowNs()
        let picked: (Item?, UInt64?) = state.withLock { s in
            guard let top = s.heap.peek else { return (nil, nil) }
            guard top.dueNs <= now else { return (nil, top.dueNs) }
            if let rate = config.ratePerSecond, rate > 0 {
                guard s.nextSendNs <= now else { return (nil, s.nextSendNs) }
                s.nextSendNs = max(s.nextSendNs, now - 50_000_000) + UInt64(1e9 / rate)
            }
            s.inFlight += 1
            return (s.heap.pop(), nil)
        }
        if let item = picked.0 { return item }
        let waitNs = picked.1.map { min($0 - min($0, now), 50_000_000) } ?? 50_000_000
        _ = condition.wait(until: Date().addingTimeInterval(Double(max(waitNs, 100_000)) / 1e9))
        return nil
    }

    private func complete(_ item: Item, status: Int?) {
        let delivery = item.delivery
        let ok = status.map { (200...206).contains($0) } ?? false
        var retry = false
        var note = status.map(String.init) ?? "no answer"
        stats.withLock { s in
            s.attempts += 1
            if item.attempt > 0 { s.retries += 1 }
            if delivery.expectsRejection {
                if status == 400 { s.expectedRejections += 1 } else { s.unexpectedStatus[status ?? 0, default: 0] += 1 }
                return
            }
            if ok { s.accepted += 1 } else if let status { s.unexpectedStatus[status, default: 0] += 1 }
        }
        if !delivery.expectsRejection {
            let lostAck = ok && !delivery.keepsOrder && state.withLock { $0.rng.chance(config.lostAckShare) }
            if lostAck {
                stats.withLock { $0.lostAcks += 1 }
                note += " (ack lost)"
            }
            retry = !ok || lostAck
        }
        let delays = delivery.retryDelaysHours
        let requeued: Bool = state.withLock { s in
            s.inFlight -= 1
            guard retry, item.attempt < delays.count else { return false }
            s.sequence += 1
            var next = item
            next.attempt += 1
            next.dueNs = Self.nowNs() + UInt64(delays[item.attempt] * config.msPerSimHour * 1e6)
            next.sequence = s.sequence
            s.heap.push(next)
            return true
        }
        if retry, !requeued, !ok { stats.withLock { $0.undelivered += 1 } }
        // Apple's history keeps one entry per notification with its final outcome (an injected copy is not Apple's).
        if !requeued, !item.isInjectedCopy { config.history?.record(delivery, delivered: ok && !retry) }
        if config.recordPerUser {
            let text = "\(AppleDates.readable(delivery.simMs))  \(delivery.label)\(item.isInjectedCopy ? " [duplicate]" : "")\(item.attempt > 0 ? " [retry \(item.attempt)]" : "") -> \(note)"
            log.withLock { $0[delivery.userId, default: []].append(text) }
        }
        condition.broadcast()
    }

    static func nowNs() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// A binary min-heap on (due time, sequence): FIFO among due items.
    struct Heap {
        private var items: [Item] = []
        var count: Int { items.count }
        var peek: Item? { items.first }

        private static func less(_ a: Item, _ b: Item) -> Bool { (a.dueNs, a.sequence) < (b.dueNs, b.sequence) }

        mutating func push(_ item: Item) {
            items.append(item)
            var i = items.count - 1
            while i > 0 {
                let parent = (i - 1) / 2
                guard Self.less(items[i], items[parent]) else { break }
                items.swapAt(i, parent)
                i = parent
            }
        }

        mutating func pop() -> Item? {
            guard !items.isEmpty else { return nil }
            items.swapAt(0, items.count - 1)
            let top = items.removeLast()
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count, Self.less(items[l], items[m]) { m = l }
                if r < items.count, Self.less(items[r], items[m]) { m = r }
                guard m != i else { break }
                items.swapAt(i, m)
                i = m
            }
            return top
        }
    }
}
