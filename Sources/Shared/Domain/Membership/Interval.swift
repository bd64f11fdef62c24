/// A half-open time interval `[start, end)` in ms; `end == nil` is open-ended (lifetime purchase).
public struct Interval: Codable, Sendable, Hashable, CustomStringConvertible {
    public var startMs: Int64
    public var endMs: Int64?

    public init(startMs: Int64, endMs: Int64?) {
        self.startMs = startMs
        self.endMs = endMs
    }

    public var isEmpty: Bool { endMs.map { $0 <= startMs } ?? false }
    var endOrMax: Int64 { endMs ?? Int64.max }

    public var description: String { "[\(startMs), \(endMs.map(String.init) ?? "∞"))" }

    /// The union of intervals as a sorted list of disjoint, non-touching intervals.
    public static func union(_ intervals: [Interval]) -> [Interval] {
        let sorted = intervals.filter { !$0.isEmpty }.sorted { ($0.startMs, $0.endOrMax) < ($1.startMs, $1.endOrMax) }
        var merged: [Interval] = []
        for next in sorted {
            if var last = merged.last, next.startMs <= last.endOrMax {
                if next.endOrMax > last.endOrMax { last.endMs = next.endMs }
                merged[merged.count - 1] = last
            } else {
                merged.append(next)
            }
        }
        return merged
    }
}

/// What one purchase *should* grant given Apple's current facts: `[start, end)` cut at the
/// cancellation time; nothing when the cut is at or before the start (full refund). A cut after
/// the end deducts nothing (R11).
public func entitledInterval(of grant: PurchaseGrant) -> Interval? {
    guard grant.productKind != .consumable else { return nil }
    var end = grant.endMs
    if let cut = grant.cut {
        end = min(end ?? Int64.max, cut.atMs)
    }
    let interval = Interval(startMs: grant.startMs, endMs: end)
    return interval.isEmpty ? nil : interval
}
