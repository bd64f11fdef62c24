import Synchronization
@testable import Runtime
import XCTest

/// Contract: STORELEDGER_FAILPOINT parses to exactly the named points and probabilities (unknown
/// names and bad probabilities are refused with the known list), a point fires by its probability
/// against the injected draw, and histograms render as Prometheus cumulative buckets with sum and count.
final class FailpointsAndMetricsTests: XCTestCase {
    func testFailpointsParseAndDraw() throws {
        XCTAssertEqual(try Failpoints.parse(""), .none)
        let points = try Failpoints.parse("after-pg-commit:0.25, before-offset-commit,stop-before-commit")
        XCTAssertTrue(points.stopBeforeCommit)
        XCTAssertEqual(points.probabilities, [.afterPGCommit: 0.25, .beforeOffsetCommit: 1])
        XCTAssertTrue(points.hit(.afterPGCommit, draw: { 0.2 }))
        XCTAssertFalse(points.hit(.afterPGCommit, draw: { 0.3 }))
        XCTAssertTrue(points.hit(.beforeOffsetCommit, draw: { 0.999 }))
        XCTAssertFalse(points.hit(.afterPublish, draw: { 0 }), "an unarmed point never fires")
        XCTAssertFalse(try Failpoints.parse("after-publish:0").hit(.afterPublish, draw: { 0 }))
        for bad in ["after-lunch", "after-publish:1.5", "after-publish:x", "stop-before-commit:0.5"] {
            XCTAssertThrowsError(try Failpoints.parse(bad)) { error in
                XCTAssertTrue(String(describing: error).contains("STORELEDGER_FAILPOINT"), "\(bad): \(error)")
            }
        }
    }

    func testHistogramRendersCumulativeBuckets() {
        let metrics = Metrics()
        for value in [0.004, 0.02, 0.02, 3.0, 100.0] {
            metrics.observe("storeledger_test_seconds", ["stage": "x"], value, buckets: [0.01, 0.05, 5])
        }
        let text = metrics.exposition()
        XCTAssertTrue(text.contains("# TYPE storeledger_test_seconds histogram"), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_bucket{stage="x",le="0.01"} 1"#), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_bucket{stage="x",le="0.05"} 3"#), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_bucket{stage="x",le="5"} 4"#), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_bucket{stage="x",le="+Inf"} 5"#), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_sum{stage="x"} 103.044"#), text)
        XCTAssertTrue(text.contains(#"storeledger_test_seconds_count{stage="x"} 5"#), text)
    }

    func testGaugesOfOneNameCanBeDropped() {
        let metrics = Metrics()
        metrics.set("storeledger_consumer_lag", ["partition": "1"], to: 4)
        metrics.set("storeledger_other", to: 1)
        metrics.removeGauges("storeledger_consumer_lag")
        XCTAssertNil(metrics.gauge("storeledger_consumer_lag", ["partition": "1"]))
        XCTAssertEqual(metrics.gauge("storeledger_other"), 1)
    }

    /// A line repeated per request during an outage is written once per interval, and the next
    /// written line says how many were held back.
    func testThrottledLogWritesOncePerIntervalAndCountsTheRest() {
        let held = Mutex<[Int]>([])
        let hourly = ThrottledLog(interval: .seconds(3600))
        for _ in 0..<5 { hourly.log { count in held.withLock { $0.append(count) } } }
        XCTAssertEqual(held.withLock { $0 }, [0], "the first line only")
        let always = ThrottledLog(interval: .zero)
        held.withLock { $0 = [] }
        for _ in 0..<3 { always.log { count in held.withLock { $0.append(count) } } }
        XCTAssertEqual(held.withLock { $0 }, [0, 0, 0])
        let short = ThrottledLog(interval: .milliseconds(200))
        held.withLock { $0 = [] }
        for _ in 0..<4 { short.log { count in held.withLock { $0.append(count) } } }
        Thread.sleep(forTimeInterval: 0.3)
        short.log { count in held.withLock { $0.append(count) } }
        XCTAssertEqual(held.withLock { $0 }, [0, 3], "the line after the interval counts the three held back")
    }

    func testLabelValuesAreEscapedOnlyWhenNeeded() {
        XCTAssertEqual(Metrics.escaped("decode"), "decode")
        XCTAssertEqual(Metrics.escaped(#"a\b"c"# + "\nd"), #"a\\b\"c\nd"#)
        XCTAssertEqual(Metrics.escaped("é\"ü"), #"é\"ü"#)
        let metrics = Metrics()
        metrics.increment("storeledger_test_total", ["reason": "say \"hi\""])
        XCTAssertTrue(metrics.exposition().contains(#"storeledger_test_total{reason="say \"hi\""} 1"#), metrics.exposition())
    }
}
