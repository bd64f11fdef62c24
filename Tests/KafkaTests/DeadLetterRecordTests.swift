import Kafka
import XCTest

/// Contract: a dead letter is the original record (key, value, headers in order) plus provenance
/// headers, read back losslessly; the error message is bounded; provenance of an earlier dead
/// letter is replaced, not stacked (a re-driven record failing again); a value too large to fit
/// beside its headers is cut and marked with its original size, so a dead letter always fits.
final class DeadLetterRecordTests: XCTestCase {
    let original = KafkaRecord(topic: "raw", partition: 3, offset: 42, key: Array("k".utf8), value: [0, 1, 2, 0xFF],
                               headers: [KafkaHeader(name: "received-at", value: Array("1".utf8)),
                                         KafkaHeader(name: "x", value: [0])], timestamp: 0)

    func consumed(_ outgoing: OutgoingRecord) -> KafkaRecord {
        KafkaRecord(topic: outgoing.topic, partition: 0, offset: 7, key: outgoing.key, value: outgoing.value,
                    headers: outgoing.headers, timestamp: 0)
    }

    func testRoundTripKeepsTheOriginalAndProvenance() throws {
        let order = DeadLetterOrder(record: original, kind: "retry_exhausted", reason: "Apple unreachable", attempts: 8,
                                    firstFailureMs: 1000, lastFailureMs: 9000)
        let outgoing = DeadLetterRecord(stage: "decode", order: order).outgoing(topic: "dlq")
        XCTAssertEqual(outgoing.topic, "dlq")
        XCTAssertEqual(outgoing.key, original.key)
        XCTAssertEqual(outgoing.value, original.value)
        XCTAssertEqual(Array(outgoing.headers.prefix(2)), original.headers, "original headers first, in order")
        let back = try XCTUnwrap(DeadLetterRecord(consumed(outgoing)))
        XCTAssertEqual(back, DeadLetterRecord(stage: "decode", kind: "retry_exhausted", message: "Apple unreachable",
                                              source: PartitionID(topic: "raw", partition: 3), sourceOffset: 42, attempts: 8,
                                              firstFailureMs: 1000, lastFailureMs: 9000, key: original.key,
                                              value: original.value, headers: original.headers))
        XCTAssertLessThan(outgoing.headers.dropFirst(2).reduce(0) { $0 + $1.name.utf8.count + $1.value.count },
                          DeadLetterRecord.provenanceAllowance)
    }

    func testRecordWithoutProvenanceIsNotADeadLetter() {
        XCTAssertNil(DeadLetterRecord(original))
    }

    func testLongMessageIsBoundedAndEarlierProvenanceReplaced() throws {
        let order = DeadLetterOrder(record: original, kind: "k", reason: String(repeating: "é", count: 5000), attempts: 1,
                                    firstFailureMs: 1, lastFailureMs: 1)
        let first = consumed(DeadLetterRecord(stage: "decode", order: order).outgoing(topic: "dlq"))
        let message = try XCTUnwrap(first.headers.first { $0.name == DeadLetterRecord.Header.message })
        XCTAssertLessThanOrEqual(message.value.count, DeadLetterRecord.maxMessageBytes)
        XCTAssertNotNil(String(validating: message.value, as: UTF8.self), "cut at a character boundary")

        let again = DeadLetterRecord(stage: "dedupe", order: DeadLetterOrder(record: first, kind: "k2", reason: "r", attempts: 1,
                                                                             firstFailureMs: 2, lastFailureMs: 2))
        let headers = again.outgoing(topic: "dlq").headers
        XCTAssertEqual(headers.filter { $0.name == DeadLetterRecord.Header.stage }.count, 1)
        XCTAssertEqual(DeadLetterRecord(consumed(again.outgoing(topic: "dlq")))?.stage, "dedupe")
    }

