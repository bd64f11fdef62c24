import CivilCalendar

/// Replay (issue 13), the pure part: which stage, which range, and what a replay must write.
///
/// A replay recomputes, from one stage's input topic to the ledger, what the subscriptions whose
/// input lies in the range *should* hold with the code running now (`fresh`), compares it with what
/// PostgreSQL holds (`stored`) and writes the difference as compensating commands through the
/// membership stage's own writer. History stays append-only: a wrong entry stays, its correction is a
/// new entry whose reason names the replay, the stage and the code version (R4).
public enum ReplayStage: String, CaseIterable, Sendable, Codable {
    case decode, dedupe, classify, membership

    /// The topics the stage consumes.
    public var inputTopics: [String] {
        switch self {
        case .decode: return [Topic.notificationsRaw, Topic.receiptsRaw]
        case .dedupe: return [Topic.decoded]
        case .classify: return [Topic.unique]
        case .membership: return [Topic.commands]
        }
    }

    /// The stage's consumer group (`storeledger worker <stage>` without `--group`).
    public var groupId: String { "storeledger-\(rawValue)" }

    /// This stage and every later one: the replay recomputes through all of them, so their groups
    /// must be stopped (and caught up) while it runs.
    public var recomputedStages: [ReplayStage] {
        let all = ReplayStage.allCases
        return Array(all[all.firstIndex(of: self)!...])
    }
}

public struct ReplayUsageError: Error, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// One end of a replay range, as an operator writes it.
public enum ReplayBound: Equatable, Sendable {
    /// The first record each partition still holds.
    case earliest
    /// The same offset in every partition.
    case offset(Int64)
    /// Offsets per partition: `0:120,1:98`.
    case offsets([Int32: Int64])
    /// The first record at or after this instant (ms since the epoch), per partition.
    case time(Int64)

    /// `earliest`, an offset (`1200`), offsets per partition (`0:120,1:98`), or a UTC time
    /// (`2026-12-01T10:00:00Z`, `2026-12-01T10:00:00.250Z`, `2026-12-01`), or `@<ms since the epoch>`.
    public static func parse(_ text: String) throws(ReplayUsageError) -> ReplayBound {
        let text = text.trimmingSpaces
        guard !text.isEmpty, text.utf8.count <= 200 else { throw ReplayUsageError("empty or overlong bound") }
        if text == "earliest" { return .earliest }
        if text.hasPrefix("@") {
            guard let ms = Int64(text.dropFirst()), ms >= 0 else { throw ReplayUsageError("\(text): @ needs milliseconds since the epoch") }
            return .time(ms)
        }
        if text.allSatisfy(\.isASCIIDigit) {
            guard let offset = Int64(text) else { throw ReplayUsageError("\(text): offset out of range") }
            return .offset(offset)
        }
        if text.contains(":") && !text.contains("T") {
            var offsets: [Int32: Int64] = [:]
            for part in text.split(separator: ",") {
                let pair = part.split(separator: ":")
                guard pair.count == 2, let partition = Int32(pair[0]), partition >= 0, let offset = Int64(pair[1]), offset >= 0 else {
                    throw ReplayUsageError("\(text): offsets per partition are written 0:120,1:98")
                }
                guard offsets.updateValue(offset, forKey: partition) == nil else { throw ReplayUsageError("\(text): partition \(partition) named twice") }
            }
            return .offsets(offsets)
        }
        guard let ms = parseUTC(text) else {
            throw ReplayUsageError("\(text): not an offset, partition:offset list, @ms or UTC time like 2026-12-01T10:00:00Z")
        }
        return .time(ms)
    }

