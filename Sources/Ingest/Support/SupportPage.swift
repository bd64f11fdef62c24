import Domain
import Store

/// The support pages as server-rendered HTML: inline CSS and SVG, no script, no outside asset.
/// Pure: values in, markup out; every value passes through `HTML`'s escaping interpolation.
enum SupportPage {
    static func document(title: String, query: String = "", _ body: HTML) -> HTML {
        """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>\(title) · StoreLedger support</title>
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <style>\(css)</style></head>
        <body><header><a class="home" href="/support">StoreLedger support</a>
        <form method="get" action="/support/search" role="search">
        <label for="q">user id, transaction id or original transaction id</label>
        <input id="q" name="q" value="\(query)" maxlength="\(EventBounds.maxIdentifierBytes)" required>
        <button type="submit">Find</button></form></header>
        <main>\(body)</main></body></html>
        """
    }

    static let css: HTML = """
    body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2327;background:#fafafa}
    header{display:flex;gap:1.5em;align-items:center;padding:.6em 1.2em;background:#1d2327;color:#fff}
    header a.home{color:#fff;font-weight:600;text-decoration:none}
    header form{display:flex;gap:.5em;align-items:center}header label{font-size:12px;opacity:.8}
    header input{width:22em;padding:.25em}main{padding:1em 1.2em}
    h1{font-size:20px;margin:.2em 0 .6em}h2{font-size:16px;margin:1.4em 0 .4em}
    .facts{color:#50575e}.sandbox{background:#fcf0c3;padding:0 .3em;border-radius:3px}
    svg{background:#fff;border:1px solid #dcdcde;max-width:100%;height:auto}
    table{border-collapse:collapse;width:100%;background:#fff}
    th,td{border:1px solid #dcdcde;padding:.3em .45em;vertical-align:top;text-align:left}
    th{background:#f0f0f1}tr.cut td{background:#fcf0f1}tr.record td{background:#f6f7f7}
    td.mono,pre,code{font-family:ui-monospace,monospace;font-size:12px}pre{white-space:pre-wrap;word-break:break-all}
    .legend span{display:inline-block;margin-right:1.2em}.swatch{display:inline-block;width:1em;height:.8em;vertical-align:middle;margin-right:.3em}
    """

    // MARK: the user page

    static func user(_ timeline: MembershipTimeline) -> HTML {
        let subscriptions = Set(timeline.ledger.map(\.subscriptionKey)).sorted()
        let body: HTML = """
        <h1>Membership of user <code>\(timeline.userId)</code></h1>
        <p class="facts">\(subscriptions.count) subscription(s): \(subscriptions.map { HTML("<code>\($0)</code> ") }) · times in UTC · \
        ledger entries: \(timeline.ledger.count)\(timeline.ledgerTruncated ? " (the newest ones; older entries are not shown)" : "")</p>
        <h2>Timeline</h2>
        \(timelineSVG(timeline))
        \(legend)
        <h2>Ledger: the evidence, oldest first</h2>
        \(ledgerTable(timeline))
        """
        return document(title: "User \(timeline.userId)", query: timeline.userId, body)
    }

    static let legend: HTML = """
    <p class="legend"><span><i class="swatch" style="background:#2e7d32"></i>granted</span>\
    <span><i class="swatch" style="background:#f2b8b5"></i>removed by a cut (red line: the instant)</span>\
    <span><i class="swatch" style="background:#ffe08a"></i>grace period</span>\
    <span><i class="swatch" style="background:#f5a25d"></i>billing retry</span>\
    <span><i class="swatch" style="background:#7b1fa2"></i>product change at the renewal</span>\
    <span><i class="swatch" style="background:#999"></i>recorded, nothing deducted</span></p>
    """

    // MARK: the SVG timeline

    private enum Layout {
        static let width = 1000.0, left = 170.0, right = 20.0, axisHeight = 34.0
        static let barTop = 26.0, barHeight = 22.0, noteLine = 15.0
        static var plot: Double { width - left - right }
    }

