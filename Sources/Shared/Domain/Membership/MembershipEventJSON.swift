/// The published JSON of a membership event, written directly: byte for byte what `JSONEncoder` with
/// `.sortedKeys` writes (the schema's consumers, the outbox and replay's byte-identical projections
/// see no difference; `MembershipEventJSONTests` compares the two). Foundation's encoder was the
/// largest single cost of the membership stage.
extension MembershipEvent {
    public var json: [UInt8] {
        SortedKeyJSON.document {
            $0.int("amount", amount)
            $0.int("balanceAfter", balanceAfter)
            $0.object("cause") { writeCause(&$0) }
            $0.bool("correction", correction)
            $0.string("cutKind", cutKind)
            $0.object("entitlement") {
                $0.intervals("after", entitlement.after)
                $0.intervals("before", entitlement.before)
            }
            $0.string("environment", environment)
            $0.string("eventId", eventId)
            $0.string("group", group)
            if let interval { $0.object("interval") { $0.interval(interval) } }
            $0.int("ledgerEntryId", ledgerEntryId)
            $0.string("ledgerKind", ledgerKind)
            if let offer {
                $0.object("offer") {
                    $0.bool("isIntro", offer.isIntro)
                    $0.bool("isTrial", offer.isTrial)
                    $0.string("offerCodeRefName", offer.offerCodeRefName)
                    $0.string("offerDiscountType", offer.offerDiscountType)
                    $0.int("offerType", offer.offerType)
                    $0.string("promotionalOfferId", offer.promotionalOfferId)
                }
            }
            $0.string("originalTransactionId", originalTransactionId)
            if let productChange {
                $0.object("productChange") {
                    $0.string("fromProductId", productChange.fromProductId)
                    $0.string("mode", productChange.mode.rawValue)
                    $0.string("toProductId", productChange.toProductId)
                }
            }
            $0.string("productId", productId)
            $0.string("purchaseId", purchaseId)
            $0.string("reason", reason)
            $0.int("recordedAtMs", recordedAtMs)
            if let renewal {
                $0.object("renewal") {
                    $0.string("autoRenewProductId", renewal.autoRenewProductId)
                    $0.bool("autoRenewStatus", renewal.autoRenewStatus)
                    $0.string("expirationIntent", renewal.expirationIntent)
                    $0.int("gracePeriodExpiresMs", renewal.gracePeriodExpiresMs)
                    $0.bool("isInBillingRetry", renewal.isInBillingRetry)
                }
            }
            $0.string("schema", schema)
            $0.string("subscriptionKey", subscriptionKey)
            $0.string("transactionId", transactionId)
            if let transfer {
                $0.object("transfer") {
                    $0.string("fromUserId", transfer.fromUserId)
                    $0.string("toUserId", transfer.toUserId)
                }
            }
            $0.string("type", type.rawValue)
            $0.string("userId", userId)
        }
    }

    private func writeCause(_ out: inout SortedKeyJSON) {
        out.string("eventId", cause.eventId)
        out.string("notificationSubtype", cause.notificationSubtype)
        out.string("notificationType", cause.notificationType)
        out.string("source", cause.source)
        out.string("transactionId", cause.transactionId)
    }
}

/// `[Interval]` as `Interval`'s Codable form (`{"endMs":…,"startMs":…}`, no `endMs` when open-ended),
/// written directly: the ledger needs two per entry.
public func intervalsJSON(_ intervals: [Interval]) -> [UInt8] {
    var out = SortedKeyJSON(capacity: 16 + intervals.count * 48)
    out.intervals(intervals)
    return out.bytes
}

/// A JSON object writer for fields given in sorted order; nil values are left out, as the
/// synthesized `Encodable` conformances leave them out.
struct SortedKeyJSON {
    private(set) var bytes: [UInt8] = []
    private var needsComma = false

    init(capacity: Int = 1024) { bytes.reserveCapacity(capacity) }

