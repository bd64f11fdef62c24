import Domain
import Store

/// What support shows a customer (R4): per entitlement group, the granted intervals, every cut at
/// its instant with its cause, grace and billing retry, the product change waiting for the renewal;
/// and the ledger lines behind it, oldest first. Pure: built from the projection and the ledger, so
/// the HTML page and `storeledger user show` draw the same thing.
public struct MembershipTimeline: Sendable {
    public struct Window: Sendable, Equatable {
        public var startMs: Int64
        public var endMs: Int64

        /// Where `ms` falls in the window, 0...1 (clamped; a degenerate window maps to 0).
        public func fraction(_ ms: Int64) -> Double {
            guard endMs > startMs else { return 0 }
            let value = (Double(ms) - Double(startMs)) / (Double(endMs) - Double(startMs))
            return min(1, max(0, value))
        }
    }

    /// A cut as support explains it: where, what was removed, why and on whose evidence.
    struct CutMark: Sendable, Equatable {
        var atMs: Int64
        var removed: Interval
        /// `refund`, `crossgrade`, ... (Cut.Kind raw value), or `cut` when the line carries none.
        var kind: String
        var cause: String
        var entryId: Int64
    }

    /// Evidence without a deduction (R11: a refund after the period ended), at its instant.
    struct RecordMark: Sendable, Equatable {
        var atMs: Int64
        /// What was recorded (`refund`, ...: the Cut.Kind raw value), or `record` when the line carries none.
        var kind: String
        var reason: String
        var entryId: Int64
    }

    struct Shade: Sendable, Equatable {
        enum Kind: String, Sendable { case grace = "grace period", billingRetry = "billing retry" }
        var kind: Kind
        var startMs: Int64
        var endMs: Int64
    }

    /// R5: a downgrade or a crossgrade to another duration waits for the renewal.
    struct PendingMark: Sendable, Equatable {
        var atMs: Int64
        var product: String
        var change: String?
    }

    struct Lane: Sendable {
        var group: String
        var granted: [Interval]
        var cuts: [CutMark]
        var records: [RecordMark]
        var shades: [Shade]
        var pending: PendingMark?
        var currentProduct: String?
        var autoRenew: Bool?
        var balance: Int?
        /// R18: a Sandbox grant is marked as one.
        var environments: [String]
    }

    public let userId: String
    public let window: Window
    let lanes: [Lane]
    /// Oldest first: the order in which the evidence happened.
    let ledger: [LedgerLine]
    /// True when the read stopped at its limit (the oldest lines are shown, the rest is not).
    let ledgerTruncated: Bool
    let nowMs: Int64

    static let day: Int64 = 86_400_000

    init(userId: String, memberships: [GroupMembership], ledger: [LedgerLine], ledgerTruncated: Bool = false,
         nowMs: Int64) {
        let ordered = ledger.sorted { $0.entryId < $1.entryId }
        self.userId = userId
        self.ledger = ordered
        self.ledgerTruncated = ledgerTruncated
        self.nowMs = nowMs
        let groups = Set(memberships.map(\.group)).union(ordered.compactMap(\.group)).sorted()
        var lanes = groups.map { group in
            Self.lane(group, membership: memberships.first { $0.group == group }, ledger: ordered.filter { $0.group == group })
        }
        let window = Self.window(lanes, ledger: ordered, nowMs: nowMs)
        // Billing retry has no end until Apple says so: it is shaded to the edge of the window.
        for index in lanes.indices {
            guard let retry = lanes[index].shades.firstIndex(where: { $0.kind == .billingRetry }) else { continue }
            lanes[index].shades[retry].endMs = max(lanes[index].shades[retry].startMs, window.endMs)
        }
        self.lanes = lanes
        self.window = window
    }

    private static func lane(_ group: String, membership: GroupMembership?, ledger: [LedgerLine]) -> Lane {
        let cuts = ledger.compactMap { line -> CutMark? in
            guard line.kind == LedgerEntry.Kind.cut.rawValue, let removed = line.interval else { return nil }
            return CutMark(atMs: removed.startMs, removed: removed, kind: line.cutKind ?? "cut", cause: describe(line.cause),
                           entryId: line.entryId)
        }
        let records = ledger.compactMap { line -> RecordMark? in
            guard line.kind == LedgerEntry.Kind.record.rawValue, let at = line.interval?.startMs else { return nil }
            return RecordMark(atMs: at, kind: line.cutKind ?? "record", reason: line.reason, entryId: line.entryId)
        }
        let granted = membership?.intervals ?? ledger.last(where: { $0.kind != LedgerEntry.Kind.record.rawValue })?.after ?? []
        var shades = graceWindows(ledger).map { Shade(kind: .grace, startMs: $0.startMs, endMs: $0.endMs ?? $0.startMs) }
        let lastEnd = granted.last?.endMs
        if let graceEnd = membership?.gracePeriodExpiresMs, let lastEnd, graceEnd > lastEnd,
           !shades.contains(where: { $0.kind == .grace && $0.endMs >= graceEnd }) {
            shades.append(Shade(kind: .grace, startMs: lastEnd, endMs: graceEnd))
        }
        if membership?.isInBillingRetry == true, let from = membership?.gracePeriodExpiresMs ?? lastEnd {
            shades.append(Shade(kind: .billingRetry, startMs: from, endMs: from))
        }
        let pending = membership.flatMap { m in
            m.pendingProduct.flatMap { product in lastEnd.map { PendingMark(atMs: $0, product: product, change: m.pendingChange) } }
        }
        return Lane(group: group, granted: granted, cuts: cuts, records: records, shades: shades, pending: pending,
                    currentProduct: membership?.currentProduct, autoRenew: membership?.autoRenewStatus, balance: membership?.balance,
                    environments: membership?.environments ?? Array(Set(ledger.compactMap(\.environment))).sorted())
    }

