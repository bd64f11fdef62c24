@testable import Ingest
import Foundation
import TestSupport
import XCTest

/// The one-pass edge checks of V1 notifications and receipt uploads (`PlainJSONObject`) against
/// the full checks (`EdgeChecks.object` + `notification` / `receiptUpload`, `V1Secret.removingPassword`):
/// whatever the one pass takes, the full checks accept with the same password, user and stored
/// bytes; what it leaves (nil) goes to them, so refusals and their reasons are theirs.
final class IngestPlainBodyTests: XCTestCase {
    static let appleV1 = #"""
    {"notification_type":"INITIAL_BUY","password":"s3cret","environment":"PROD","bid":"com.example.app","bvrs":"1.2.3",
     "original_transaction_id":"1000000123456789","auto_renew_status":"true","auto_renew_product_id":"vip.a.1m",
     "auto_renew_adam_id":"123456789","auto_renew_status_change_date_ms":"1700000000000",
     "unified_receipt":{"status":0,"environment":"Production","latest_receipt":"MIIT\/ab+cd==",
       "latest_receipt_info":[{"product_id":"vip.a.1m","quantity":"1","is_trial_period":"false","expires_date_ms":"1702592000000",
         "transaction_id":"1000000123456789","original_transaction_id":"1000000123456789","web_order_line_item_id":"1000000000000001"}],
       "pending_renewal_info":[{"auto_renew_status":"1","auto_renew_product_id":"vip.a.1m","original_transaction_id":"1000000123456789"}]}}
    """#

    static let upload = #"{"app_version":"1.2.3","product_id":"vip.a.1m","receipt_data":"MIIT\/ab+cd==","transaction_date":1700000000000,"transaction_id":"1000000123456789","user_id":"3f2a8c1e-user"}"#

    func testApplesShapesTakeTheOnePassWithTheFullChecksAnswers() throws {
        let v1 = Array(Self.appleV1.utf8)
        let plain = try XCTUnwrap(EdgeChecks.plainV1Notification(v1))
        XCTAssertEqual(plain.password, "s3cret")
        XCTAssertEqual(plain.withoutPassword, V1Secret.removingPassword(v1))
        let stored = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(plain.withoutPassword)) as? [String: Any])
        XCTAssertNil(stored["password"])
        XCTAssertEqual(stored["notification_type"] as? String, "INITIAL_BUY")

        XCTAssertEqual(EdgeChecks.plainReceiptUploadUser(Array(Self.upload.utf8)), "3f2a8c1e-user")
        // Without a password, or with null, the body is stored as it came apart from that member.
        let nullPassword = Array(#"{"password":null,"notification_type":"DID_RENEW"}"#.utf8)
        XCTAssertEqual(EdgeChecks.plainV1Notification(nullPassword)?.password, nil)
        XCTAssertEqual(EdgeChecks.plainV1Notification(nullPassword)?.withoutPassword, Array(#"{"notification_type":"DID_RENEW"}"#.utf8))
        XCTAssertEqual(EdgeChecks.plainV1Notification(Array(" { } ".utf8))?.withoutPassword, Array(" { } ".utf8))
    }

    /// Bodies the one pass must leave to the full checks: escaped or repeated keys, refusals,
    /// JSON outside its subset, malformed text.
    func testHostileAndOddBodiesAreLeftToTheFullChecks() {
        let v1Left = [
            #"{"pass\u0077ord":"s3cret","notification_type":"RENEWAL"}"#, #"{"password":"a","password":"b"}"#,
            #"{"notification_type":"RENEWAL","notification_type":"CANCEL"}"#, #"{"signedPayload":"a.b.c","x":1}"#,
            #"{"notification_type":7}"#, #"{"bid":"\#(String(repeating: "x", count: 300))"}"#,
            #"{"unified_receipt":[]}"#, #"{"latest_receipt_info":"x"}"#, #"{"password":"caf\u00e9"}"#, "{\"password\":\"caf\u{e9}\"}",
            "{\"environment\":\"a\u{7f}b\"}", "{\"environment\":\"a\u{1}b\"}", #"{"password":"a\/b"}"#, #"{"n":1.5}"#, #"{"n":1e3}"#,
            #"{"n":01}"#, #"{"n":1234567890123456789}"#, #"{"n":-}"#, #"{"n":tru}"#, #"{"a":1,}"#, #"{"a":1"#, #"{"a" 1}"#, #"["a"]"#,
            #"{"a":1} x"#, "", "{", "\u{feff}{}", String(repeating: "[", count: 40) + String(repeating: "]", count: 40),
            #"{"a":"# + String(repeating: "[", count: 32) + String(repeating: "]", count: 32) + "}",
        ]
        for body in v1Left { XCTAssertNil(EdgeChecks.plainV1Notification(Array(body.utf8)), body) }
        // Many members (a hostile body would otherwise make the repeated-key test quadratic).
        let members = { (count: Int) in "{" + (0..<count).map { #""k\#($0)":1"# }.joined(separator: ",") + "}" }
        XCTAssertNotNil(EdgeChecks.plainV1Notification(Array(members(PlainJSONObject.maxMembers).utf8)))
        XCTAssertNil(EdgeChecks.plainV1Notification(Array(members(PlainJSONObject.maxMembers + 1).utf8)))
        XCTAssertNil(EdgeChecks.plainV1Notification(Array(members(100_000).utf8)))
        let receiptLeft = [
            #"{"user_id":"","receipt_data":"x"}"#, #"{"user_id":"u","receipt_data":""}"#, #"{"user_id":"u"}"#, #"{"receipt_data":"x"}"#,
            #"{"user_id":7,"receipt_data":"x"}"#, #"{"user_id":"u\/v","receipt_data":"x"}"#, #"{"user_id":"u","receipt_data":7}"#,
            #"{"user_id":"u","user_id":"v","receipt_data":"x"}"#, #"{"user_\u0069d":"u","receipt_data":"x"}"#,
            #"{"user_id":"\#(String(repeating: "u", count: 256))","receipt_data":"x"}"#, "{\"user_id\":\"u\u{7f}\",\"receipt_data\":\"x\"}",
        ]
        for body in receiptLeft { XCTAssertNil(EdgeChecks.plainReceiptUploadUser(Array(body.utf8)), body) }
        // Nested depth counts as JSONDepth counts it: 32 levels are taken, 33 are not.
        let nested = { (levels: Int) in #"{"unified_receipt":"# + String(repeating: "[", count: levels - 2) + "{}" + String(repeating: "]", count: levels - 2) + "}" }
        XCTAssertNil(EdgeChecks.plainV1Notification(Array(nested(33).utf8)))
        XCTAssertNotNil(EdgeChecks.plainV1Notification(Array(#"{"x":"# .utf8) + Array(String(repeating: "[", count: 31).utf8)
                        + Array(String(repeating: "]", count: 31).utf8) + Array("}".utf8)))
    }

    /// Generated bodies, plain and hostile, then mutated byte by byte: every body the one pass
    /// takes is accepted by the full checks with the same facts; and for the plain ones the one
    /// pass takes exactly what the full checks accept.
    func testGeneratedBodiesAgreeWithTheFullChecks() throws {
        var random = SplitMix64(seed: 0x1A6E_5701)
        var taken = (v1: 0, receipt: 0), plainBodies = 0
        for round in 0..<6_000 {
            let hostile = round % 2 == 1
            var generator = BodyGenerator(random: random, hostile: hostile)
            let text = generator.object(depth: 1)
            random = generator.random
            let bytes = hostile && round % 4 == 3 ? mutate(Array(text.utf8), &random) : Array(text.utf8)
            let body = String(decoding: bytes, as: UTF8.self)
            let full = EdgeChecks.object(bytes)
            let fullV1 = full.flatMap(EdgeChecks.notification)
            let fullReceipt = full.flatMap(EdgeChecks.receiptUpload)
            if let plain = EdgeChecks.plainV1Notification(bytes) {
                taken.v1 += 1
                guard case .success(let object) = fullV1 else { return XCTFail("one pass took, full checks refused: \(body)") }
                XCTAssertNil(object["signedPayload"], body)
                XCTAssertEqual(plain.password, object["password"] as? String, body)
                XCTAssertEqual(plain.withoutPassword, V1Secret.removingPassword(bytes), body)
            }
            if let user = EdgeChecks.plainReceiptUploadUser(bytes) {
                taken.receipt += 1
                guard case .success(let object) = fullReceipt else { return XCTFail("one pass took, full checks refused: \(body)") }
                XCTAssertEqual(user, object["user_id"] as? String, body)
            }
            if !hostile {
                plainBodies += 1
                let v1Accepted = if case .success(let object) = fullV1, object["signedPayload"] == nil { true } else { false }
                let receiptAccepted = if case .success = fullReceipt { true } else { false }
                XCTAssertEqual(EdgeChecks.plainV1Notification(bytes) != nil, v1Accepted, body)
                XCTAssertEqual(EdgeChecks.plainReceiptUploadUser(bytes) != nil, receiptAccepted, body)
            }
        }
        // The generators reach both verdicts often enough for the comparison to mean something.
        XCTAssertGreaterThan(taken.v1, 450, "V1 bodies taken")
        XCTAssertGreaterThan(taken.receipt, 200, "uploads taken")
        XCTAssertEqual(plainBodies, 3_000)
    }

    private func mutate(_ body: [UInt8], _ random: inout SplitMix64) -> [UInt8] {
        var bytes = body
        let specials: [UInt8] = [0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x5D, 0x2C, 0x3A, 0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF, 0x20, 0x75, 0x30, 0x2E]
        for _ in 0..<(random.below(3) + 1) where !bytes.isEmpty {
            let at = random.below(bytes.count)
            switch random.below(4) {
            case 0: bytes.remove(at: at)
            case 1: bytes.insert(specials[random.below(specials.count)], at: at)
            case 2: bytes[at] = specials[random.below(specials.count)]
            default: bytes = Array(bytes[..<at])
            }
        }
        return bytes
    }
}

extension SplitMix64 {
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}

/// Random JSON objects keyed mostly by the names the edge reads. Plain ones stay inside the one
/// pass's subset (no escapes in the text fields the edge reads) and vary only what decides the
/// verdict: types, lengths, emptiness, nesting; hostile ones add everything else: `\u`, non-ASCII,
/// control bytes, floats, long integers, repeated keys, deeper nesting.
struct BodyGenerator {
    var random: SplitMix64
    let hostile: Bool
    /// Top-level keys whose string values the edge reads as text: plain bodies give them no escapes.
    static let textKeys: Set<String> = ["notification_type", "password", "environment", "bvrs", "bid", "auto_renew_product_id",
                                        "original_transaction_id", "auto_renew_status", "auto_renew_status_change_date_ms", "user_id"]
    static let keys = ["notification_type", "password", "environment", "bvrs", "bid", "auto_renew_product_id", "original_transaction_id",
                       "auto_renew_status", "auto_renew_status_change_date_ms", "unified_receipt", "latest_receipt_info",
                       "latest_expired_receipt_info", "user_id", "receipt_data", "signedPayload", "latest_receipt", "x"]

    mutating func object(depth: Int) -> String {
        var keys = Self.keys.filter { _ in random.chance(depth == 1 ? 45 : 15) }
        if hostile, random.chance(10), let key = keys.first { keys.append(key) }
        if depth > 1, random.chance(30) { keys.append("k\(random.below(5))") }
        let members = keys.shuffled(using: &random).map { key in "\(space())\"\(key)\"\(space()):\(space())\(value(for: key, depth: depth))\(space())" }
        return "\(space()){\(members.joined(separator: ","))}\(space())"
    }

    mutating func value(for key: String, depth: Int) -> String {
        if depth == 1, !hostile, Self.textKeys.contains(key) {
            // Plain: a text field without escapes, or another type (both verdicts come up).
            return random.chance(70) ? string(escapes: false) : anyValue(depth: depth, escapes: false)
        }
        // The checked fields mostly get their own type, so both verdicts come up.
        if depth == 1, random.chance(70) {
            switch key {
            case "unified_receipt": return object(depth: depth + 1)
            case "latest_receipt_info", "latest_expired_receipt_info": return random.chance(50) ? object(depth: depth + 1) : array(depth: depth + 1)
            case "auto_renew_status": return random.chance(50) ? "true" : string()
            case "original_transaction_id", "auto_renew_status_change_date_ms": return random.chance(50) ? integer() : string()
            default: return string()
            }
        }
        return anyValue(depth: depth)
    }

    mutating func anyValue(depth: Int, escapes: Bool = true) -> String {
        let limit = hostile && random.chance(3) ? 40 : 34
        switch random.below(depth >= limit ? 5 : 7) {
        case 0: return string(escapes: escapes)
        case 1: return integer()
        case 2: return ["true", "false", "null"][random.below(3)]
        case 3: return hostile && random.chance(40) ? ["1.5", "-0.25", "1e3", "2E-2", "12345678901234567890", "-0", "0"][random.below(7)] : integer()
        case 4: return string(escapes: escapes)
        case 5: return object(depth: depth + 1)
        default: return array(depth: depth + 1)
        }
    }

    mutating func array(depth: Int) -> String {
        let count = random.below(4)
        var items: [String] = []
        for _ in 0..<count { items.append(anyValue(depth: depth)) }
        return "[\(space())\(items.joined(separator: ",\(space())"))\(space())]"
    }

    mutating func integer() -> String {
        // Plain: at most 18 digits (longer ones JSONSerialization reads by rules of its own).
        let digits = random.below(hostile && random.chance(10) ? 20 : 14) + 1
        var text = random.chance(20) ? "-" : ""
        text += String(random.below(9) + 1)
        for _ in 1..<digits { text += String(random.below(10)) }
        return text
    }

    mutating func string(escapes: Bool = true) -> String {
        if random.chance(8) { return "\"\"" }
        let length = random.chance(5) ? 240 + random.below(40) : random.below(24)
        var text = ""
        for _ in 0..<length {
            switch random.below(hostile ? 40 : 60) + (escapes ? 0 : 3) {
            case 0: text += #"\/"#
            case 1: text += #"\""#
            case 2: text += #"\n"#
            case 3: text += hostile ? #"\u00e9"# : "a"
            case 4: text += hostile ? "é" : "b"
            case 5: text += hostile ? "\u{7f}" : "c"
            case 6: text += hostile ? #"\ud800"# : "-"
            default: text.append(Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(random.below(26)))))
            }
        }
        return "\"\(text)\""
    }

    mutating func space() -> String {
        guard random.chance(15) else { return "" }
        return [" ", "\n", "\t", "\r\n", "  "][random.below(5)]
    }
}