    /// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM:SS[.fff]Z`, UTC only (a replay range in local time is a trap).
    static func parseUTC(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int64? {
            guard range.upperBound <= bytes.count else { return nil }
            var value: Int64 = 0
            for index in range {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard bytes.count >= 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        let days = CivilDate.days(year: year, month: month, day: day)
        guard CivilDate.date(days: days) == (year, month, day) else { return nil }
        var ms = days * 86_400_000
        if bytes.count == 10 { return ms }
        guard bytes.count >= 20, bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              bytes.last == UInt8(ascii: "Z"), let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              hour < 24, minute < 60, second < 60 else { return nil }
        ms += ((hour * 60 + minute) * 60 + second) * 1000
        if bytes.count == 20 { return ms }
        guard bytes[19] == UInt8(ascii: "."), bytes.count <= 30, let fraction = number(20..<(bytes.count - 1)) else { return nil }
        let digits = bytes.count - 21
        var millis = fraction
        if digits < 3 { for _ in digits..<3 { millis *= 10 } } else { for _ in 3..<digits { millis /= 10 } }
        return ms + millis
    }
}

/// The offsets one partition is replayed over: `[start, end)` of the records whose effects are
/// recomputed. `low`/`high` are what the partition holds now; `horizon` is where the stopped
/// group had committed (everything before it is reflected in PostgreSQL).
public struct ReplayPartitionRange: Equatable, Sendable {
    public var topic: String
    public var partition: Int32
    public var low: Int64
    public var horizon: Int64
    public var start: Int64
    public var end: Int64

    public init(topic: String, partition: Int32, low: Int64, horizon: Int64, start: Int64, end: Int64) {
        self.topic = topic
        self.partition = partition
        self.low = low
        self.horizon = horizon
        self.start = start
        self.end = end
    }
}

public enum ReplayRange {
    /// Resolves the operator's bounds for one partition. `timeOffset` answers a `.time` bound (the
    /// first offset at or after the instant, nil when no record is that late). Refuses (retention,
    /// issue 13 point 5) when the partition no longer holds its first record: a replay recomputes each
    /// subscription from its first input, so a topic cut by retention cannot be replayed.
    public static func resolve(topic: String, partition: Int32, low: Int64, high: Int64, horizon: Int64,
                               from: ReplayBound, to: ReplayBound?, timeOffset: (Int64) throws -> Int64?) throws -> ReplayPartitionRange {
        if low > 0 {
            throw ReplayUsageError("""
                \(topic)[\(partition)] no longer holds its first records (it starts at offset \(low)): a replay recomputes every \
                subscription from its first input, and those records were removed by the topic's retention. Keep the pipeline's \
                topics forever (docs/operations.md, "Retention") or rebuild from the raw topics
                """)
        }
        let horizon = min(max(horizon, low), high)
        func offset(_ bound: ReplayBound, isEnd: Bool) throws -> Int64 {
            switch bound {
            case .earliest: return low
            case .offset(let value): return value
            case .offsets(let values): return values[partition] ?? (isEnd ? horizon : horizon)
            case .time(let ms): return try timeOffset(ms) ?? horizon
            }
        }
        let start = try offset(from, isEnd: false)
        if start < low {
            throw ReplayUsageError("\(topic)[\(partition)] no longer holds offset \(start) (it starts at \(low)): refused")
        }
        let end = try to.map { try offset($0, isEnd: true) } ?? horizon
        return ReplayPartitionRange(topic: topic, partition: partition, low: low, horizon: horizon,
                                    start: min(start, horizon), end: min(max(end, start), horizon))
    }
}

/// What a replay writes: compensating membership commands, planned from the stored and the freshly
/// recomputed state of each subscription.
public enum ReplayCompensation {
    /// The reason every compensating entry carries (R4): that it came from a replay after a fix,
    /// of which stage, with which code.
    public static func reason(stage: ReplayStage, codeVersion: String, original: String) -> String {
        "replay of \(stage.rawValue) after a fix (code \(codeVersion)): \(original)"
    }

    /// Whether `command` is a replay's compensation (its id says so).
    public static func isCompensation(_ command: MembershipCommand) -> Bool { command.commandId.hasPrefix("replay|") }

    /// Every entry a compensation causes says it came from the replay, also those membership words
    /// itself (a purchase superseded by the corrected one names only the switch).
    public static func labelled(_ entry: LedgerEntry, by command: MembershipCommand) -> LedgerEntry {
        guard isCompensation(command), !entry.reason.hasPrefix("replay of "), let end = command.reason.range(of: "): ") else { return entry }
        var labelled = entry
        labelled.reason = String(command.reason[..<end.upperBound]) + entry.reason
        return labelled
    }

    public static func labelled(_ entries: [DescribedEntry], by command: MembershipCommand) -> [DescribedEntry] {
        guard isCompensation(command) else { return entries }
        return entries.map { item in
            var copy = item
            copy.entry = labelled(item.entry, by: command)
            return copy
        }
    }

    /// Whether a stored grant differs from the fresh one in more than the transaction id it shows: a
    /// purchase restored under a new transaction id shows the id of the copy seen first, and a replay
    /// may read the copies in another order (decode's replay reads raw inputs by arrival, the live
    /// stage read them as its partitions came). Which alias shows is no correction.
    static func differs(_ stored: PurchaseGrant?, _ fresh: PurchaseGrant) -> Bool {
        guard var stored else { return true }
        stored.transactionId = fresh.transactionId
        return stored != fresh
    }

    /// Commands that bring `stored` to what `fresh` grants, for one subscription: every purchase
    /// whose facts, granted interval or credit differ is re-stated with the fresh facts (membership
    /// reconciles it to the difference), and a purchase the fresh computation no longer knows (a
    /// dedupe fix merged it into another) is cut whole (`Cut.Kind.correction`). Owner, renewal
    /// and grace facts are not compensated (docs/operations.md, "Replay").
    /// - Parameter causes: the cause of the latest fresh command per purchase id (and per
    ///   subscription key, the fallback for purchases it no longer knows).
    public static func commands(stored: SubscriptionState?, fresh: SubscriptionState, stage: ReplayStage, codeVersion: String,
                                causes: [String: Cause], fallbackCause: Cause, reasons: [String: String]) -> [MembershipCommand] {
        let key = fresh.subscriptionKey
        let storedState = stored ?? SubscriptionState(subscriptionKey: key)
        let ids = Set(fresh.grants.keys).union(storedState.grants.keys).sorted()
        var commands: [MembershipCommand] = []
        let fallbackCause = causes[key] ?? fallbackCause
        for id in ids {
            let cause = causes[id] ?? fallbackCause
            if let grant = fresh.grants[id] {
                guard differs(storedState.grants[id], grant) || storedState.granted[id] != fresh.granted[id]
                        || storedState.credited[id] != fresh.credited[id] else { continue }
                commands.append(MembershipCommand(
                    commandId: "replay|\(stage.rawValue)|\(codeVersion)|\(id)", subscriptionKey: key, action: .purchase(grant),
                    reason: reason(stage: stage, codeVersion: codeVersion, original: reasons[id] ?? "\(grant.productId) purchase \(grant.transactionId)"),
                    cause: cause))
            } else if var grant = storedState.grants[id], storedState.granted[id] != nil || (storedState.credited[id] ?? 0) != 0 {
                grant.cut = Cut(atMs: grant.startMs, kind: .correction, appleReason: nil)
                commands.append(MembershipCommand(
                    commandId: "replay|\(stage.rawValue)|\(codeVersion)|\(id)|gone", subscriptionKey: key, action: .purchase(grant),
                    reason: reason(stage: stage, codeVersion: codeVersion,
                                   original: "\(grant.productId) purchase \(grant.transactionId) is no purchase of its own with this code (merged or dropped): its grant is taken back"),
                    cause: cause))
            }
        }
        return commands
    }
}

/// The ledger difference of a replay, as the operator sees it (`--dry-run` prints it before
/// anything is written; a real run prints what it wrote).
public struct ReplayDiff: Codable, Sendable, Equatable {
    public struct Example: Codable, Sendable, Equatable {
        public var owner: String
        public var subscriptionKey: String
        public var kind: String
        public var purchaseId: String?
        public var interval: Interval?
        public var amount: Int?
        public var reason: String
    }

    /// Owners whose ledger gets entries: the user id, or `subscription:<key>` while it has no user.
    public var affectedOwners: [String]
    public var affectedSubscriptions: [String]
    /// Grants, extensions and credits.
    public var entriesAdded: Int
    /// Cuts and debits.
    public var entriesCompensated: Int
    /// Evidence only (records, renewal or owner lines).
    public var entriesOther: Int
    public var examples: [Example]

    public var entries: Int { entriesAdded + entriesCompensated + entriesOther }

    public init(entries: [LedgerEntry], exampleLimit: Int = 5) {
        var owners: Set<String> = [], keys: Set<String> = []
        var added = 0, compensated = 0, other = 0
        for entry in entries {
            owners.insert(ReplayDiff.owner(of: entry))
            keys.insert(entry.subscriptionKey)
            switch entry.kind {
            case .grant, .extend, .credit: added += 1
            case .cut, .debit: compensated += 1
            case .record, .link, .unlink, .renewal: other += 1
            }
        }
        affectedOwners = owners.sorted()
        affectedSubscriptions = keys.sorted()
        entriesAdded = added
        entriesCompensated = compensated
        entriesOther = other
        examples = entries.prefix(exampleLimit).map {
            Example(owner: ReplayDiff.owner(of: $0), subscriptionKey: $0.subscriptionKey, kind: $0.kind.rawValue,
                    purchaseId: $0.purchaseId, interval: $0.interval, amount: $0.amount, reason: $0.reason)
        }
    }

    public static func owner(of entry: LedgerEntry) -> String { entry.userId ?? "subscription:\(entry.subscriptionKey)" }
}

/// The progress line of a replay: done/total, rate, ETA.
public struct ReplayProgress: Sendable, Equatable {
    public var phase: String
    public var done: Int
    public var total: Int
    public var elapsedSeconds: Double

    public init(phase: String, done: Int, total: Int, elapsedSeconds: Double) {
        self.phase = phase
        self.done = done
        self.total = total
        self.elapsedSeconds = elapsedSeconds
    }

    public var rate: Double { elapsedSeconds > 0 ? Double(done) / elapsedSeconds : 0 }

    /// Seconds left at the current rate (nil before there is a rate).
    public var etaSeconds: Double? {
        guard rate > 0, total >= done else { return nil }
        return Double(total - done) / rate
    }

    /// `reading  [#########...........]  4500/10000  45%  12,345/s  ETA 0:03` (a bar `width` wide on
    /// a terminal), or the same without the bar for a log.
    public func line(bar width: Int?) -> String {
        let share = total > 0 ? min(1, Double(done) / Double(total)) : 1
        var text = phase.padding(8)
        if let width, width > 0 {
            let filled = Int((share * Double(width)).rounded(.down))
            text += " [" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
        }
        text += " \(done)/\(total) \(Int((share * 100).rounded(.down)))% \(Int(rate.rounded()))/s"
        if let eta = etaSeconds {
            let seconds = Int(eta.rounded(.up))
            text += " ETA \(seconds / 60):" + (seconds % 60 < 10 ? "0" : "") + "\(seconds % 60)"
        }
        return text
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        return String(text)
    }

    fileprivate func padding(_ width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
