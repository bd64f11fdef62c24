@testable import Domain
import Foundation
import TestSupport
import XCTest

/// `StoredJSONReader` reads the stored states and purchases back without Foundation. What it accepts
/// must read exactly as JSONDecoder reads it; what it does not know it declines (nil), and the store
/// hands that to JSONDecoder. Our own documents, in every layout they are stored in, must never decline.
final class StoredJSONReaderTests: XCTestCase {
    func testOwnDocumentsInEveryStoredLayoutReadAsJSONDecoderReadsThem() throws {
        let (states, purchases) = Self.documents()
        XCTAssertGreaterThan(states.count, 5)
        XCTAssertGreaterThan(purchases.count, 5)
        for state in states {
            for layout in try Self.layouts(state.json, state) {
                let read = try XCTUnwrap(Self.read(SubscriptionState.self, layout), String(decoding: layout, as: UTF8.self))
                XCTAssertEqual(read, try JSONDecoder().decode(SubscriptionState.self, from: Data(layout)))
                XCTAssertEqual(read, state)
            }
        }
        for purchase in purchases {
            for layout in try Self.layouts(purchase.json, purchase) {
                let read = try XCTUnwrap(Self.read(KnownPurchase.self, layout), String(decoding: layout, as: UTF8.self))
                XCTAssertEqual(read, try JSONDecoder().decode(KnownPurchase.self, from: Data(layout)))
                XCTAssertEqual(read, purchase)
            }
        }
    }

    func testEscapesNumbersNullsAndUnknownMembersReadAsJSONDecoderReadsThem() throws {
        let documents = [
            #"{"claims":{"x|y":-9223372036854775808,"z":9223372036854775807},"grants":null,"subscriptionKey":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20AC\ud83d\ude00","userId":null}"#,
            #"{"credited":{"p":-0},"future":{"empty":{},"nested":[1,-2,{"a":[true,false,null,"s"]}]},"recordedCommands":[],"subscriptionKey":"s"}"#,
            #" { "renewal" : { "asOfMs" : 5 , "pendingChange" : null } , "graceEnds" : { "vip" : [ 1 , 2 ] } , "subscriptionKey" : "s" } "#,
            #"{"factPositions":{"p":{"offset":0,"partition":2147483647,"topic":"t"}},"subscriptionKey":"\u0073"}"#,
            // Member names escaped or not ASCII: decoded, matched and ordered as Strings, also next to plain ones.
            #"{"\u0073ubscriptionKey":"s","\u0075serId":"u"}"#,
            #"{"claims":{"\/x|y":2,"é|u":1},"subscriptionKey":"s"}"#,
            #"{"claims":{"a|b":1,"\/x|y":2},"subscriptionKey":"s"}"#,
        ]
        for document in documents {
            let bytes = Array(document.utf8)
            let read = try XCTUnwrap(Self.read(SubscriptionState.self, bytes), document)
            XCTAssertEqual(read, try JSONDecoder().decode(SubscriptionState.self, from: Data(bytes)), document)
        }
        let escaped = try XCTUnwrap(Self.read(SubscriptionState.self, Array(documents[0].utf8)))
        XCTAssertEqual(escaped.subscriptionKey, "a\"b\\c/d\u{8}\u{c}\n\r\té€😀")
        XCTAssertEqual(escaped.claims["x|y"], Int64.min)
        XCTAssertEqual(try XCTUnwrap(Self.read(SubscriptionState.self, Array(documents[4].utf8))).userId, "u")
        XCTAssertEqual(try XCTUnwrap(Self.read(SubscriptionState.self, Array(documents[5].utf8))).claims, ["/x|y": 2, "é|u": 1])
    }

