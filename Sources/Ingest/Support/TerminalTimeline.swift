import Domain
import Store

/// `storeledger user show`: the same timeline as the support page, as text lanes (one character
/// per slice of the window) with the cuts and the pending change spelled out under each lane, then
/// the ledger as lines. Pure; control characters are replaced so no stored text can steer a terminal.
public enum TerminalTimeline {
    static let granted: Character = "█", removed: Character = "x", grace: Character = "░", retry: Character = "~"
    static let cut: Character = "✂", empty: Character = "·"

    public static func render(_ timeline: MembershipTimeline, width: Int = 72) -> String {
        let columns = max(20, min(width, 400))
        let window = timeline.window
        var lines = ["user \(safe(timeline.userId))",
                     "window \(TimeText.iso(window.startMs)) … \(TimeText.iso(window.endMs)) (UTC), \(columns) columns"]
        let labelWidth = min(24, (timeline.lanes.map { safe($0.group).count }.max() ?? 5) + 1)
        for lane in timeline.lanes {
            let name = safe(lane.group)
            let label = name.count >= labelWidth ? String(name.prefix(labelWidth - 1)) + " " : name.padding(toLength: labelWidth, withPad: " ", startingAt: 0)
            lines.append("")
            var facts = [lane.currentProduct.map(safe), lane.autoRenew.map { $0 ? "auto-renew on" : "auto-renew off" },
                         lane.balance.map { "balance \($0)" }].compactMap { $0 }
            facts += lane.environments.filter { $0 != SubscriptionKey.production }.map(safe)
            lines.append(label + "|" + String(bar(lane, window: window, columns: columns)) + "|" + (facts.isEmpty ? "" : "  " + facts.joined(separator: ", ")))
            let indent = String(repeating: " ", count: labelWidth + 1)
            for interval in lane.granted { lines.append(indent + "\(granted) granted \(MembershipTimeline.text(interval))") }
            for shade in lane.shades {
                lines.append(indent + "\(shade.kind == .grace ? grace : retry) \(shade.kind.rawValue) from \(TimeText.iso(shade.startMs))")
            }
            for mark in lane.cuts {
                lines.append(indent + "\(cut) cut at \(TimeText.iso(mark.atMs)) (\(safe(mark.kind))): removed \(MembershipTimeline.text(mark.removed)); \(safe(mark.cause)) [entry \(mark.entryId)]")
            }
            for record in lane.records {
                lines.append(indent + "o \(safe(record.kind)) at \(TimeText.iso(record.atMs)): recorded, nothing deducted [entry \(record.entryId)]")
            }
            if let change = lane.pending {
                lines.append(indent + "> at the renewal \(TimeText.iso(change.atMs)): renews as \(safe(change.product))\(change.change.map { " (\(safe($0)))" } ?? "")")
            }
        }
        if timeline.lanes.isEmpty { lines.append("no membership in any group") }
        lines.append("")
        lines.append("legend: \(granted) granted  \(removed) removed by a cut  \(cut) the cut's instant  \(grace) grace  \(retry) billing retry  \(empty) nothing")
        lines.append("")
        lines.append("ledger (oldest first\(timeline.ledgerTruncated ? "; the newest lines only, older ones are not shown" : "")):")
        for line in timeline.ledger { lines.append(ledgerLine(line)) }
        return lines.joined(separator: "\n") + "\n"
    }

    /// One character per `1/columns` of the window; a cut's instant wins over what it sits on.
    static func bar(_ lane: MembershipTimeline.Lane, window: MembershipTimeline.Window, columns: Int) -> [Character] {
        var cells = [Character](repeating: empty, count: columns)
        func column(_ ms: Int64) -> Int { min(columns - 1, Int(window.fraction(ms) * Double(columns))) }
        func fill(_ start: Int64, _ end: Int64?, _ mark: Character) {
            let from = column(start), to = end.map { max(from, column($0) - 1) } ?? (columns - 1)
            for index in from...to { cells[index] = mark }
        }
        for mark in lane.cuts { fill(mark.removed.startMs, mark.removed.endMs, removed) }
        for interval in lane.granted { fill(interval.startMs, interval.endMs, granted) }
        for shade in lane.shades { fill(shade.startMs, shade.endMs, shade.kind == .grace ? grace : retry) }
        for mark in lane.cuts { cells[column(mark.atMs)] = cut }
        return cells
    }

    static func ledgerLine(_ line: LedgerLine) -> String {
        var parts = ["#\(line.entryId)", safe(line.createdAt), line.cutKind.map { "\(safe(line.kind))(\(safe($0)))" } ?? safe(line.kind)]
        parts += [line.group, line.productId].compactMap { $0 }.map(safe)
        if let interval = line.interval { parts.append(MembershipTimeline.text(interval)) }
        if let amount = line.amount { parts.append("amount \(amount)") }
        parts.append("before \(MembershipTimeline.text(line.before)) → after \(MembershipTimeline.text(line.after))")
        parts.append("— \(safe(line.reason))")
        var source = "[\(safe(MembershipTimeline.describe(line.cause))); subscription \(safe(line.subscriptionKey))"
        if let raw = line.cause.rawPosition { source += "; raw \(safe(raw.description))" }
        source += "]"
        parts.append(source)
        return parts.joined(separator: "  ")
    }

    /// C0 and C1 controls (ESC included) become `?`: the ledger holds text that came from outside.
    public static func safe(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { scalar in
            (scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)) ? "?" : scalar
        }))
    }
}