    static func timelineSVG(_ timeline: MembershipTimeline) -> HTML {
        let window = timeline.window
        func x(_ ms: Int64) -> Double { Layout.left + window.fraction(ms) * Layout.plot }
        var y = Layout.axisHeight
        var lanes: [HTML] = []
        for lane in timeline.lanes {
            let notes = lane.cuts.count + lane.records.count + (lane.pending == nil ? 0 : 1)
            let height = Layout.barTop + Layout.barHeight + 14 + Double(notes) * Layout.noteLine + 8
            lanes.append(laneSVG(lane, top: y, height: height, x: x))
            y += height
        }
        if timeline.lanes.isEmpty {
            lanes.append("<text x=\"\(Layout.left)\" y=\"\(y + 24)\" class=\"empty\">no membership in any group</text>")
            y += 40
        }
        let ticks = (0...5).map { step -> HTML in
            let ms = window.startMs.saturatingAdding(Int64(Double(window.endMs - window.startMs) * Double(step) / 5))
            let tx = x(ms)
            return """
            <line x1="\(tx)" y1="\(Layout.axisHeight - 6)" x2="\(tx)" y2="\(y)" stroke="#eee"/>\
            <text x="\(tx)" y="\(Layout.axisHeight - 10)" text-anchor="\(step == 5 ? "end" : "middle")" font-size="11" \
            fill="#50575e">\(String(TimeText.iso(ms).prefix(10)))</text>
            """
        }
        var now: HTML = ""
        if timeline.nowMs > window.startMs, timeline.nowMs < window.endMs {
            now = """
            <g class="now"><line x1="\(x(timeline.nowMs))" y1="\(Layout.axisHeight - 4)" x2="\(x(timeline.nowMs))" y2="\(y)" \
            stroke="#2271b1" stroke-dasharray="2 3"/><text x="\(x(timeline.nowMs) + 3)" y="\(Layout.axisHeight)" font-size="10" \
            fill="#2271b1">now</text></g>
            """
        }
        return """
        <svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" viewBox="0 0 \(Layout.width) \(y + 6)" \
        width="\(Layout.width)" height="\(y + 6)" data-window-start="\(TimeText.iso(window.startMs))" \
        data-window-end="\(TimeText.iso(window.endMs))"><title>Membership timeline of user \(timeline.userId)</title>\
        \(ticks)\(lanes)\(now)</svg>
        """
    }

