import Foundation
import Synchronization

/// Measures ingest → ledger-entry-visible latency with probe purchases (a fresh subscription
/// each, so each one must travel every stage and write a ledger line), one at a time; pauses
/// the driver while the newest probe is older than `maxLag` (the pipeline is falling behind, and
/// the embedded broker drops what a lagging consumer has not read).
public final class LagProbe: Sendable {
    public struct Report: Sendable, CustomStringConvertible {
        public var samples: [Double]   // seconds
        public var timeouts: Int
        public var pausedSeconds: Double

        func percentile(_ p: Double) -> Double {
            guard !samples.isEmpty else { return .nan }
            let sorted = samples.sorted()
            return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
        }

        public var description: String {
            guard !samples.isEmpty else { return "no probe completed (\(timeouts) timed out)" }
            func ms(_ s: Double) -> String { String(Int((s * 1000).rounded())) + " ms" }
            return "\(samples.count) probes: p50 \(ms(percentile(0.5))), p90 \(ms(percentile(0.9))), p99 \(ms(percentile(0.99))), max \(ms(samples.max()!))"
                + (timeouts > 0 ? ", \(timeouts) timed out" : "") + (pausedSeconds > 0 ? "; sending paused \(String(format: "%.1f", pausedSeconds)) s for lag" : "")
        }
    }

    let ingestURL: String
    let emitter: WireEmitter
    let interval: TimeInterval
    let maxLag: TimeInterval
    let timeout: TimeInterval
    private let driver: Driver?
    private let running = Atomic<Bool>(false)
    private let done = Atomic<Bool>(false)
    private let report = Mutex(Report(samples: [], timeouts: 0, pausedSeconds: 0))
    private let counter = Atomic<Int>(0)

    public init(ingestURL: String, emitter: WireEmitter, driver: Driver?, interval: TimeInterval = 0.5,
                maxLag: TimeInterval = 8, timeout: TimeInterval = 120) {
        self.ingestURL = ingestURL
        self.emitter = emitter
        self.driver = driver
        self.interval = interval
        self.maxLag = maxLag
        self.timeout = timeout
    }

    public func start() {
        running.store(true, ordering: .releasing)
        Thread { [self] in
            defer { done.store(true, ordering: .releasing) }
            guard let connection = try? HTTPConnection(baseURL: ingestURL) else { return }
            while running.load(ordering: .acquiring) {
                _ = measureOne(connection)
                Thread.sleep(forTimeInterval: interval)
            }
        }.start()
    }

    public func stop() {
        running.store(false, ordering: .releasing)
        while !done.load(ordering: .acquiring) { usleep(10_000) }
        driver?.setPaused(false)
    }

    public var snapshot: Report { report.withLock { $0 } }

    /// Sends one probe and waits until its ledger line is visible; returns the latency in seconds.
    @discardableResult
    func measureOne(_ connection: HTTPConnection) -> Double? {
        let index = 9_000_000 + counter.add(1, ordering: .relaxed).newValue
        var state = StoreState(config: emitter.config, block: index)
        let user = StoreState.userUUID(seed: 0x9_0BE, index: index)
        state.addUser(user)
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        guard (try? state.addAppleID(user: user)) != nil,
              let t = try? state.purchase(user: user, appleId: 0, productId: "vip.a.1m", atMs: nowMs),
              let delivery = try? emitter.v1(state, otid: t.originalTransactionId, type: "INITIAL_BUY", atMs: nowMs) else { return nil }
        let started = Date()
        var pausedAt: Date?
        defer {
            if let pausedAt {
                driver?.setPaused(false)
                report.withLock { $0.pausedSeconds += Date().timeIntervalSince(pausedAt) }
            }
        }
        guard let posted = try? connection.post(delivery.path, body: delivery.body), (200...206).contains(posted.status) else { return nil }
        while Date().timeIntervalSince(started) < timeout {
            if let view = try? connection.get("/v1/subscriptions/\(t.originalTransactionId)"), view.status == 200,
               let ledger = view.json?["ledger"] as? [Any], !ledger.isEmpty {
                let latency = Date().timeIntervalSince(started)
                report.withLock { $0.samples.append(latency) }
                return latency
            }
            if pausedAt == nil, Date().timeIntervalSince(started) > maxLag, let driver {
                driver.setPaused(true)
                pausedAt = Date()
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        report.withLock { $0.timeouts += 1 }
        return nil
    }

    /// One probe right now, outside the periodic loop: after the last delivery, its arrival means
    /// the pipeline has (nearly) caught up.
    public func waitForCatchUp() -> Double? {
        guard let connection = try? HTTPConnection(baseURL: ingestURL) else { return nil }
        return measureOne(connection)
    }
}
