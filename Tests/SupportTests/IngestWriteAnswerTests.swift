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
