import Foundation

/// Lenient access to Apple's JSON: the same field arrives as a string ("1500973280000", "true", "1")
/// in V1 bodies and verifyReceipt, and as a number or bool elsewhere. Either over a dictionary from
/// JSONSerialization / `JSONObjectReader`, or over the fields `PayloadFields` read from a signed
/// payload; the accessors answer the same for the same JSON.
struct JSONFields {
    private enum Storage {
        case dictionary([String: Any])
        case payload(PayloadFields)
    }

    private let storage: Storage

    init(_ object: [String: Any]) { storage = .dictionary(object) }

    init(_ fields: PayloadFields) { storage = .payload(fields) }

    init?(_ any: Any?) {
        guard let object = any as? [String: Any] else { return nil }
        storage = .dictionary(object)
    }

    /// A field's value in the kinds the accessors tell apart. `number` is JSONSerialization's
    /// NSNumber (numbers and booleans); `integer` and `bool` are what `PayloadFields` reads where
    /// it would have made an NSNumber of that integer or boolean.
    enum Value {
        case text(String)
        case number(NSNumber)
        case integer(Int64)
        case bool(Bool)
        case null
        case list(isEmpty: Bool)
        case object(JSONFields)
        case other
    }

    /// The value of `key`, nil if absent; the cheap type tests first: `as? String` on an NSNumber
    /// (which never is one) goes through the runtime's bridging lookups to fail, and `as? NSNumber`
    /// on a Swift string first bridges it to an NSString.
    func value(_ key: String) -> Value? {
        switch storage {
        case .dictionary(let object):
            return object[key].map(Self.value)
        case .payload(let fields):
            switch fields.value(key) {
            case nil: return nil
            case .text(let text): return .text(text)
            case .integer(let integer): return .integer(integer)
            case .bool(let bool): return .bool(bool)
            case .null: return .null
            case .list(let isEmpty): return .list(isEmpty: isEmpty)
            case .object(let nested): return .object(JSONFields(nested))
            }
        }
    }

    private static func value(_ any: Any) -> Value {
        if type(of: any) is NSNumber.Type, let number = any as? NSNumber { return .number(number) }
        if let text = any as? String { return .text(text) }
        if isNull(any) { return .null }
        if let object = any as? [String: Any] { return .object(JSONFields(object)) }
        if let list = any as? [Any] { return .list(isEmpty: list.isEmpty) }
        return .other
    }

    /// Whether the object has no member (Python's truthiness of a claim).
    var isEmpty: Bool {
        switch storage {
        case .dictionary(let object): return object.isEmpty
        case .payload(let fields): return fields.isEmpty
        }
    }

    func string(_ key: String) -> String? { value(key).flatMap(Self.string) }

    /// An optional text field, where Apple's V1 bodies and receipts send "" for a value they leave out.
    func nonEmptyString(_ key: String) -> String? { string(key).flatMap { $0.isEmpty ? nil : $0 } }

    private static func string(_ value: Value) -> String? {
        switch value {
        case .text(let s): return s
        case .number(let n): return n.stringValue
        case .integer(let i): return String(i)
        case .bool(let b): return b ? "1" : "0"  // NSNumber(value: true).stringValue
        default: return nil
        }
    }

    func int64(_ key: String) -> Int64? { value(key).flatMap(Self.int64) }

    private static func int64(_ value: Value) -> Int64? {
        switch value {
        case .text(let s): return Int64(s) ?? Double(s).flatMap(int64)
        case .number(let n): return int64(n.doubleValue).map { _ in Int64(truncating: n) }  // fractional ms (Xcode) truncate
        case .integer(let i): return i
        case .bool(let b): return b ? 1 : 0
        default: return nil
        }
    }

    /// A double that fits in Int64 (truncated), else nil: hostile input like "1745044952000100000000000000"
    /// must be a missing value, never a trap.
    static func int64(_ value: Double) -> Int64? {
        guard value.isFinite, value > -9.2e18, value < 9.2e18 else { return nil }
        return Int64(value)
    }

    func int(_ key: String) -> Int? { int64(key).map { Int($0) } }

    /// The first of `keys` present with a value that is neither text nor a number (an array, an
    /// object): an id of the wrong JSON type refuses the input instead of dropping the transaction.
    func invalidString(_ keys: [String]) -> String? {
        keys.first { key in
            guard let value = value(key) else { return false }
            if case .null = value { return false }
            return Self.string(value) == nil
        }
    }

    /// The first of `keys` present with a value that is not a whole number within Int64 (a 28-digit
    /// value, "12abc", an array): the decoders refuse such an input rather than read the field as
    /// missing, which would silently drop the transaction. Empty strings and null count as absent.
    func invalidNumber(_ keys: [String]) -> String? {
        keys.first { key in
            guard let value = value(key) else { return false }  // one lookup per key
            switch value {
            case .null: return false
            case .text(let text) where text.isEmpty: return false
            default: return Self.int64(value) == nil
            }
        }
    }

    /// "true"/"false" (V1 body), "1"/"0" (receipts), true/false, 1/0.
    func bool(_ key: String) -> Bool? {
        switch value(key) {
        case .text(let s):
            switch s.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: return nil
            }
        case .number(let n): return n.boolValue
        case .integer(let i): return i != 0
        case .bool(let b): return b
        default: return nil
        }
    }

    func object(_ key: String) -> JSONFields? {
        if case .object(let fields) = value(key) { return fields }
        return nil
    }

    /// A copy with `key` set to `text` (a verifyReceipt renewal given the id Apple left out).
    func setting(_ key: String, to text: String) -> JSONFields {
        guard case .dictionary(var object) = storage else {
            assertionFailure("setting(\(key)) on payload fields")
            return self
        }
        object[key] = text
        return JSONFields(object)
    }

    /// Lists of objects (verifyReceipt's `in_app`, `latest_receipt_info`): dictionaries only, as no
    /// field `PayloadFields` keeps is a list that anyone reads.
    func array(_ key: String) -> [JSONFields] {
        guard case .dictionary(let object) = storage else {
            assertionFailure("array(\(key)) on payload fields")
            return []
        }
        return (object[key] as? [Any])?.compactMap { JSONFields($0) } ?? []
    }
}
