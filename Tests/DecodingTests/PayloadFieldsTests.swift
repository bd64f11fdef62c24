@testable import AppleDecoding
import Crypto
import Domain
import Foundation
import TestSupport
import XCTest

/// `PayloadFields` (a performance measure) must answer every question the verifier and the
/// decoders ask exactly as the dictionary path (`JSONObjectReader.objectOrFallback`, then
/// `JSONFields`) answered it, or decline so that the dictionary path answers: same verdict on
/// whether a payload is a JSON object, same strings, numbers, booleans, invalid-number and
/// wrong-type verdicts, same effective date and registered-claim problems, same facts.
final class PayloadFieldsTests: XCTestCase {
    /// What the code did before `PayloadFields`: the dictionary, or nil (not a JSON object).
    private func dictionaryPath(_ bytes: [UInt8]) -> JSONFields? {
        JSONObjectReader.objectOrFallback(bytes).map { JSONFields($0) }
    }

    /// Every answer the decoders can take from an object, for every kept key, nested objects
    /// included (to three levels), as text to compare.
    private func answers(_ fields: JSONFields, level: Int = 0) -> [String] {
        var lines = ["empty \(fields.isEmpty)"]
        for key in PayloadKeys.names {
            guard let value = fields.value(key) else { continue }
            var line = "\(key): s=\(fields.string(key) ?? "-") i=\(fields.int64(key).map(String.init) ?? "-")"
            line += " b=\(fields.bool(key).map(String.init) ?? "-") n=\(fields.invalidNumber([key]) ?? "-")"
            line += " t=\(fields.invalidString([key]) ?? "-") p=\(SignedDataVerifier.pythonInt(value).map(String.init) ?? "-")"
            lines.append(line)
            if let nested = fields.object(key) {
                lines.append(level < 3 ? "{" + answers(nested, level: level + 1).joined(separator: "; ") + "}" : "{…}")
            }
        }
        let date: String
        switch SignedDataVerifier.effectiveDate(fields, now: { Date(timeIntervalSince1970: 7) }) {
        case .success(let value): date = "\(value.timeIntervalSince1970)"
        case .failure(let failure): date = failure.reason
        }
        lines.append("date \(date) claims \(SignedDataVerifier.claimProblem(fields, now: Date(timeIntervalSince1970: 1_700_000_000)) ?? "-")")
        lines.append("transaction \(String(describing: V2Facts.transaction(fields)))")
        lines.append("renewal \(String(describing: V2Facts.renewal(fields)))")
        return lines
    }

    /// Same verdict and same answers as the dictionary path; returns whether the reader read it.
    @discardableResult
    private func assertSameAnswers(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) -> Bool {
        let text = String(decoding: bytes.prefix(300), as: UTF8.self)
        let old = dictionaryPath(bytes)
        let new = SignedPayload(bytes)
        XCTAssertEqual(new == nil, old == nil, "verdict on \(text)", file: file, line: line)
        if let old, let new {
            XCTAssertEqual(answers(new.fields), answers(old), text, file: file, line: line)
            XCTAssertEqual(answers(JSONFields(new.object)), answers(old), "whole object of \(text)", file: file, line: line)
        }
        return PayloadFields.read(bytes) != nil
    }

