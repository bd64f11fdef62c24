import Domain
import Foundation

/// A request body's top-level JSON object, located in one pass over the bytes without building
/// Foundation values: where each member, key and value lie and what kind of value it is.
///
/// Only a plain subset of JSON is read: ASCII text with the short escapes (no `\u`), integers of
/// at most 18 digits, `true`, `false`, `null`, nesting at most `EventBounds.maxJSONDepth` deep,
/// and top-level keys written without escapes, none of them twice. Every such text is one that
/// `JSONSerialization` parses into an object with exactly these members, so a check that accepts
/// from here accepts what the full checks accept. Anything else (malformed input included) is
/// nil and goes to the full checks, which keep every refusal and its reason.
struct PlainJSONObject {
    enum Kind: Equatable { case string, number, bool, null, object, array }

    struct Member {
        /// The key's bytes between its quotes.
        let key: Range<Int>
        /// The value's bytes; for a string, between its quotes.
        let value: Range<Int>
        let kind: Kind
        /// A string value with a backslash in it (its bytes are not its text).
        let escaped: Bool
    }

    let bytes: [UInt8]
    let members: [Member]
    /// The positions of the object's `{`, of every `,` between its members and of its `}`.
    let separators: [Int]

    static let maxIntegerDigits = 18
    /// Apple's bodies have a few dozen top-level members at most; more go to the full checks, so
    /// the repeated-key test below (quadratic) stays cheap on a hostile body of 100,000 members.
    static let maxMembers = 64

    init?(_ bytes: [UInt8]) {
        var members: [Member] = []
        var separators: [Int] = []
        let parsed = bytes.withUnsafeBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            var cursor = PlainJSONCursor(base: base, end: buffer.count)
            return cursor.topLevel(&members, &separators)
        }
        guard parsed, members.count <= Self.maxMembers else { return nil }
        // A repeated top-level key: which value JSONSerialization keeps is its business.
        for (index, member) in members.enumerated() {
            for earlier in members[..<index] where bytes[earlier.key].elementsEqual(bytes[member.key]) { return nil }
        }
        self.bytes = bytes
        self.members = members
        self.separators = separators
    }

    func member(_ key: String) -> Member? {
        members.first { bytes[$0.key].elementsEqual(key.utf8) }
    }

    /// A string member's text; nil if absent, not a string, or escaped.
    func plainText(_ member: Member) -> String? {
        guard member.kind == .string, !member.escaped else { return nil }
        return String(decoding: bytes[member.value], as: UTF8.self)
    }

    /// The bytes without the member named `key`, every other byte kept as it was: what
    /// `V1Secret.removingPassword` makes of the same body (asserted by IngestPlainBodyTests).
    func removing(_ key: String) -> [UInt8] {
        var result = Array(bytes[...separators[0]])
        result.reserveCapacity(bytes.count)
        var kept = 0
        for (index, member) in members.enumerated() where !bytes[member.key].elementsEqual(key.utf8) {
            if kept > 0 { result.append(UInt8(ascii: ",")) }
            result += bytes[(separators[index] + 1)..<separators[index + 1]]
            kept += 1
        }
        // `{}` and `{ }`: no member, the bytes between the braces kept.
        if members.isEmpty { result += bytes[(separators[0] + 1)..<separators[1]] }
        result += bytes[separators[separators.count - 1]...]
        return result
    }
}

private struct PlainJSONCursor {
    let base: UnsafePointer<UInt8>
    let end: Int
    var index = 0
    /// Whether the string `value` read last had an escape.
    var lastStringEscaped = false

    init(base: UnsafePointer<UInt8>, end: Int) {
        self.base = base
        self.end = end
    }

    var peek: UInt8 { index < end ? base[index] : 0 }

    mutating func skipWhitespace() {
        while index < end, base[index] == 0x20 || base[index] == 0x0A || base[index] == 0x0D || base[index] == 0x09 { index += 1 }
    }

    mutating func topLevel(_ members: inout [PlainJSONObject.Member], _ separators: inout [Int]) -> Bool {
        skipWhitespace()
        guard peek == UInt8(ascii: "{") else { return false }
        separators.append(index)
        index += 1
        skipWhitespace()
        if peek == UInt8(ascii: "}") {
            separators.append(index)
            index += 1
        } else {
            while true {
                skipWhitespace()
                let keyStart = index + 1
                guard peek == UInt8(ascii: "\""), let keyEscaped = string(), !keyEscaped else { return false }
                let key = keyStart..<(index - 1)
                skipWhitespace()
                guard peek == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
                let valueStart = index
                guard let kind = value(depth: 1) else { return false }
                let isString = kind == .string
                members.append(PlainJSONObject.Member(key: key, value: isString ? (valueStart + 1)..<(index - 1) : valueStart..<index,
                                                      kind: kind, escaped: isString && lastStringEscaped))
                skipWhitespace()
                guard peek == UInt8(ascii: ",") || peek == UInt8(ascii: "}") else { return false }
                separators.append(index)
                index += 1
                if base[index - 1] == UInt8(ascii: "}") { break }
            }
        }
        skipWhitespace()
        return index == end
    }

