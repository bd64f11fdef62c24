@testable import AppleDecoding
import Foundation
import XCTest

/// The fast JSON reader (a performance measure) either yields exactly what JSONSerialization
/// yields (same values, same NSNumber kinds) or declines, so the fallback decides.
final class JSONObjectReaderTests: XCTestCase {
    private func fast(_ json: String) -> [String: Any]? {
        Array(json.utf8).withUnsafeBufferPointer(JSONObjectReader.object)
    }

    private func reference(_ json: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any]
    }

    /// Values compared through JSONSerialization's own sorted output, plus the NSNumber kinds
    /// (objCType) that isBool and pythonInt read.
    private func assertSame(_ json: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let mine = fast(json) else { return XCTFail("fast reader declined \(json)", file: file, line: line) }
        guard let theirs = reference(json) else { return XCTFail("JSONSerialization refused \(json)", file: file, line: line) }
        let options: JSONSerialization.WritingOptions = [.sortedKeys, .fragmentsAllowed]
        XCTAssertEqual(try JSONSerialization.data(withJSONObject: mine, options: options),
                       try JSONSerialization.data(withJSONObject: theirs, options: options), json, file: file, line: line)
        XCTAssertEqual(kinds(mine), kinds(theirs), json, file: file, line: line)
    }

    private func kinds(_ value: Any) -> String {
        switch value {
        case let object as [String: Any]: return "{" + object.keys.sorted().map { "\($0):\(kinds(object[$0]!))" }.joined(separator: ",") + "}"
        case let array as [Any]: return "[" + array.map(kinds).joined(separator: ",") + "]"
        case let number as NSNumber: return "n" + String(cString: number.objCType) + "\(isBool(number))"
        case is String: return "s"
        case is NSNull: return "null"
        default: return "?\(type(of: value))"
        }
    }

    func testPlainObjectsReadAsJSONSerializationReadsThem() {
        assertSame(#"{}"#)
        assertSame(" \r\n\t{ \"a\" : 1 , \"b\":[ ] }\n")
        assertSame(#"{"n":0,"m":-0,"p":5,"q":-3,"big":999999999999999999,"neg":-999999999999999999,"ms":1698148900000}"#)
        assertSame(#"{"t":true,"f":false,"z":null,"list":[1,"x",[true,{}],null]}"#)
        assertSame(#"{"s":"a\"b\\c\/d\b\f\n\r\t","empty":"","":"key may be empty"}"#)
        assertSame(#"{"data":{"signedTransactionInfo":"eyJhbGciOiJFUzI1NiJ9.e30.c2ln","status":1}}"#)
    }

    func testDeclinesWhatItDoesNotReadSoTheFallbackDecides() {
        for json in [
            #"[1]"#, #""x""#, "", " ", #"{"a":1.5}"#, #"{"a":1e3}"#, #"{"a":1E3}"#, #"{"a":0123}"#,
            #"{"a":1234567890123456789}"#, #"{"a":-1234567890123456789}"#, #"{"a":"\u0041"}"#, #"{"a":"é"}"#,
            "{\"a\":\"\u{01}\"}", #"{"a":1,"a":2}"#, #"{"a":1,}"#, #"{"a":1}x"#, #"{"a":tru}"#, #"{"a":-}"#,
            #"{"a":"unterminated}"#, #"{"a":"\x"}"#, "\u{FEFF}{}", #"{"a" 1}"#, #"{a:1}"#,
        ] {
            XCTAssertNil(fast(json), json)
        }
    }

    /// Long strings are skipped 8 bytes at a time: a quote, escape, control or non-ASCII byte at
    /// every offset of a word must still be seen.
    func testLongStringsAtEveryWordOffset() {
        let run = String(repeating: "MIIEMDCCA7agAwIBAgIQaPoPldvpSoEw+", count: 3)
        for offset in 0..<17 {
            let head = String(run.prefix(offset)), tail = String(run.dropFirst(offset))
            assertSame(#"{"s":"\#(head)\/\#(tail)","t":"\#(head)"}"#)
            assertSame(#"{"s":"\#(head)\"\#(tail)\\"}"#)
            for odd in ["\u{01}", "\u{1F}", "é", #"\u0041"#, "\""] {
                XCTAssertNil(fast("{\"s\":\"\(head)\(odd)\(tail)\"}"), "\(offset) \(odd)")
            }
        }
    }

    func testDepthLimitIsTheReaderDepth() {
        let deepest = String(repeating: #"{"a":"#, count: JSONObjectReader.maxDepth - 1) + "{}" + String(repeating: "}", count: JSONObjectReader.maxDepth - 1)
        assertSame(deepest)
        XCTAssertNil(fast("{\"a\":" + deepest + "}"))
    }

    func testFallbackKeepsJSONSerializationVerdicts() {
        XCTAssertEqual(JSONObjectReader.objectOrFallback(Array(#"{"a":1.5}"#.utf8))?["a"] as? Double, 1.5)
        XCTAssertEqual(JSONObjectReader.objectOrFallback(Array(#"{"a":1,"a":2}"#.utf8))?["a"] as? Int, 2)
        XCTAssertEqual(JSONObjectReader.objectOrFallback(Array(#"{"a":"\u00e9"}"#.utf8))?["a"] as? String, "é")
        XCTAssertNil(JSONObjectReader.objectOrFallback(Array(#"[1]"#.utf8)))
        // JSONSerialization tolerates a trailing comma; the fast reader declines it, so that stays so.
        XCTAssertEqual(JSONObjectReader.objectOrFallback(Array(#"{"a":1,}"#.utf8))?["a"] as? Int, 1)
        XCTAssertNil(JSONObjectReader.objectOrFallback(Array(#"{"a":1"#.utf8)))
        XCTAssertNil(JSONObjectReader.objectOrFallback([]))
    }
}
