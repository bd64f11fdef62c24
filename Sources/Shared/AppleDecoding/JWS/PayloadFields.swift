import Foundation

/// The fields StoreLedger reads from a signed payload (V2 notification, transaction, renewal
/// info), read straight from the decoded JSON bytes: no `[String: Any]`, no NSNumber, no String
/// made for a key or for a value nobody reads. Building and querying those dictionaries was about
/// a quarter of the Swift side of a V2 notification.
///
/// It reads the subset `JSONObjectReader` reads (ASCII strings with the short escapes, integers of
/// at most 18 digits, literals, at most `JSONObjectReader.maxDepth` levels) and yields, for each
/// field of `PayloadKeys`, the value `JSONFields` would have seen in that reader's dictionary.
/// Anything else, and a field that appears twice in one object, returns nil: the caller then takes
/// the dictionary path (`JSONObjectReader.objectOrFallback`), so every verdict stays what it was.
/// Objects under a field of `PayloadKeys` are read the same way; other values are only checked.
struct PayloadFields {
    /// A field's JSON value; numbers as the reader's integers (JSONSerialization would give
    /// NSNumbers of the same value), booleans apart, lists by their emptiness alone.
    enum Value {
        case text(String)
        case integer(Int64)
        case bool(Bool)
        case null
        case list(isEmpty: Bool)
        case object(PayloadFields)
    }

    /// The fields present, in document order; each key of `PayloadKeys` at most once.
    private var entries: [(key: UInt8, value: Value)] = []
    /// Whether the object has no member at all (read or not): Python's truthiness of `aud`.
    private(set) var isEmpty = true

    /// A field of `PayloadKeys`; nil if absent. Asking for another key is a programming error
    /// (the differential tests would show a missing value).
    func value(_ key: String) -> Value? {
        guard let wanted = PayloadKeys.index(key) else {
            assertionFailure("\(key) is not in PayloadKeys")
            return nil
        }
        for entry in entries where entry.key == wanted { return entry.value }
        return nil
    }

    static func read(_ bytes: [UInt8]) -> PayloadFields? {
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return nil }
            var cursor = JSONCursor(base: base, end: buffer.count)
            cursor.skipWhitespace()
            guard cursor.peek == UInt8(ascii: "{"), let fields = cursor.fields(depth: 1) else { return nil }
            cursor.skipWhitespace()
            return cursor.index == cursor.end ? fields : nil
        }
    }

    fileprivate mutating func insert(_ key: UInt8, _ value: Value) -> Bool {
        for entry in entries where entry.key == key { return false }
        if entries.capacity == 0 { entries.reserveCapacity(16) }  // Apple's objects hold 5–25 fields
        entries.append((key, value))
        return true
    }

    fileprivate mutating func noteMember() { isEmpty = false }
}

/// The keys `PayloadFields` keeps: every field the verifier (app, environment, effective date,
/// registered claims) and `V2Facts` read from a payload, at any level. A key outside the list is
/// checked and skipped; an object under a key of the list is read as fields in turn.
enum PayloadKeys {
    static let names: [String] = [
        // Registered JWT claims and the effective date (SignedDataVerifier).
        "signedDate", "receiptCreationDate", "iat", "nbf", "exp", "aud", "sub", "jti",
        // Notification, and its data / summary / externalPurchaseToken / appData.
        "notificationType", "subtype", "notificationUUID", "data", "summary", "externalPurchaseToken", "appData",
        "bundleId", "appAppleId", "environment", "externalPurchaseId", "status", "signedTransactionInfo",
        "signedRenewalInfo", "consumptionRequestReason",
        // Transaction (V2Facts.transaction) and its commitmentInfo.
        "transactionId", "originalTransactionId", "webOrderLineItemId", "productId", "purchaseDate",
        "originalPurchaseDate", "expiresDate", "revocationDate", "revocationReason", "isUpgraded", "offerType",
        "offerDiscountType", "offerIdentifier", "quantity", "type", "inAppOwnershipType", "subscriptionGroupIdentifier",
        "appAccountToken", "storefront", "transactionReason", "price", "currency", "revocationType",
        "revocationPercentage", "offerPeriod", "storefrontId", "appTransactionId", "billingPlanType", "commitmentInfo",
        "billingPeriodNumber", "totalBillingPeriods", "commitmentExpiresDate", "commitmentPrice",
        // Renewal info (V2Facts.renewal).
        "autoRenewProductId", "autoRenewStatus", "expirationIntent", "isInBillingRetryPeriod", "gracePeriodExpiresDate",
        "priceIncreaseStatus", "renewalDate", "renewalPrice",
    ]

