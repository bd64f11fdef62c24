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

    func string(_ key: String) -> String? {
        switch object[key] {
        case let s as String: return s
        case let n as NSNumber: return n.stringValue
        default: return nil
        }
    }

    func int64(_ key: String) -> Int64? {
        switch object[key] {
        case let s as String: return Int64(s) ?? Double(s).map { Int64($0) }
        case let n as NSNumber: return Int64(truncating: n)   // fractional ms (Xcode) truncate
        default: return nil
        }
    }

    func int(_ key: String) -> Int? { int64(key).map { Int($0) } }

    /// "true"/"false" (V1 body), "1"/"0" (receipts), true/false, 1/0.
    func bool(_ key: String) -> Bool? {
        switch object[key] {
        case let s as String:
            switch s.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: return nil
            }
        case let n as NSNumber: return n.boolValue
        default: return nil
        }
    }

    func object(_ key: String) -> JSONFields? { JSONFields(object[key]) }
    func array(_ key: String) -> [JSONFields] { (object[key] as? [Any])?.compactMap { JSONFields($0) } ?? [] }
}