    func testOversizedValueIsCutAndMarkedSoItFits() throws {
        let huge = KafkaRecord(topic: "raw", partition: 0, offset: 0, key: nil,
                               value: Array(repeating: 0x41, count: KafkaLimits.messageMaxBytes + 10), headers: [], timestamp: 0)
        let order = DeadLetterOrder(record: huge, kind: "k", reason: "r", attempts: 1, firstFailureMs: 0, lastFailureMs: 0)
        let outgoing = DeadLetterRecord(stage: "decode", order: order).outgoing(topic: "dlq")
        let headerBytes = outgoing.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.count }
        XCTAssertLessThanOrEqual(outgoing.value.count + headerBytes, KafkaLimits.messageMaxBytes)
        XCTAssertEqual(outgoing.headers.last { $0.name == DeadLetterRecord.Header.truncatedFrom }?.value,
                       Array(String(KafkaLimits.messageMaxBytes + 10).utf8))
        // Whatever ingest accepts is kept whole.
        let limit = KafkaRecord(topic: "raw", partition: 0, offset: 0, key: nil,
                                value: Array(repeating: 0x41, count: KafkaLimits.maxValueBytes),
                                headers: [KafkaHeader(name: "http-big", value: Array(repeating: 0x42, count: 32 * 1024))], timestamp: 0)
        let kept = DeadLetterRecord(stage: "decode", order: DeadLetterOrder(record: limit, kind: "k", reason: "r", attempts: 1,
                                                                            firstFailureMs: 0, lastFailureMs: 0)).outgoing(topic: "dlq")
        XCTAssertEqual(kept.value.count, KafkaLimits.maxValueBytes)
    }

    func testRedriveSendsTheOriginalToItsSourceWithoutProvenance() throws {
        let order = DeadLetterOrder(record: original, kind: "k", reason: "r", attempts: 1, firstFailureMs: 0, lastFailureMs: 0)
        let letter = try XCTUnwrap(DeadLetterRecord(consumed(DeadLetterRecord(stage: "decode", order: order).outgoing(topic: "dlq"))))
        let again = letter.redrive(from: "dlq/0@7")
        XCTAssertEqual(again.topic, "raw")
        XCTAssertEqual(again.key, original.key)
        XCTAssertEqual(again.value, original.value)
        XCTAssertEqual(again.headers, original.headers + [KafkaHeader(name: DeadLetterRecord.redrivenFromHeader, value: Array("dlq/0@7".utf8))])
        XCTAssertNil(DeadLetterRecord(consumed(again)), "a re-driven record carries no provenance")
        // Re-driving a re-driven record again names only the latest source.
        let twice = DeadLetterRecord(stage: "decode", kind: "k", message: "", source: letter.source, sourceOffset: 1, attempts: 1,
                                     firstFailureMs: 0, lastFailureMs: 0, key: nil, value: [], headers: again.headers)
            .redrive(from: "dlq/0@9")
        XCTAssertEqual(twice.headers.filter { $0.name == DeadLetterRecord.redrivenFromHeader }.map(\.value), [Array("dlq/0@9".utf8)])
    }

    func testFilterSelectsByStageKindTimeAndKeepsTheLastN() {
        func letter(_ stage: String, _ kind: String, at ms: Int64) -> DeadLetterRecord {
            DeadLetterRecord(stage: stage, kind: kind, message: "", source: PartitionID(topic: "raw", partition: 0), sourceOffset: ms,
                             attempts: 1, firstFailureMs: ms, lastFailureMs: ms, key: nil, value: [], headers: [])
        }
        let letters = [(1, letter("decode", "a", at: 10)), (2, letter("dedupe", "a", at: 20)),
                       (3, letter("decode", "b", at: 30)), (4, letter("decode", "a", at: 40))]
        XCTAssertEqual(DeadLetterFilter(stage: "decode").select(letters).map(\.0), [1, 3, 4])
        XCTAssertEqual(DeadLetterFilter(stage: "decode", kind: "a").select(letters).map(\.0), [1, 4])
        XCTAssertEqual(DeadLetterFilter(sinceMs: 20).select(letters).map(\.0), [2, 3, 4])
        XCTAssertEqual(DeadLetterFilter(limit: 2).select(letters).map(\.0), [3, 4])
        XCTAssertEqual(DeadLetterFilter(kind: "none").select(letters).map(\.0), [])
        // Gathered while reading: a long topic keeps only the last `limit` matching letters.
        var selection = DeadLetterSelection<Int>(DeadLetterFilter(stage: "decode", limit: 3))
        for index in 0..<10_000 { selection.offer(index, letter(index % 2 == 0 ? "decode" : "dedupe", "a", at: Int64(index))) }
        XCTAssertEqual(selection.kept.map(\.0), [9_994, 9_996, 9_998])
        // Read partition by partition, the newest letters may come first: a limit keeps the latest
        // failures, not the last ones read.
        let acrossPartitions = [(1, letter("decode", "a", at: 50)), (2, letter("decode", "a", at: 10)),
                                (3, letter("decode", "a", at: 40)), (4, letter("decode", "a", at: 20))]
        XCTAssertEqual(DeadLetterFilter(limit: 2).select(acrossPartitions).map(\.0), [3, 1])
        XCTAssertEqual(DeadLetterFilter(limit: 1).select(acrossPartitions).map(\.0), [1])
        var gathered = DeadLetterSelection<Int>(DeadLetterFilter(limit: 2))
        for index in 0..<1_000 { gathered.offer(index, letter("decode", "a", at: Int64((index * 7_919) % 1_000))) }
        XCTAssertEqual(gathered.kept.map { $0.1.lastFailureMs }, [998, 999])
    }

    func testPrintableValueIsTextOnlyForPrintableUTF8() {
        func letter(_ value: [UInt8]) -> DeadLetterRecord {
            DeadLetterRecord(stage: "s", kind: "k", message: "", source: PartitionID(topic: "t", partition: 0), sourceOffset: 0,
                             attempts: 1, firstFailureMs: 0, lastFailureMs: 0, key: nil, value: value, headers: [])
        }
        XCTAssertEqual(letter(Array("{\"a\": 1}\n".utf8)).printableValue, "{\"a\": 1}\n")
        XCTAssertNil(letter([0x7B, 0x00, 0x7D]).printableValue, "NUL is not printable")
        XCTAssertNil(letter([0xFF, 0xFE]).printableValue, "not UTF-8")
    }
}
