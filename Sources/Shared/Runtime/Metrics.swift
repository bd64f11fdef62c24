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

    public init() {}

    public func increment(_ name: String, _ labels: [String: String] = [:], by amount: Double = 1) {
        let key = Key(name: name, labels: Metrics.render(labels))
        counters.withLock { $0[key, default: 0] += amount }
    }

    public func set(_ name: String, _ labels: [String: String] = [:], to value: Double) {
        let key = Key(name: name, labels: Metrics.render(labels))
        gauges.withLock { $0[key] = value }
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
        return out
    }

    private static func render(_ labels: [String: String]) -> [String] {
        labels.keys.sorted().map { key in
            let value = labels[key]!.replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
            return "\(key)=\"\(value)\""
        }
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
