import Synchronization

/// Process-wide counters and gauges in Prometheus text format, named `storeledger_<what>_<unit>`
/// (Prometheus conventions); label values must never carry secrets or user input beyond ids.
public final class Metrics: Sendable {
    public static let shared = Metrics()

    private struct Key: Hashable, Comparable {
        let name: String
        let labels: [String]   // "k=v" sorted
        static func < (a: Key, b: Key) -> Bool { (a.name, a.labels.joined()) < (b.name, b.labels.joined()) }
    }
    private let counters = Mutex<[Key: Double]>([:])
    private let gauges = Mutex<[Key: Double]>([:])
    private let histograms = Mutex<[Key: Histogram]>([:])

    /// Default upper bounds (seconds) for latency histograms: 1 ms to 30 s.
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    public init() {}

    public func increment(_ name: String, _ labels: [String: String] = [:], by amount: Double = 1) {
        let key = Key(name: name, labels: Metrics.render(labels))
        counters.withLock { $0[key, default: 0] += amount }
    }

    public func set(_ name: String, _ labels: [String: String] = [:], to value: Double) {
        let key = Key(name: name, labels: Metrics.render(labels))
        gauges.withLock { $0[key] = value }
    }

    /// Records one observation in histogram `name` (`_bucket{le}`, `_sum`, `_count` in the exposition).
    /// The first observation of a series fixes its `buckets` (ascending upper bounds; +Inf is implied).
    public func observe(_ name: String, _ labels: [String: String] = [:], _ value: Double, buckets: [Double] = Metrics.latencyBuckets) {
        observe(name, labels, CollectionOfOne(value), buckets: buckets)
    }

    /// Several observations of one series under one lock (a batch's latencies).
    public func observe(_ name: String, _ labels: [String: String] = [:], _ values: some Sequence<Double>,
                        buckets: [Double] = Metrics.latencyBuckets) {
        let key = Key(name: name, labels: Metrics.render(labels))
        histograms.withLock { all in
            // In place: a copy taken out of the dictionary copied its counts on every observation.
            for value in values { all[key, default: Histogram(bounds: buckets)].observe(value) }
        }
    }

    /// Removes every gauge series of `name` (e.g. per-partition lag after a rebalance took partitions away).
    public func removeGauges(_ name: String) {
        gauges.withLock { all in all = all.filter { $0.key.name != name } }
    }

    public func gauge(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let key = Key(name: name, labels: Metrics.render(labels))
        return gauges.withLock { $0[key] }
    }

    public func counter(_ name: String, _ labels: [String: String] = [:]) -> Double {
        let key = Key(name: name, labels: Metrics.render(labels))
        return counters.withLock { $0[key] ?? 0 }
    }

    /// Prometheus exposition text.
    public func exposition() -> String {
        var out = ""
        func emit(_ entries: [Key: Double], type: String) {
            var typed = Set<String>()
            for key in entries.keys.sorted() {
                if typed.insert(key.name).inserted { out += "# TYPE \(key.name) \(type)\n" }
                let labels = key.labels.isEmpty ? "" : "{" + key.labels.joined(separator: ",") + "}"
                out += "\(key.name)\(labels) \(Metrics.format(entries[key]!))\n"
            }
        }
        emit(counters.withLock { $0 }, type: "counter")
        emit(gauges.withLock { $0 }, type: "gauge")
        var typed = Set<String>()
        for (key, histogram) in histograms.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            if typed.insert(key.name).inserted { out += "# TYPE \(key.name) histogram\n" }
            for (bound, count) in histogram.cumulative {
                let le = bound.isInfinite ? "+Inf" : Metrics.format(bound)
                out += "\(key.name)_bucket{" + (key.labels + ["le=\"\(le)\""]).joined(separator: ",") + "} \(count)\n"
            }
            let labels = key.labels.isEmpty ? "" : "{" + key.labels.joined(separator: ",") + "}"
            out += "\(key.name)_sum\(labels) \(Metrics.format(histogram.sum))\n"
            out += "\(key.name)_count\(labels) \(histogram.count)\n"
        }
        return out
    }

    private static func render(_ labels: [String: String]) -> [String] {
        labels.keys.sorted().map { key in "\(key)=\"\(escaped(labels[key]!))\"" }
    }

    /// Prometheus label-value escaping (backslash, quote, newline). Runs on every increment, so
    /// the common value with nothing to escape is returned as it is (Foundation's
    /// `replacingOccurrences` goes through NSString even when there is nothing to replace).
    static func escaped(_ value: String) -> String {
        guard value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") }) else {
            return value
        }
        var out = ""
        out.reserveCapacity(value.utf8.count + 8)
        for character in value.unicodeScalars {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// Prometheus histogram state: per-bucket counts (not cumulative until rendered), sum and count.
struct Histogram: Sendable, Equatable {
    let bounds: [Double]
    private(set) var counts: [Int]
    private(set) var sum = 0.0
    private(set) var count = 0

    init(bounds: [Double]) {
        self.bounds = bounds.sorted()
        counts = Array(repeating: 0, count: bounds.count + 1)
    }

    mutating func observe(_ value: Double) {
        let index = bounds.firstIndex { value <= $0 } ?? bounds.count
        counts[index] += 1
        sum += value
        count += 1
    }

    /// (upper bound, observations at or below it), ending with +Inf = count.
    var cumulative: [(Double, Int)] {
        var running = 0
        return zip(bounds + [.infinity], counts).map { bound, n in
            running += n
            return (bound, running)
        }
    }
}