    /// Strings are skipped eight bytes at a time until a quote, escape, control or non-ASCII byte: each of
    /// those at every offset of every length up to 40 reads as JSONDecoder reads it.
    func testStringsWithSpecialBytesAtEveryWordOffset() throws {
        let specials = [#"\""#, #"\\"#, #"\n"#, #"\u0001"#, "é", "😀", #"\ud83d\ude00"#, "\u{7F}"]
        for length in 0...40 {
            for offset in 0...length {
                for special in specials {
                    let text = String(repeating: "a", count: offset) + special + String(repeating: "b", count: length - offset)
                    let document = Array(#"{"subscriptionKey":"\#(text)"}"#.utf8)
                    let read = try XCTUnwrap(Self.read(SubscriptionState.self, document), text)
                    XCTAssertEqual(read, try JSONDecoder().decode(SubscriptionState.self, from: Data(document)), text)
                }
            }
        }
    }

    /// Each declines; JSONDecoder then reads it or refuses it as it always did.
    func testWhatItDoesNotReadItDeclines() {
        let declined = [
            #"{"credited":{"p":1.0},"subscriptionKey":"s"}"#,          // a fraction
            #"{"credited":{"p":1e3},"subscriptionKey":"s"}"#,          // an exponent
            #"{"credited":{"p":01},"subscriptionKey":"s"}"#,           // a leading zero
            #"{"claims":{"p":9223372036854775808},"subscriptionKey":"s"}"#,
            #"{"subscriptionKey":"\ud83d"}"#,                           // a lone surrogate
            #"{"subscriptionKey":"\ud83d\u0041"}"#,
            #"{"subscriptionKey":"\x"}"#,
            #"{"credited":{"p":1,"p":2},"subscriptionKey":"s"}"#,      // a name twice (JSONDecoder keeps the first)
            #"{"subscriptionKey":"first","subscriptionKey":"last"}"#,
            #"{"subscriptionKey":"first","\u0073ubscriptionKey":"last"}"#,   // the same name, once escaped
            #"{"userId":"u","claims":{},"subscriptionKey":"s"}"#,       // in neither order our rows have
            #"{"grants":{"p":{"finance":{"isIntro":false,"isTrial":false},"group":"g","originalTransactionId":"o","productId":"x","productKind":"gift","purchaseId":"p","startMs":1,"transactionId":"t"}},"subscriptionKey":"s"}"#,
            #"{"grants":{"p":{"group":"g","originalTransactionId":"o","productId":"x","productKind":"consumable","purchaseId":"p","startMs":1,"transactionId":"t"}},"subscriptionKey":"s"}"#,
            #"{"userId":"u"}"#,                                         // the key missing
            #"{"subscriptionKey":null}"#,
            #"{"subscriptionKey":1}"#,
            #"{"factPositions":{"p":{"offset":0,"partition":2147483648,"topic":"t"}},"subscriptionKey":"s"}"#,
            #"{"subscriptionKey":"s"} x"#,
            #"{"subscriptionKey":"s",}"#,
            #"[{"subscriptionKey":"s"}]"#,
            "{\"subscriptionKey\":\"a\u{1}\"}",
            #"{"subscriptionKey":"s","x":"# + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "}",
        ]
        for document in declined {
            XCTAssertNil(Self.read(SubscriptionState.self, Array(document.utf8)), document)
        }
        XCTAssertNil(Self.read(SubscriptionState.self, [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D]), "invalid UTF-8")
    }

    /// Every prefix and thousands of byte mutations of real documents: whatever the reader accepts,
    /// JSONDecoder accepts and reads the same; nothing traps.
    func testAcceptedMutationsAgreeWithJSONDecoder() throws {
        let (states, purchases) = Self.documents()
        var generator = SplitMix64(seed: 0x5107_ED)
        var accepted = 0
        func check<T: StoredJSONDocument & Equatable>(_ type: T.Type, _ original: [UInt8]) {
            for cut in stride(from: 0, to: original.count, by: 7) {
                XCTAssertNil(Self.read(T.self, Array(original[..<cut])), "a prefix of \(original.count) bytes cut at \(cut)")
            }
            let alphabet = Array(#"{}[]",:0123456789-.eE \nntrufalsx\u"#.utf8) + [0x00, 0x80, 0xC3, 0xFF]
            for _ in 0..<400 {
                var bytes = original
                for _ in 0..<Int.random(in: 1...3, using: &generator) {
                    let at = Int.random(in: 0..<bytes.count, using: &generator)
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: bytes[at] = alphabet.randomElement(using: &generator)!
                    case 1: bytes.remove(at: at)
                    default: bytes.insert(alphabet.randomElement(using: &generator)!, at: at)
                    }
                }
                guard let read = Self.read(T.self, bytes) else { continue }
                accepted += 1
                XCTAssertEqual(read, try? JSONDecoder().decode(T.self, from: Data(bytes)), String(decoding: bytes, as: UTF8.self))
            }
        }
        for state in states.prefix(4) { check(SubscriptionState.self, state.json) }
        for purchase in purchases.prefix(4) { check(KnownPurchase.self, purchase.json) }
        XCTAssertGreaterThan(accepted, 100, "mutations of whitespace and values inside strings stay readable")
    }

    // MARK: documents

    private static func read<T: StoredJSONDocument>(_ type: T.Type, _ bytes: [UInt8]) -> T? {
        bytes.withUnsafeBufferPointer { StoredJSONReader.document($0, T.read) }
    }

    /// States folded from the scenario set (purchases, renewals, refunds, switches, grace periods, links)
    /// and the hand-made full and empty ones; the purchases dedupe kept on the way.
    private static func documents() -> (states: [SubscriptionState], purchases: [KnownPurchase]) {
        var transcript = Transcript()
        for event in ScenarioSet.events(prefix: "r") { transcript.feed(event) }
        let states = Array(transcript.book.subscriptions.values) + [StateJSONTests.state(full: true), StateJSONTests.state(full: false),
                                                                      SubscriptionState(subscriptionKey: "empty")]
        let purchases = transcript.known.values.flatMap { $0 } + [
            KnownPurchase(purchaseId: "p|1", facts: StateJSONTests.facts(full: true), aliases: ["t-2", "t-1"], cancellationStatedAtMs: 9),
            KnownPurchase(purchaseId: "p", facts: StateJSONTests.facts(full: false), aliases: []),
        ]
        return (states, purchases)
    }

    /// Our writer's bytes, JSONEncoder's with sorted keys, plain and pretty, and PostgreSQL's jsonb print
    /// (`{"a": 1, "bb": 2}`, shorter names first: how rows written while the columns were jsonb read back).
    private static func layouts<T: Encodable>(_ own: [UInt8], _ value: T) throws -> [[UInt8]] {
        let sorted = JSONEncoder(), pretty = JSONEncoder()
        sorted.outputFormatting = [.sortedKeys]
        pretty.outputFormatting = [.sortedKeys, .prettyPrinted]
        return [own, Array(try sorted.encode(value)), Array(try pretty.encode(value)), try jsonbPrint(own)]
    }

    /// As jsonb prints a document: members by name length, then bytes; `": "` and `", "` between them.
    private static func jsonbPrint(_ bytes: [UInt8]) throws -> [UInt8] {
        Array(try JSONDecoder().decode(JSONValue.self, from: Data(bytes)).jsonb.utf8)
    }
}

/// Any JSON document our writers make, parsed by JSONDecoder, to print again in jsonb's layout.
private indirect enum JSONValue: Decodable {
    case object([String: JSONValue]), array([JSONValue]), string(String), integer(Int64), bool(Bool), null

    init(from decoder: any Decoder) throws {
        let value = try decoder.singleValueContainer()
        if value.decodeNil() { self = .null }
        else if let bool = try? value.decode(Bool.self) { self = .bool(bool) }
        else if let integer = try? value.decode(Int64.self) { self = .integer(integer) }
        else if let string = try? value.decode(String.self) { self = .string(string) }
        else if let array = try? value.decode([JSONValue].self) { self = .array(array) }
        else { self = .object(try value.decode([String: JSONValue].self)) }
    }

    var jsonb: String {
        switch self {
        case .object(let members):
            let names = members.keys.sorted { a, b in
                a.utf8.count != b.utf8.count ? a.utf8.count < b.utf8.count : a.utf8.lexicographicallyPrecedes(b.utf8)
            }
            return "{" + names.map { "\(JSONValue.string($0).jsonb): \(members[$0]!.jsonb)" }.joined(separator: ", ") + "}"
        case .array(let elements): return "[" + elements.map(\.jsonb).joined(separator: ", ") + "]"
        case .string(let text): return String(decoding: try! JSONEncoder().encode(text), as: UTF8.self)
        case .integer(let integer): return String(integer)
        case .bool(let bool): return bool ? "true" : "false"
        case .null: return "null"
        }
    }
}