    private static let table = KeyTable(names)

    /// The index in `names` of the key spelled by these bytes, nil if it is none of them.
    static func index(_ bytes: UnsafePointer<UInt8>, _ count: Int) -> UInt8? { table.index(bytes, count) }

    static func index(_ key: String) -> UInt8? {
        var key = key
        return key.withUTF8 { utf8 in utf8.baseAddress.flatMap { table.index($0, utf8.count) } }
    }

    /// Open addressing over 256 slots (slot → index + 1, 0 empty) and the names' bytes end to end
    /// for the final comparison, in memory of its own: read on every key of every payload, so no
    /// array's bounds checks and reference counting. `@unchecked Sendable`: written once in `init`,
    /// never changed or freed afterwards (a process-wide constant), so any thread may read it.
    private final class KeyTable: @unchecked Sendable {
        private let slots: UnsafeMutablePointer<UInt8>
        private let bytes: UnsafeMutablePointer<UInt8>
        private let starts: UnsafeMutablePointer<Int>

        init(_ names: [String]) {
            precondition(names.count < 128 && Set(names).count == names.count)
            let utf8 = names.map { Array($0.utf8) }
            slots = .allocate(capacity: 256)
            slots.initialize(repeating: 0, count: 256)
            bytes = .allocate(capacity: max(1, utf8.reduce(0) { $0 + $1.count }))
            starts = .allocate(capacity: names.count + 1)
            var offset = 0
            for (index, name) in utf8.enumerated() {
                starts[index] = offset
                for byte in name { bytes[offset] = byte; offset += 1 }
                var slot = name.withUnsafeBufferPointer { Self.hash($0.baseAddress!, $0.count) }
                while slots[slot] != 0 { slot = (slot + 1) & 255 }
                slots[slot] = UInt8(index + 1)
            }
            starts[names.count] = offset
        }

        func index(_ key: UnsafePointer<UInt8>, _ count: Int) -> UInt8? {
            var slot = Self.hash(key, count)
            while true {
                let entry = slots[slot]
                if entry == 0 { return nil }
                let index = Int(entry) - 1
                let start = starts[index]
                if starts[index + 1] - start == count, memcmp(bytes + start, key, count) == 0 { return UInt8(index) }
                slot = (slot + 1) & 255
            }
        }

        /// Length and the first and last 8 bytes (every byte of a shorter key), mixed: the names
        /// differ there, and it costs the same for a 3- or a 27-byte key.
        private static func hash(_ key: UnsafePointer<UInt8>, _ count: Int) -> Int {
            var h = UInt64(truncatingIfNeeded: count) &* 0x9E37_79B9_7F4A_7C15
            if count >= 8 {
                let raw = UnsafeRawPointer(key)
                h = (h ^ raw.loadUnaligned(as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
                h = (h ^ raw.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)) &* 0xC4CE_B9FE_1A85_EC53
            } else {
                for offset in 0..<count { h = (h ^ UInt64(key[offset])) &* 0x0000_0100_0000_01B3 }
            }
            return Int(truncatingIfNeeded: (h ^ (h >> 29)) >> 56)
        }
    }
}

extension JSONCursor {
    /// At `{`: the object's fields, with `JSONObjectReader`'s rules (depth, members, separators).
    mutating func fields(depth: Int) -> PayloadFields? {
        guard depth <= JSONObjectReader.maxDepth else { return nil }
        index += 1
        skipWhitespace()
        var fields = PayloadFields()
        if peek == UInt8(ascii: "}") { index += 1; return fields }
        while true {
            skipWhitespace()
            guard peek == UInt8(ascii: "\"") else { return nil }
            let key = self.key()
            if case .invalid = key { return nil }
            skipWhitespace()
            guard peek == UInt8(ascii: ":") else { return nil }
            index += 1
            skipWhitespace()
            fields.noteMember()
            if case .kept(let index) = key {
                guard let value = fieldValue(depth: depth), fields.insert(index, value) else { return nil }
            } else {
                guard skipValue(depth: depth) else { return nil }
            }
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return fields
            default: return nil
            }
        }
    }

