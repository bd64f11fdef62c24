@testable import Ingest
import Foundation
import HTTPServer
import XCTest

/// The pieces of ingest's write path that replaced per-request Foundation work: the accepted
/// answer written directly, and one FIFO of deadlines instead of a timer per request.
final class IngestWriteAnswerTests: XCTestCase {
    func testAcceptedAnswerIsTheBytesTheJSONEncoderGave() throws {
        for (partition, offset) in [(Int32(0), Int64(0)), (11, 123_456_789_012), (3, 42)] {
            let direct = HTTPResponse.accepted(partition: partition, offset: offset)
            let encoded = HTTPResponse.json(["status": "accepted", "offset": "\(partition)@\(offset)"])
            XCTAssertEqual(direct.status, 200)
            XCTAssertEqual(direct.body, encoded.body, String(decoding: direct.body, as: UTF8.self))
            XCTAssertEqual(direct.headers["Content-Type"], encoded.headers["Content-Type"])
        }
    }

    /// The one-pass check takes only bodies the full checks accept as V2, and takes Apple's form.
    func testPlainV2BodiesAreExactlyWhatTheFullChecksAcceptAsV2() {
        let jws = "eyJhbGciOiJFUzI1NiJ9.eyJub3RpZmljYXRpb25UeXBlIjoiVEVTVCJ9.c2lnbmF0dXJl-_="
        let plain = [#"{"signedPayload":"\#(jws)"}"#, " {\n\t\"signedPayload\" :  \"\(jws)\"\r\n} \n", #"{"signedPayload":"a"}"#]
        let other = [#"{"signedPayload":""}"#, #"{"signedPayload":"a+b"}"#, #"{"signedPayload":"a\/b"}"#, #"{"signedPayload":"\#(jws)","x":1}"#,
                     #"{"signedPayload":"\#(jws)"} x"#, #"{"signedPayload":"\#(jws)""#, #"{"signedPayloa":"\#(jws)"}"#, #"{"signedPayload":1}"#,
                     #"["signedPayload"]"#, "", "{", #"{"signed\u0050ayload":"\#(jws)"}"#, #"{"notification_type":"RENEWAL"}"#]
        for body in plain {
            XCTAssertTrue(EdgeChecks.isPlainV2Notification(Array(body.utf8)), body)
        }
        for body in plain + other {
            let bytes = Array(body.utf8)
            guard EdgeChecks.isPlainV2Notification(bytes) else { continue }
            guard case .success(let object) = EdgeChecks.object(bytes).flatMap(EdgeChecks.notification) else { return XCTFail(body) }
            XCTAssertEqual(object["signedPayload"] as? String, body.contains(jws) ? jws : "a", body)
        }
        for body in other { XCTAssertFalse(EdgeChecks.isPlainV2Notification(Array(body.utf8)), body) }
    }

    /// Every field kind against every JSON value type: which ones it takes (nil) and which it refuses.
    func testV1FieldKindsTakeExactlyTheirJSONTypes() throws {
        let values: [(String, Any)] = [("string", "abc"), ("number", NSNumber(value: 7)), ("bool", NSNumber(value: true)),
                                       ("object", ["a": [1, 2]] as [String: Any]), ("array", [["a": 1]] as [Any]), ("null", NSNull())]
        let taken: [(EdgeChecks.Field, Set<String>)] = [
            (.text, ["string"]), (.identifier, ["string"]), (.identifierOrNumber, ["string", "number", "bool"]),
            (.textOrBool, ["string", "number", "bool"]), (.textOrNumber, ["string", "number", "bool"]),
            (.object, ["object"]), (.objectOrArray, ["object", "array"]),
        ]
        for (field, accepted) in taken {
            for (name, value) in values {
                let refusal = field.refusal("k", value)
                XCTAssertEqual(refusal == nil, accepted.contains(name), "\(field) with \(name): \(refusal ?? "taken")")
                if let refusal { XCTAssert(refusal.hasPrefix("k must be "), refusal) }
            }
        }
        // Strings are still bounded by the kind's rule.
        XCTAssertNotNil(EdgeChecks.Field.identifier.refusal("bid", String(repeating: "x", count: 10_000)))
        XCTAssertNotNil(EdgeChecks.Field.text.refusal("environment", String(repeating: "x", count: 1_000_000)))
        // Parsed JSON, as the checks see it.
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(#"{"u":{"a":[1,{"b":2}]},"l":[{"x":1}],"n":5,"s":"t"}"#.utf8)) as? [String: Any])
        XCTAssertNil(EdgeChecks.Field.object.refusal("u", object["u"]!))
        XCTAssertNil(EdgeChecks.Field.objectOrArray.refusal("l", object["l"]!))
        XCTAssertNil(EdgeChecks.Field.identifierOrNumber.refusal("n", object["n"]!))
        XCTAssertEqual(EdgeChecks.Field.object.refusal("l", object["l"]!), "l must be an object, not an array")
        XCTAssertEqual(EdgeChecks.Field.text.refusal("n", object["n"]!), "n must be a string, not a number or boolean")
    }

    func testDeadlinesFallDueOldestFirstAndOnlyOnce() {
        let queue = DeadlineQueue<Int>()
        let start = ContinuousClock.now
        for index in 0..<3000 { queue.append(index, deadline: start + .milliseconds(index)) }
        XCTAssertEqual(queue.due(at: start - .milliseconds(1)), [])
        XCTAssertEqual(queue.due(at: start + .milliseconds(1)), [0, 1])
        // Past the compaction threshold: what is left keeps its order.
        XCTAssertEqual(queue.due(at: start + .milliseconds(2_000)), Array(2...2_000))
        XCTAssertEqual(queue.count, 999)
        XCTAssertEqual(queue.due(at: start + .milliseconds(2_000)), [])
        queue.append(5_000, deadline: start + .milliseconds(5_000))
        XCTAssertEqual(queue.due(at: start + .seconds(10)), Array(2_001..<3_000) + [5_000])
        XCTAssertEqual(queue.count, 0)
    }
}
