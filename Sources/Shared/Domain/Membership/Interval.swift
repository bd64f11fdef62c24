import CivilCalendar

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

    public func contains(_ ms: Int64) -> Bool { startMs <= ms && ms < endOrMax }

    public var description: String { "[\(TimeText.iso(startMs)), \(endMs.map(TimeText.iso) ?? "open-ended"))" }

    /// The union of intervals as a sorted list of disjoint, non-touching intervals. Merged in place in
    /// one copy of the input: every ledger entry takes two unions, and filtering, sorting and merging
    /// into new arrays was three allocations each.
    public static func union(_ intervals: [Interval]) -> [Interval] {
        var list = intervals
        list.removeAll { $0.isEmpty }
        guard list.count > 1 else { return list }
        list.sort { ($0.startMs, $0.endOrMax) < ($1.startMs, $1.endOrMax) }
        var last = 0
        for index in 1..<list.count {
            let next = list[index]
            if next.startMs <= list[last].endOrMax {
                if next.endOrMax > list[last].endOrMax { list[last].endMs = next.endMs }
            } else {
                last += 1
                list[last] = next
            }
        }
        list.removeLast(list.count - last - 1)
        return list
    }

    /// `intervals` minus `removed`, as a union.
    public static func subtract(_ removed: Interval, from intervals: [Interval]) -> [Interval] {
        var result: [Interval] = []
        for interval in union(intervals) {
            if removed.endOrMax <= interval.startMs || removed.startMs >= interval.endOrMax {
                result.append(interval)
                continue
            }
            if removed.startMs > interval.startMs {
                result.append(Interval(startMs: interval.startMs, endMs: removed.startMs))
            }
            if let removedEnd = removed.endMs, removedEnd < interval.endOrMax {
                result.append(Interval(startMs: removedEnd, endMs: interval.endMs))
            }
        }
        return union(result)
    }
}

/// The difference between what a purchase has been granted so far (the sum of its ledger entries)
/// and what it should be granted now. Replaying a command computes the same target, so an unchanged
/// replay writes nothing and a fixed replay writes only the correction.
public enum GrantDelta: Equatable, Sendable {
    case add(Interval)
    case remove(Interval)

    public static func between(granted: Interval?, target: Interval?) -> [GrantDelta] {
        switch (granted, target) {
        case (nil, nil): return []
        case (nil, let t?): return [.add(t)]
        case (let g?, nil): return [.remove(g)]
        case (let g?, let t?):
            if g == t { return [] }
            guard g.startMs == t.startMs else { return [.remove(g), .add(t)] }
            if t.endOrMax < g.endOrMax { return [.remove(Interval(startMs: t.endOrMax, endMs: g.endMs))] }
            return [.add(Interval(startMs: g.endOrMax, endMs: t.endMs))]
        }
    }
}

/// Civil UTC time text for reasons people read (R4); pure arithmetic, no locale.
public enum TimeText {
    public static func iso(_ ms: Int64) -> String {
        // Floor division and modulo: defined for every Int64, dates before 1970 included.
        let seconds = ms.floorDivided(by: 1000)
        let millis = ms.floorModulo(1000)
        let days = seconds.floorDivided(by: 86_400)
        let secondOfDay = seconds.floorModulo(86_400)
        let (year, month, day) = CivilDate.date(days: days)
        // Written as bytes: classify dates several reasons per event, and each piece as a String of its
        // own was most of the time.
        var text: [UInt8] = []
        text.reserveCapacity(32)
        if (1_000...9_999).contains(year) { digits(year, 4, into: &text) } else { text += String(year).utf8 }
        text.append(UInt8(ascii: "-"))
        digits(month, 2, into: &text)
        text.append(UInt8(ascii: "-"))
        digits(day, 2, into: &text)
        text.append(UInt8(ascii: "T"))
        digits(secondOfDay / 3600, 2, into: &text)
        text.append(UInt8(ascii: ":"))
        digits(secondOfDay % 3600 / 60, 2, into: &text)
        text.append(UInt8(ascii: ":"))
        digits(secondOfDay % 60, 2, into: &text)
        if millis != 0 {
            text.append(UInt8(ascii: "."))
            digits(millis, 3, into: &text)
        }
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    /// `value` (0 ≤ value < 10^width) in exactly `width` decimal digits.
    private static func digits(_ value: Int64, _ width: Int, into text: inout [UInt8]) {
        var divisor: Int64 = 1
        for _ in 1..<width { divisor *= 10 }
        while divisor > 0 {
            text.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }
}