    /// One object's bytes.
    static func document(_ body: (inout SortedKeyJSON) -> Void) -> [UInt8] {
        var out = SortedKeyJSON()
        out.object(body)
        return out.bytes
    }

    mutating func object(_ body: (inout SortedKeyJSON) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
        body(&self)
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    mutating func object(_ key: StaticString, _ body: (inout SortedKeyJSON) -> Void) {
        self.key(key)
        object(body)
    }

    mutating func string(_ key: StaticString, _ value: String?) {
        guard let value else { return }
        self.key(key)
        quoted(value)
    }

    mutating func int<T: BinaryInteger>(_ key: StaticString, _ value: T?) {
        guard let value else { return }
        self.key(key)
        int(value)
    }

    mutating func bool(_ key: StaticString, _ value: Bool?) {
        guard let value else { return }
        self.key(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func interval(_ interval: Interval) {
        int("endMs", interval.endMs)
        int("startMs", interval.startMs)
    }

    mutating func intervals(_ key: StaticString, _ values: [Interval]) {
        self.key(key)
        intervals(values)
    }

    /// `[Interval]` as an array of `interval` objects.
    mutating func intervals(_ values: [Interval]) {
        array(values) { out, interval in out.object { $0.interval(interval) } }
    }

    /// A value without a key (a dictionary's or an array's). Digits are written straight into the
    /// bytes: `String(value)` went through the generic radix conversion and a string per number.
    mutating func int<T: BinaryInteger>(_ value: T) {
        guard let wide = Int64(exactly: value) else { return bytes.append(contentsOf: String(value).utf8) }
        SortedKeyJSON.appendDecimal(wide, to: &bytes)
    }

    /// `value` in decimal, as `String(value)` writes it.
    static func appendDecimal(_ value: Int64, to bytes: inout [UInt8]) {
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)   // 24 bytes of stack: UInt64's 20 digits fit
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                index -= 1
                buffer[index] = UInt8(ascii: "-")
            }
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    mutating func quotedValue(_ value: String) {
        quoted(value)
    }

    mutating func array<Element>(_ values: [Element], _ write: (inout SortedKeyJSON, Element) -> Void) {
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            write(&self, value)
        }
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// A member name of ours: a literal of plain ASCII letters, copied as it is (the escape scan and
    /// the String it ran on were 10–14 % of the states' and events' JSON, callgrind).
    mutating func key(_ key: StaticString) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        needsComma = true
    }

    /// A member name from data (a dictionary's key), escaped.
    mutating func key(_ key: String) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        quoted(key)
        bytes.append(UInt8(ascii: ":"))
        needsComma = true
    }

    /// JSONEncoder's escapes: quote, backslash, slash, the short control escapes, \u00XX for the rest below 0x20.
    /// Runs of bytes that need none are copied at once (this was the writers' largest cost).
    private mutating func quoted(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var runStart = 0
            // Whole words with nothing to escape are skipped eight bytes at a time (ids, keys, reasons).
            let plain = utf8.baseAddress.map { PlainASCII.unescapedWordsEnd($0, count: utf8.count) } ?? 0
            for index in plain..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                runStart = index + 1
                escape(byte)
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func escape(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""): bytes += [0x5C, 0x22]
        case UInt8(ascii: "\\"): bytes += [0x5C, 0x5C]
        case UInt8(ascii: "/"): bytes += [0x5C, 0x2F]
        case 0x08: bytes += [0x5C, UInt8(ascii: "b")]
        case 0x0C: bytes += [0x5C, UInt8(ascii: "f")]
        case 0x0A: bytes += [0x5C, UInt8(ascii: "n")]
        case 0x0D: bytes += [0x5C, UInt8(ascii: "r")]
        case 0x09: bytes += [0x5C, UInt8(ascii: "t")]
        default:
            let hex = Array("0123456789abcdef".utf8)
            bytes += [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
        }
    }
}