    private enum Key {
        case kept(UInt8)
        case other
        case invalid
    }

    /// At a key's `"`. A key with an escape is never one of `PayloadKeys` (the short escapes stand
    /// for quotes, slashes and control characters), so it is only checked.
    private mutating func key() -> Key {
        let quote = index
        index += 1
        skipPlainASCII()
        while index < end, base[index] != UInt8(ascii: "\""), base[index] != UInt8(ascii: "\\"),
              base[index] >= 0x20, base[index] < 0x80 { index += 1 }
        if index < end, base[index] == UInt8(ascii: "\"") {
            let found = PayloadKeys.index(base + quote + 1, index - quote - 1)
            index += 1
            return found.map { .kept($0) } ?? .other
        }
        index = quote
        return skipString() ? .other : .invalid
    }

    /// A kept field's value; an object is read as fields in turn.
    private mutating func fieldValue(depth: Int) -> PayloadFields.Value? {
        guard let byte = peek else { return nil }
        switch byte {
        case UInt8(ascii: "\""): return string().map { .text($0) }
        case UInt8(ascii: "{"): return fields(depth: depth + 1).map { .object($0) }
        case UInt8(ascii: "["):
            let start = index
            guard skipValue(depth: depth) else { return nil }
            return .list(isEmpty: isEmptyList(at: start))
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return literal("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return integerValue().map { .integer($0.value) }
        default: return nil
        }
    }

    /// Checks one value of the subset without keeping anything.
    private mutating func skipValue(depth: Int) -> Bool {
        guard let byte = peek else { return false }
        switch byte {
        case UInt8(ascii: "\""): return skipString()
        case UInt8(ascii: "{"): return skipContainer(depth: depth + 1, close: UInt8(ascii: "}"))
        case UInt8(ascii: "["): return skipContainer(depth: depth + 1, close: UInt8(ascii: "]"))
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return integerValue() != nil
        default: return false
        }
    }

    /// At `{` or `[`: members (`"key": value`) or elements, as `JSONObjectReader` reads them.
    private mutating func skipContainer(depth: Int, close: UInt8) -> Bool {
        guard depth <= JSONObjectReader.maxDepth else { return false }
        let isObject = close == UInt8(ascii: "}")
        index += 1
        skipWhitespace()
        if peek == close { index += 1; return true }
        while true {
            skipWhitespace()
            if isObject {
                guard peek == UInt8(ascii: "\""), skipString() else { return false }
                skipWhitespace()
                guard peek == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
            }
            guard skipValue(depth: depth) else { return false }
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","): index += 1
            case close: index += 1; return true
            default: return false
            }
        }
    }

    /// Whether the list that starts at `start` (already checked) has no element.
    private func isEmptyList(at start: Int) -> Bool {
        var probe = start + 1
        while probe < end, base[probe] == 0x20 || base[probe] == 0x09 || base[probe] == 0x0A || base[probe] == 0x0D { probe += 1 }
        return probe < end && base[probe] == UInt8(ascii: "]")
    }
}