    private static func laneSVG(_ lane: MembershipTimeline.Lane, top: Double, height: Double, x: (Int64) -> Double) -> HTML {
        let barY = top + Layout.barTop
        func span(_ start: Int64, _ end: Int64?) -> (x: Double, width: Double) {
            let from = x(start), to = end.map(x) ?? (Layout.left + Layout.plot)
            return (from, max(1.5, to - from))
        }
        let sandbox = lane.environments.filter { $0 != SubscriptionKey.production }
        var facts = lane.currentProduct ?? ""
        if let balance = lane.balance { facts += facts.isEmpty ? "balance \(balance)" : " · balance \(balance)" }
        let label: HTML = """
        <text x="8" y="\(barY + 15)" font-weight="600" font-size="13">\(lane.group)</text>\
        <text x="8" y="\(barY + 30)" font-size="10" fill="#50575e">\(facts)</text>\
        \(sandbox.isEmpty ? "" : HTML("<text x=\"8\" y=\"\(barY + 42)\" font-size=\"10\" fill=\"#996800\">\(sandbox.joined(separator: ", "))</text>"))
        """
        let granted = lane.granted.map { interval -> HTML in
            let (gx, gw) = span(interval.startMs, interval.endMs)
            return """
            <rect class="granted" x="\(gx)" y="\(barY)" width="\(gw)" height="\(Layout.barHeight)" fill="#2e7d32" \
            data-start="\(TimeText.iso(interval.startMs))" data-end="\(interval.endMs.map(TimeText.iso) ?? "open-ended")">\
            <title>granted \(MembershipTimeline.text(interval))</title></rect>
            """
        }
        let shades = lane.shades.map { shade -> HTML in
            let (sx, sw) = span(shade.startMs, shade.endMs)
            let fill = shade.kind == .grace ? "#ffe08a" : "#f5a25d"
            return """
            <rect class="\(shade.kind == .grace ? "grace" : "billing-retry")" x="\(sx)" y="\(barY + 4)" width="\(sw)" \
            height="\(Layout.barHeight - 8)" fill="\(fill)" fill-opacity="0.85" data-start="\(TimeText.iso(shade.startMs))">\
            <title>\(shade.kind.rawValue) from \(TimeText.iso(shade.startMs))</title></rect>
            """
        }
        var noteY = barY + Layout.barHeight + 14
        func note(at anchor: Double, _ text: String, color: String) -> HTML {
            defer { noteY += Layout.noteLine }
            let end = anchor > Layout.left + Layout.plot / 2
            return """
            <text x="\(end ? anchor - 4 : anchor + 4)" y="\(noteY)" font-size="11" fill="\(color)" \
            text-anchor="\(end ? "end" : "start")">\(text)</text>
            """
        }
        let cuts = lane.cuts.map { cut -> HTML in
            let (rx, rw) = span(cut.removed.startMs, cut.removed.endMs)
            let cx = x(cut.atMs)
            let text = "✂ \(cut.kind) at \(TimeText.iso(cut.atMs)): \(cut.cause)"
            return """
            <g class="cut" data-at="\(TimeText.iso(cut.atMs))" data-kind="\(cut.kind)"><a href="#entry-\(cut.entryId)">\
            <rect class="removed" x="\(rx)" y="\(barY)" width="\(rw)" height="\(Layout.barHeight)" fill="#f2b8b5"/>\
            <line x1="\(cx)" y1="\(barY - 6)" x2="\(cx)" y2="\(noteY - 9)" stroke="#b32d2e" stroke-width="2"/>\
            \(note(at: cx, text, color: "#b32d2e"))<title>cut \(MembershipTimeline.text(cut.removed)) — \(cut.kind) — \(cut.cause)</title></a></g>
            """
        }
        let records = lane.records.map { record -> HTML in
            let rx = x(record.atMs)
            return """
            <g class="record" data-at="\(TimeText.iso(record.atMs))" data-kind="\(record.kind)"><a href="#entry-\(record.entryId)">\
            <circle cx="\(rx)" cy="\(barY + Layout.barHeight / 2)" r="5" fill="#fff" stroke="#999" stroke-width="2"/>\
            \(note(at: rx, "○ \(record.kind) at \(TimeText.iso(record.atMs)): recorded, nothing deducted", color: "#646970"))\
            <title>\(record.reason)</title></a></g>
            """
        }
        var pending: HTML = ""
        if let change = lane.pending {
            let px = x(change.atMs)
            let what = "⇢ at the renewal \(TimeText.iso(change.atMs)): renews as \(change.product)\(change.change.map { " (\($0))" } ?? "")"
            pending = """
            <g class="pending" data-at="\(TimeText.iso(change.atMs))" data-product="\(change.product)">\
            <line x1="\(px)" y1="\(barY - 6)" x2="\(px)" y2="\(noteY - 9)" stroke="#7b1fa2" stroke-width="2" stroke-dasharray="4 2"/>\
            \(note(at: px, what, color: "#7b1fa2"))</g>
            """
        }
        return """
        <g class="lane" data-group="\(lane.group)"><rect x="0" y="\(top)" width="\(Layout.width)" height="\(height)" \
        fill="none" stroke="#f0f0f1"/>\(label)\(granted)\(shades)\(cuts)\(records)\(pending)</g>
        """
    }

    // MARK: the ledger as evidence