    /// Grace periods are granted as purchases of their own (`grace|<from>`): their intervals,
    /// folded as the ledger folds any purchase, are what the grace shading covers.
    private static func graceWindows(_ ledger: [LedgerLine]) -> [Interval] {
        var byPurchase: [String: [Interval]] = [:]
        for line in ledger {
            guard let id = line.purchaseId, id.hasPrefix("grace|"), let interval = line.interval else { continue }
            switch line.kind {
            case LedgerEntry.Kind.grant.rawValue, LedgerEntry.Kind.extend.rawValue:
                byPurchase[id] = Interval.union((byPurchase[id] ?? []) + [interval])
            case LedgerEntry.Kind.cut.rawValue:
                byPurchase[id] = Interval.subtract(interval, from: byPurchase[id] ?? [])
            default: break
            }
        }
        return Interval.union(byPurchase.values.flatMap { $0 }).filter { $0.endMs != nil }
    }

    /// From the first instant anything happened to the last, padded; an open end (lifetime) and
    /// billing retry reach a month past `now` so they visibly continue.
    private static func window(_ lanes: [Lane], ledger: [LedgerLine], nowMs: Int64) -> Window {
        var instants: [Int64] = []
        var openEnded = false
        for lane in lanes {
            for interval in lane.granted {
                instants.append(interval.startMs)
                if let end = interval.endMs { instants.append(end) } else { openEnded = true }
            }
            instants += lane.cuts.flatMap { [$0.removed.startMs] + ($0.removed.endMs.map { [$0] } ?? []) }
            instants += lane.records.map(\.atMs)
            instants += lane.shades.flatMap { [$0.startMs, $0.endMs] }
            if let pending = lane.pending { instants.append(pending.atMs) }
            if lane.shades.contains(where: { $0.kind == .billingRetry }) { openEnded = true }
        }
        for line in ledger {
            for interval in line.before + line.after + (line.interval.map { [$0] } ?? []) {
                instants.append(interval.startMs)
                if let end = interval.endMs { instants.append(end) }
            }
        }
        guard var start = instants.min(), var end = instants.max() else {
            return Window(startMs: nowMs.saturatingSubtracting(30 * day), endMs: nowMs.saturatingAdding(30 * day))
        }
        if openEnded { end = max(end, nowMs).saturatingAdding(30 * day) }
        if end <= start { end = start.saturatingAdding(day) }
        let pad = max((end - start) / 40, 1)
        start = start.saturatingSubtracting(pad)
        end = end.saturatingAdding(pad)
        return Window(startMs: start, endMs: end)
    }

    /// The cause in a support agent's words: which input, which notification, which transaction.
    static func describe(_ cause: Cause) -> String {
        var parts: [String] = []
        switch cause.source {
        case .notificationV1: parts.append("V1 notification")
        case .notificationV2: parts.append("V2 notification")
        case .appReceipt: parts.append("receipt upload")
        case .verifyReceipt: parts.append("verifyReceipt")
        case .serverAPI: parts.append("App Store Server API refresh")
        }
        if cause.provenance == "recovered" { parts.append("recovered from Apple's notification history") }
        if let type = cause.notificationType {
            parts.append(cause.notificationSubtype.map { "\(type)/\($0)" } ?? type)
        }
        if let transaction = cause.transactionId { parts.append("transaction \(transaction)") }
        if let environment = cause.environment, environment != SubscriptionKey.production { parts.append(environment) }
        return parts.joined(separator: " · ")
    }

    /// `[start, end)` in UTC, as the ledger's reasons write intervals.
    static func text(_ interval: Interval) -> String { interval.description }

    static func text(_ intervals: [Interval]) -> String {
        intervals.isEmpty ? "nothing" : intervals.map(text).joined(separator: ", ")
    }
}
