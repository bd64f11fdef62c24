/// How many consumer-group members each stage runs (`storeledger dev --workers decode=2,membership=3`).
/// Stages not named keep one member. Every member of a stage is one `storeledger worker <stage>`
/// process in that stage's consumer group; they share its partitions (docs/scaling.md).
public struct MemberCounts: Sendable, Equatable {
    /// More members than partitions would idle; 16 is far above what one machine runs usefully.
    public static let maximum = 16
    public private(set) var counts: [String: Int]

    public init(_ counts: [String: Int] = [:]) { self.counts = counts }

    /// Parses `stage=N[,stage=N...]`; every stage must be one of `stages`, N in 1...maximum, each stage once.
    public static func parse(_ text: String, stages: [String]) throws(UsageError) -> MemberCounts {
        var counts: [String: Int] = [:]
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let stage = parts.first.map { String($0).trimmed(" ") } ?? ""
            guard parts.count == 2, stages.contains(stage) else {
                throw UsageError("--workers takes stage=N pairs separated by commas, stage one of \(stages.joined(separator: ", ")); got \"\(String(item.prefix(40)))\"")
            }
            guard let count = Int(String(parts[1]).trimmed(" ")), (1...maximum).contains(count) else {
                throw UsageError("--workers: the member count of \(stage) must be an integer in 1...\(maximum)")
            }
            guard counts[stage] == nil else { throw UsageError("--workers names \(stage) twice") }
            counts[stage] = count
        }
        return MemberCounts(counts)
    }

    public func members(of stage: String) -> Int { counts[stage] ?? 1 }

    /// The supervisor role of member `index` (1-based): the first keeps the stage's own name
    /// (so `PID decode=` and `ADMIN decode=` stay what they were), the others are `decode-2`, ...
    public static func role(_ stage: String, member index: Int) -> String {
        index <= 1 ? stage : "\(stage)-\(index)"
    }
}

private extension String {
    func trimmed(_ set: Character) -> String {
        var view = Substring(self)
        while view.first == set { view.removeFirst() }
        while view.last == set { view.removeLast() }
        return String(view)
    }
}