    private func json(_ object: [String: Any]) -> [UInt8] {
        [UInt8](try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    func testApplesPayloadsReadAsTheDictionaryPathReadsThem() throws {
        let transaction = V2Payloads.transaction(extra: [
            "revocationDate": 1_698_149_500_000, "revocationReason": 1, "isUpgraded": true, "offerIdentifier": "intro",
            "revocationType": "REFUND_FULL", "revocationPercentage": 100_000, "offerPeriod": "P1M",
            "appTransactionId": "704289572311513301", "billingPlanType": "MONTHLY",
            "commitmentInfo": ["billingPeriodNumber": 2, "totalBillingPeriods": 12, "commitmentExpiresDate": 1_730_000_000_000,
                               "commitmentPrice": "x"]])
        let renewal = V2Payloads.renewal().merging(["gracePeriodExpiresDate": 1_698_149_000_000, "renewalDate": 1_698_149_000_000,
                                                    "renewalPrice": 9990, "currency": "USD", "offerType": 2, "offerIdentifier": "p"]) { $1 }
        let notification = V2Payloads.notification(signedTransaction: "a.b.c", signedRenewal: "d.e.f")
        let summary: [String: Any] = ["notificationType": "RENEWAL_EXTENSION", "subtype": "SUMMARY", "notificationUUID": "u",
                                      "signedDate": 1_698_148_900_000,
                                      "summary": ["requestIdentifier": "r", "environment": "Sandbox", "appAppleId": 41234,
                                                  "bundleId": "com.example", "productId": "p", "storefrontCountryCodes": ["USA", "CAN"],
                                                  "failedCount": 0, "succeededCount": 4]]
        let token: [String: Any] = ["notificationType": "EXTERNAL_PURCHASE_TOKEN", "subtype": "UNREPORTED", "signedDate": 1,
                                    "externalPurchaseToken": ["externalPurchaseId": "SANDBOX_b2158121", "tokenCreationDate": 1_698_148_950_000,
                                                              "appAppleId": 55_555, "bundleId": "com.example"]]
        for payload in [transaction, renewal, notification, summary, token] {
            XCTAssertTrue(assertSameAnswers(json(payload)), "the reader reads Apple's payloads: \(payload)")
        }
        for name in ["signedTransaction", "signedRenewalInfo", "signedNotification", "testNotification", "signedSummaryNotification",
                     "signedExternalPurchaseTokenNotification", "signedConsumptionRequestNotification"] {
            guard let token = try? Fixtures.text("apple-lib/mock_signed_data/\(name)") else { continue }
            let segments = token.split(separator: ".")
            let payload = try XCTUnwrap(Base64URL.decode(String(segments[1])))
            XCTAssertTrue(assertSameAnswers(payload), name)
        }
    }

    func testEdgesOfTheSubset() {
        let cases: [(String, readsIt: Bool)] = [
            (#"{}"#, true), (#"{"aud":{}}"#, true), (#"{"aud":{"x":1}}"#, true), (#"{"aud":[]}"#, true), (#"{"aud":[0]}"#, true),
            (#"{"aud":" "}"#, true), (#"{"aud":0}"#, true), (#"{"aud":false}"#, true), (#"{"aud":null}"#, true),
            (#"{"sub":1}"#, true), (#"{"jti":null}"#, true), (#"{"iat":"12 "}"#, true), (#"{"iat":true}"#, true),
            (#"{"exp":99999999999}"#, true), (#"{"nbf":-0}"#, true), (#"{"signedDate":null,"receiptCreationDate":"1698148900000"}"#, true),
            (#"{"signedDate":"x"}"#, true), (#"{"signedDate":[]}"#, true), (#"{"signedDate":-1500}"#, true),
            (#"{"purchaseDate":999999999999999999,"quantity":-999999999999999999}"#, true),
            (#"{"transactionId":"1","productId":"p","purchaseDate":"1698148900000"}"#, true),
            (#"{"transactionId":1,"productId":true,"purchaseDate":"12abc"}"#, true),
            (#"{"transactionId":"1","productId":"p","purchaseDate":"","quantity":""}"#, true),
            (#"{"autoRenewStatus":"TRUE","isUpgraded":"0","isInBillingRetryPeriod":2,"originalTransactionId":"o"}"#, true),
            (#"{"data":{"data":{"data":{"bundleId":"x"}}},"summary":"s","appData":[{"bundleId":"y"}]}"#, true),
            (#"{"commitmentInfo":{"commitmentPrice":[],"billingPeriodNumber":{}},"transactionId":"t","productId":"p","purchaseDate":1}"#, true),
            // Repeated keys: one that is kept declines (the dictionary path keeps the last); another is only checked.
            (#"{"transactionId":"1","transactionId":"2"}"#, false), (#"{"data":{"status":1,"status":2}}"#, false),
            (#"{"version":"1","version":"2","bundleId":"b"}"#, true), (#"{"x":{"a":1,"a":2}}"#, true),
            // Escapes: the short ones are read; keys with one are other keys; \u goes to the dictionary path.
            (#"{"bundleId":"a\"b\\c\/d\b\f\n\r\t"}"#, true), (#"{"bundle\/Id":"x","bundleId":"y"}"#, true),
            (#"{"bundleId\n":"x"}"#, true), (#"{"bundleId":"\u0041"}"#, false), (#"{"bundleId":"\ud83d\ude00"}"#, false),
            (#"{"bundleId":"\ud83d"}"#, false), (#"{"bundle\u0049d":"x"}"#, false), (#"{"x":"\u0041"}"#, false),
            (#"{"bundleId":"\x"}"#, false), (#"{"x":"\x"}"#, false), (#"{"x\q":1}"#, false),
            // Numbers the subset leaves to JSONSerialization.
            (#"{"purchaseDate":1698148900000.5}"#, false), (#"{"purchaseDate":1e3}"#, false), (#"{"x":1E3}"#, false),
            (#"{"purchaseDate":1234567890123456789}"#, false), (#"{"x":-1234567890123456789}"#, false),
            (#"{"purchaseDate":0123}"#, false), (#"{"x":-}"#, false), (#"{"x":01}"#, false),
            (#"{"purchaseDate":12345678901234567890123456789}"#, false),
            // Malformed and odd documents.
            (#"{"a":1,}"#, false), (#"{"a":1"#, false), (#"{"a" 1}"#, false), (#"{a:1}"#, false), (#"[1]"#, false), (#""x""#, false),
            ("", false), (" ", false), (#"{"a":tru}"#, false), (#"{"a":nul}"#, false), (#"{"x":[1,]}"#, false), (#"{"x":[,1]}"#, false),
            (#"{"x":{"a"}}"#, false), (#"{"a":1}x"#, false), (#"{"a":1}{}"#, false), (" \r\n\t{ \"bundleId\" : \"b\" }\n", true),
            ("\u{FEFF}{}", false), (#"{"bundleId":"é"}"#, false), ("{\"bundleId\":\"\u{01}\"}", false), ("{\"x\":\"\u{7F}\"}", true),
        ]
        for (text, readsIt) in cases {
            XCTAssertEqual(assertSameAnswers(Array(text.utf8)), readsIt, text)
        }
        for bytes: [UInt8] in [[0x7B, 0x22, 0x78, 0x22, 0x3A, 0x22, 0xFF, 0x22, 0x7D], [0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D],
                               [0x7B, 0x00, 0x7D], [0x7B, 0x22, 0x78, 0x22, 0x3A, 0x31, 0x7D, 0x00],
                               Array(#"{"bundleId":"b"}"#.utf16).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }] {
            XCTAssertFalse(assertSameAnswers(bytes), "\(bytes)")
        }
    }

    func testDepthIsTheReadersDepth() {
        for (key, inner) in [("data", #"{"bundleId":"b"}"#), ("x", "[]"), ("aud", "{}")] {
            for depth in [JSONObjectReader.maxDepth - 2, JSONObjectReader.maxDepth - 1, JSONObjectReader.maxDepth, JSONObjectReader.maxDepth + 1] {
                let text = String(repeating: #"{"\#(key)":"#, count: depth) + inner + String(repeating: "}", count: depth)
                XCTAssertEqual(assertSameAnswers(Array(text.utf8)), depth < JSONObjectReader.maxDepth, "\(key) \(depth)")
                let list = String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
                XCTAssertEqual(assertSameAnswers(Array(#"{"\#(key)":\#(list)}"#.utf8)), depth < JSONObjectReader.maxDepth, "list \(key) \(depth)")
            }
        }
        // Far beyond both readers' depth: declined without recursing on.
        XCTAssertFalse(assertSameAnswers(Array((String(repeating: #"{"data":"#, count: 5_000)).utf8)))
    }

    /// Long values are skipped 8 bytes at a time: a quote, escape, control or non-ASCII byte at every
    /// offset of a word must still be seen, in kept and in skipped values and in keys.
    func testLongStringsAtEveryWordOffset() {
        let run = String(repeating: "MIIEMDCCA7agAwIBAgIQaPoPldvpSoEw+", count: 3)
        for offset in 0..<17 {
            let head = String(run.prefix(offset)), tail = String(run.dropFirst(offset))
            for odd in ["", #"\/"#, #"\""#, #"\\"#, "\u{01}", "\u{1F}", "é", #"\u0041"#, "\"", "\\"] {
                for key in ["signedTransactionInfo", "x", "\(head)\(odd)\(tail)"] {
                    assertSameAnswers(Array("{\"\(key)\":\"\(head)\(odd)\(tail)\",\"bundleId\":\"\(head)\"}".utf8))
                }
            }
        }
    }

    /// Generated documents, most of them Apple-like objects with the kept keys, then mutated
    /// (cut, bytes flipped, inserted, repeated keys, odd numbers and escapes): the verdicts and
    /// answers of both paths must agree on every one, and the reader must read a good share.
    func testGeneratedAndHostileDocumentsAgree() {
        var random = SplitMix64(seed: 0x5EED_0F_DEC6)
        var read = 0, objects = 0
        let count = 6_000
        for round in 0..<count {
            var bytes = Array(Generator.document(&random).utf8)
            if round % 3 == 0 { Generator.mutate(&bytes, &random) }
            if assertSameAnswers(bytes) { read += 1 }
            if dictionaryPath(bytes) != nil { objects += 1 }
        }
        XCTAssertGreaterThan(read, count / 8, "the reader read too few of the generated documents to tell anything")
        XCTAssertGreaterThan(objects - read, count / 20, "too few documents went the dictionary way")
    }

    /// The decoders' answers on real signed data are the same through either path.
    func testNotificationDecodingIsUnchanged() throws {
        let pki = try TestPKI.load()
        let verifier = try pki.verifier()
        let transaction = try pki.sign(V2Payloads.transaction(extra: ["revocationDate": 1_698_149_500_000, "revocationReason": 0]))
        let renewal = try pki.sign(V2Payloads.renewal())
        let token = try pki.sign(V2Payloads.notification(signedTransaction: transaction, signedRenewal: renewal))
        let notification = try verifier.verifyNotification(token).get()
        let verifiedTransaction = try verifier.verifyTransaction(transaction).get()
        let verifiedRenewal = try verifier.verifyRenewalInfo(renewal).get()
        XCTAssertEqual(answers(notification.fields), answers(JSONFields(notification.payload)))
        XCTAssertEqual(V2Facts.transaction(verifiedTransaction.fields), V2Facts.transaction(JSONFields(verifiedTransaction.payload)))
        XCTAssertNotNil(V2Facts.transaction(verifiedTransaction.fields)?.cancellationDateMs)
        XCTAssertEqual(V2Facts.renewal(verifiedRenewal.fields), V2Facts.renewal(JSONFields(verifiedRenewal.payload)))
        XCTAssertEqual(notification.payload["notificationUUID"] as? String, "002e14d5-51f5-4503-b5a8-c3a1af68eb20", "the whole object stays available")
    }
}

private enum Generator {
    static let otherKeys = ["version", "bundleVersion", "x", "", "a b", #"bundle\/Id"#, #"q\"q"#, "é", #"\u0062undleId"#, "BUNDLEID",
                            "bundleI", "bundleIdd", "storefrontCountryCodes", "signedDat", "dataa"]

    static func document(_ random: inout SplitMix64) -> String {
        switch random.next() % 10 {
        case 0: return value(&random, depth: 0)
        case 1: return "[" + value(&random, depth: 1) + "]"
        default: return object(&random, depth: 0)
        }
    }

    static func object(_ random: inout SplitMix64, depth: Int) -> String {
        let count = Int(random.next() % (depth == 0 ? 12 : 5))
        var members: [String] = []
        var used: [String] = []
        for _ in 0..<count {
            let key: String
            let pick = random.next() % 10
            if pick < 7 {
                key = PayloadKeys.names.randomElement(using: &random)!
            } else if pick < 9 || used.isEmpty {
                key = otherKeys.randomElement(using: &random)!
            } else {
                key = used.randomElement(using: &random)!  // a repeated key
            }
            used.append(key)
            let value = PayloadKeys.names.contains(key) && random.next() % 3 == 0 && ["data", "summary", "appData", "commitmentInfo", "externalPurchaseToken", "aud"].contains(key) && depth < 3
                ? object(&random, depth: depth + 1) : self.value(&random, depth: depth + 1)
            members.append("\"\(key)\"\(space(&random)):\(space(&random))\(value)")
        }
        return "{" + space(&random) + members.joined(separator: "," + space(&random)) + space(&random) + "}"
    }

    static func space(_ random: inout SplitMix64) -> String {
        switch random.next() % 12 {
        case 0: return " "
        case 1: return "\n\t "
        case 2: return "\r\n"
        default: return ""
        }
    }

    /// Values inside the reader's subset, and (a few) outside it.
    static let numbers = ["0", "-0", "1", "-1", "7", "1698148900000", "999999999999999999", "-999999999999999999", "1698148900"]
    static let oddNumbers = ["1000000000000000000", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                             "12345678901234567890123456789", "1.5", "1698148900000.7297", "-0.0", "1e3", "1E-2", "2.5e10",
                             "01", "-", "1.", ".5", "1e", "0x10", "Infinity", "NaN", "tru", "nul", "True"]
    static let strings = [#""""#, #""Sandbox""#, #""Production""#, #""com.example""#, #""1698148900000""#, #""12abc""#, #"" 12 ""#,
                          #""true""#, #""FALSE""#, #""1""#, #""0""#, #""FREE_TRIAL""#, #""SANDBOX_123""#, #""9.3e18""#,
                          #""1e3""#, #""-5""#, #""a\"b\\c\/d\b\f\n\r\t""#, "\"\u{7F}\"",
                          "\"" + String(repeating: "MIIEMDCCA7agAwIBAgIQaPoPldvpSoEw", count: 4) + "\""]
    static let oddStrings = [#""\u0041\u00e9""#, #""\ud83d\ude00""#, #""\ud83d""#, #""\ude00x""#, #""\u00""#, #""\x""#,
                             "\"é\"", "\"tab\there\"", #""x"#]

    static func value(_ random: inout SplitMix64, depth: Int) -> String {
        switch random.next() % 100 {
        case 0..<40: return strings.randomElement(using: &random)!
        case 40..<65: return numbers.randomElement(using: &random)!
        case 65..<72: return ["true", "false", "null"].randomElement(using: &random)!
        case 72..<80:
            guard depth < 4 else { return "[]" }
            let elements = (0..<Int(random.next() % 4)).map { _ in value(&random, depth: depth + 1) }
            return "[" + elements.joined(separator: ",") + "]"
        case 80..<86: return depth < 4 ? object(&random, depth: depth + 1) : "{}"
        case 86..<90: return oddNumbers.randomElement(using: &random)!
        case 90..<95: return oddStrings.randomElement(using: &random)!
        case 95..<98:
            return String(repeating: "[", count: 29 + Int(random.next() % 6)) + String(repeating: "]", count: 29 + Int(random.next() % 6))
        default:
            return String(repeating: #"{"data":"#, count: 27 + Int(random.next() % 8)) + "1" + String(repeating: "}", count: 27 + Int(random.next() % 8))
        }
    }

    static func mutate(_ bytes: inout [UInt8], _ random: inout SplitMix64) {
        guard !bytes.isEmpty else { return }
        let at = Int(random.next() % UInt64(bytes.count))
        switch random.next() % 8 {
        case 0: bytes.removeSubrange(at...)
        case 1: bytes[at] ^= UInt8(truncatingIfNeeded: 1 << (random.next() % 8))
        case 2: bytes.insert([0x22, 0x5C, 0x2C, 0x3A, 0x7B, 0x7D, 0x5B, 0x5D, 0x00, 0xFF, 0xC3, 0x20][Int(random.next() % 12)], at: at)
        case 3: bytes.remove(at: at)
        case 4: bytes += Array([",", "}", " ", "x", "{}", "\u{0}"][Int(random.next() % 6)].utf8)
        case 5: bytes[at] = UInt8(truncatingIfNeeded: random.next())
        case 6: bytes = Array((#"{"bundleId":"dup","#.utf8)) + bytes.dropFirst()
        default:
            let copy = Array(bytes[at..<min(bytes.count, at + Int(random.next() % 40))])
            bytes.insert(contentsOf: copy, at: Int(random.next() % UInt64(bytes.count)))
        }
    }
}