    /// A value inside a container `depth` levels deep; nil outside the subset.
    mutating func value(depth: Int) -> PlainJSONObject.Kind? {
        switch peek {
        case UInt8(ascii: "\""):
            guard let escaped = string() else { return nil }
            lastStringEscaped = escaped
            return .string
        case UInt8(ascii: "{"):
            return container(depth: depth + 1, close: UInt8(ascii: "}"), keyed: true) ? .object : nil
        case UInt8(ascii: "["):
            return container(depth: depth + 1, close: UInt8(ascii: "]"), keyed: false) ? .array : nil
        case UInt8(ascii: "t"):
            return literal("true") ? .bool : nil
        case UInt8(ascii: "f"):
            return literal("false") ? .bool : nil
        case UInt8(ascii: "n"):
            return literal("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return integer() ? .number : nil
        default:
            return nil
        }
    }

    /// At `{` or `[`: an object's members or an array's elements, nested at most maxJSONDepth.
    mutating func container(depth: Int, close: UInt8, keyed: Bool) -> Bool {
        guard depth <= EventBounds.maxJSONDepth else { return false }
        index += 1
        skipWhitespace()
        if peek == close { index += 1; return true }
        while true {
            skipWhitespace()
            if keyed {
                guard peek == UInt8(ascii: "\""), string() != nil else { return false }
                skipWhitespace()
                guard peek == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
            }
            guard value(depth: depth) != nil else { return false }
            skipWhitespace()
            if peek == close { index += 1; return true }
            guard peek == UInt8(ascii: ",") else { return false }
            index += 1
        }
    }

    /// At `"`: moves past the closing quote. Returns whether the string had an escape; nil for a
    /// control character, a non-ASCII byte, `\u` or an unknown escape, or no closing quote.
    mutating func string() -> Bool? {
        index += 1
        var escaped = false
        while true {
            skipPlainASCII()
            guard index < end else { return nil }
            switch base[index] {
            case UInt8(ascii: "\""):
                index += 1
                return escaped
            case UInt8(ascii: "\\"):
                guard index + 1 < end else { return nil }
                switch base[index + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    index += 2
                    escaped = true
                default:
                    return nil
                }
            default:
                // A control character or a non-ASCII byte: not in the subset.
                return nil
            }
        }
    }

    /// Skips 8 bytes at a time while none is `"`, `\`, a control character or non-ASCII (a
    /// receipt's base64 runs to thousands of such bytes), then byte by byte.
    mutating func skipPlainASCII() {
        index = PlainASCII.wordsEnd(base, from: index, end: end)
        while index < end {
            let byte = base[index]
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") else { return }
            index += 1
        }
    }

    mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard end - index >= count, memcmp(base + index, word.utf8Start, count) == 0 else { return false }
        index += count
        return true
    }

    /// `-?(0|[1-9][0-9]*)` of at most 18 digits, not followed by a fraction or an exponent.
    mutating func integer() -> Bool {
        if peek == UInt8(ascii: "-") { index += 1 }
        let start = index
        while index < end, base[index] >= UInt8(ascii: "0"), base[index] <= UInt8(ascii: "9") { index += 1 }
        let digits = index - start
        guard digits >= 1, digits <= PlainJSONObject.maxIntegerDigits, digits == 1 || base[start] != UInt8(ascii: "0") else { return false }
        return peek != UInt8(ascii: ".") && peek != UInt8(ascii: "e") && peek != UInt8(ascii: "E")
    }
}

extension EdgeChecks {
    /// A V1 notification the full checks accept, read in one pass: its `password` (nil when absent
    /// or null) and the body without it, byte for byte what `V1Secret.removingPassword` makes.
    struct PlainV1 {
        let password: String?
        let withoutPassword: [UInt8]
    }

    /// nil for anything outside `PlainJSONObject`'s subset, a V2 body, or a field the full checks
    /// might refuse: the caller then takes `object` + `notification`, which give the verdict.
    static func plainV1Notification(_ body: [UInt8]) -> PlainV1? {
        guard let object = PlainJSONObject(body), object.member("signedPayload") == nil else { return nil }
        for (key, field) in v1Fields {
            guard let member = object.member(key), member.kind != .null else { continue }
            guard let value = object.sample(member), field.refusal(key, value) == nil else { return nil }
        }
        let password = object.member("password").flatMap { $0.kind == .null ? nil : object.plainText($0) }
        return PlainV1(password: password, withoutPassword: object.removing("password"))
    }

    /// The `user_id` of a receipt upload the full checks accept, read in one pass; nil: take them.
    static func plainReceiptUploadUser(_ body: [UInt8]) -> String? {
        guard let object = PlainJSONObject(body), let member = object.member("user_id"), let user = object.plainText(member),
              !user.isEmpty, EventBounds.identifier(user, field: "user_id") == nil,
              let receipt = object.member("receipt_data"), receipt.kind == .string,
              // Each escape stands for one character: the text is empty exactly when its bytes are.
              !receipt.value.isEmpty else { return nil }
        return user
    }
}

extension PlainJSONObject {
    /// A value of the member's JSON type as `JSONSerialization` would give it, for `Field.refusal`
    /// to judge (strings with their text; an escaped string is nil: not judged here).
    func sample(_ member: Member) -> Any? {
        switch member.kind {
        case .string: plainText(member)
        case .number: NSNumber(value: 0)
        case .bool: NSNumber(value: true)
        case .null: NSNull()
        case .object: [String: Any]()
        case .array: [Any]()
        }
    }
}
