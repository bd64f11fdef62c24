import Foundation

/// Lenient access to Apple's JSON: the same field arrives as a string ("1500973280000", "true", "1")
/// in V1 bodies and verifyReceipt, and as a number or bool elsewhere.
struct JSONFields {
    let object: [String: Any]

    init(_ object: [String: Any]) { self.object = object }

    init?(_ any: Any?) {
        guard let object = any as? [String: Any] else { return nil }
        self.object = object
    }

    /// A value as one of JSONSerialization's scalar kinds, the cheap test first: `as? String` on
    /// an NSNumber (which never is one) goes through the runtime's bridging lookups to fail, and
    /// `as? NSNumber` on a Swift string first bridges it to an NSString.
    private enum Scalar {
        case text(String)
        case number(NSNumber)
        case other
    }

    private func scalar(_ key: String) -> Scalar? { object[key].map(Self.scalar) }

    private static func scalar(_ value: Any) -> Scalar {
        if type(of: value) is NSNumber.Type, let number = value as? NSNumber { return .number(number) }
        if let text = value as? String { return .text(text) }
        return .other
    }

    func string(_ key: String) -> String? {
        switch scalar(key) {
        case .text(let s): return s
        case .number(let n): return n.stringValue
        default: return nil
        }
    }

    func int64(_ key: String) -> Int64? { scalar(key).flatMap(Self.int64) }

    private static func int64(_ scalar: Scalar) -> Int64? {
        switch scalar {
        case .text(let s): return Int64(s) ?? Double(s).flatMap(int64)
        case .number(let n): return int64(n.doubleValue).map { _ in Int64(truncating: n) }  // fractional ms (Xcode) truncate
        case .other: return nil
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
            guard let value = object[key], !isNull(value) else { return false }
            return string(key) == nil
        }
    }

    /// The first of `keys` present with a value that is not a whole number within Int64 (a 28-digit
    /// value, "12abc", an array): the decoders refuse such an input rather than read the field as
    /// missing, which would silently drop the transaction. Empty strings and null count as absent.
    func invalidNumber(_ keys: [String]) -> String? {
        keys.first { key in
            guard let value = object[key], !isNull(value) else { return false }
            let scalar = Self.scalar(value)  // one lookup per key
            if case .text(let text) = scalar, text.isEmpty { return false }
            return Self.int64(scalar) == nil
        }
    }

    /// "true"/"false" (V1 body), "1"/"0" (receipts), true/false, 1/0.
    func bool(_ key: String) -> Bool? {
        switch scalar(key) {
        case .text(let s):
            switch s.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: return nil
            }
        case .number(let n): return n.boolValue
        default: return nil
        }
    }

    func object(_ key: String) -> JSONFields? { JSONFields(object[key]) }
    func array(_ key: String) -> [JSONFields] { (object[key] as? [Any])?.compactMap { JSONFields($0) } ?? [] }
}