    static func ledgerTable(_ timeline: MembershipTimeline) -> HTML {
        guard !timeline.ledger.isEmpty else { return "<p>No ledger entries.</p>" }
        let rows = timeline.ledger.map { line -> HTML in
            let kind = line.cutKind.map { "\(line.kind) (\($0))" } ?? line.kind
            let what = [line.group, line.productId, line.amount.map { "amount \($0)" }, line.balanceAfter.map { "balance → \($0)" }]
                .compactMap { $0 }.joined(separator: " · ")
            return """
            <tr id="entry-\(line.entryId)" class="\(line.kind)"><td class="mono">\(line.entryId)</td><td class="mono">\(line.createdAt)</td>\
            <td>\(kind)</td><td>\(what)</td><td class="mono">\(line.interval.map(MembershipTimeline.text) ?? "")</td>\
            <td class="mono">\(MembershipTimeline.text(line.before)) → \(MembershipTimeline.text(line.after))</td>\
            <td>\(line.reason)</td><td>\(evidence(line))</td></tr>
            """
        }
        return """
        <table class="ledger"><thead><tr><th>#</th><th>written</th><th>kind</th><th>group · product</th><th>interval</th>\
        <th>before → after</th><th>reason</th><th>source</th></tr></thead><tbody>\(rows)</tbody></table>
        """
    }

    /// The input behind a line: what it was, and links to the raw record and its decoded form.
    private static func evidence(_ line: LedgerLine) -> HTML {
        let cause = line.cause
        var parts: [HTML] = ["\(MembershipTimeline.describe(cause))"]
        if let uuid = cause.notificationUUID { parts.append("<br>notification <code>\(uuid)</code>") }
        parts.append("<br>subscription <code>\(line.subscriptionKey)</code>")
        if let environment = line.environment, environment != SubscriptionKey.production {
            parts.append(" <span class=\"sandbox\">\(environment)</span>")
        }
        if let raw = cause.rawPosition { parts.append("<br>raw \(positionLink(raw))") }
        if let decoded = cause.decodedPosition { parts.append("<br>decoded \(positionLink(decoded))") }
        return "\(parts)"
    }

    static func positionLink(_ position: RecordPosition) -> HTML {
        """
        <a class="position" href="/support/raw/\(pathSegment: position.topic)/\(position.partition)/\(position.offset)">\
        \(position.topic)/\(position.partition)@\(position.offset)</a>
        """
    }

    // MARK: search, raw records, messages

    struct SearchMatch: Sendable, Equatable {
        var userId: String?
        var subscriptionKey: String?
        var how: String
    }

    static func searchResults(_ query: String, _ matches: [SearchMatch]) -> HTML {
        let items = matches.map { match -> HTML in
            if let user = match.userId {
                return "<li><a href=\"/support/users/\(pathSegment: user)\">user <code>\(user)</code></a> (\(match.how))</li>"
            }
            return "<li>subscription <code>\(match.subscriptionKey ?? "")</code> is not linked to any user (\(match.how))</li>"
        }
        let body: HTML = matches.isEmpty
            ? "<h1>Nothing matches <code>\(query)</code></h1><p>No user, transaction or original transaction has this id.</p>"
            : "<h1>Matches for <code>\(query)</code></h1><ul>\(items)</ul>"
        return document(title: "Search", query: query, body)
    }

    static func rawRecord(_ view: RawRecordView) -> HTML {
        let headers = view.headers.map { "<tr><th>\($0.name)</th><td class=\"mono\">\($0.value)</td></tr>" as HTML }
        let body: HTML = """
        <h1>Record <code>\(view.topic)/\(view.partition)@\(view.offset)</code></h1>
        <p class="facts">written \(view.timestamp.map(TimeText.iso) ?? "at an unknown time") · \(view.byteCount) bytes · \(view.note)</p>
        <h2>Headers</h2><table>\(headers)</table>
        <h2>Value</h2><pre>\(view.text)</pre>
        """
        return document(title: "Record \(view.topic)/\(view.partition)@\(view.offset)", body)
    }

    static func message(_ title: String, _ detail: String) -> HTML {
        document(title: title, "<h1>\(title)</h1><p>\(detail)</p>")
    }
}
