import Foundation
import Runtime
import XCTest

/// The metric and log vocabulary is one list (`Runtime.Vocabulary`): the code emits nothing outside
/// it, it lists nothing the code does not emit, and docs/observability.md documents all of it.
final class VocabularyListTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// Every Swift source but the vocabulary itself.
    private func sources() throws -> String {
        let folder = root.appendingPathComponent("Sources")
        var all = ""
        for case let path as String in FileManager.default.enumerator(atPath: folder.path)!
        where path.hasSuffix(".swift") && !path.hasSuffix("Runtime/Vocabulary.swift") {
            all += try String(contentsOf: folder.appendingPathComponent(path), encoding: .utf8) + "\n"
        }
        return all
    }

    private func matches(_ pattern: String, in text: String, groups: [Int]) throws -> Set<String> {
        let regex = try NSRegularExpression(pattern: pattern)
        var found = Set<String>()
        for match in regex.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            for group in groups where match.range(at: group).location != NSNotFound {
                found.insert(String(text[Range(match.range(at: group), in: text)!]))
            }
        }
        return found
    }

    func testTheCodeEmitsExactlyTheListedMetrics() throws {
        let code = try sources()
        // metrics.increment("storeledger_…", …), .set(…), .observe(…): a family named where it is emitted.
        let emitted = try matches("\\.[a-z]+\\(\"(storeledger_[a-z_]+)\"", in: code, groups: [1])
        let listed = Set(Vocabulary.metrics.map(\.name))
        XCTAssertEqual(listed.count, Vocabulary.metrics.count, "no family is listed twice")
        XCTAssertGreaterThan(emitted.count, 10)
        for name in emitted.subtracting(listed).sorted() { XCTFail("\(name) is emitted but not in Runtime.Vocabulary.metrics") }
        for name in listed.subtracting(emitted).sorted() { XCTFail("\(name) is listed in Runtime.Vocabulary but nothing emits it") }
        for metric in Vocabulary.metrics {
            XCTAssert(metric.name.hasPrefix("storeledger_") && !metric.help.isEmpty, metric.name)
            if metric.type == .counter { XCTAssert(metric.name.hasSuffix("_total") || metric.name.hasSuffix("_sum"), "counter \(metric.name) ends in _total or _sum") }
        }
    }

    func testTheCodeLogsExactlyTheListedEvents() throws {
        let code = try sources()
        // logger.info("event", …), also `ready ? "a" : "b"` as the event.
        let logged = try matches("\\.(?:debug|info|warning|error)\\((?:[A-Za-z.]+ \\? )?\"([a-z0-9_]+)\"(?: : \"([a-z0-9_]+)\")?",
                                 in: code, groups: [1, 2])
        let listed = Set(Vocabulary.logEvents.map(\.name))
        XCTAssertEqual(listed.count, Vocabulary.logEvents.count, "no event is listed twice")
        XCTAssertGreaterThan(logged.count, 30)
        for name in logged.subtracting(listed).sorted() { XCTFail("log event \(name) is not in Runtime.Vocabulary.logEvents") }
        for name in listed.subtracting(logged).sorted() { XCTFail("log event \(name) is listed in Runtime.Vocabulary but never logged") }
    }

    func testTheDocumentListsEveryMetricAndEvent() throws {
        let document = try String(contentsOf: root.appendingPathComponent("docs/observability.md"), encoding: .utf8)
        for metric in Vocabulary.metrics { XCTAssert(document.contains("`\(metric.name)`"), "docs/observability.md lacks \(metric.name)") }
        for event in Vocabulary.logEvents { XCTAssert(document.contains("`\(event.name)`"), "docs/observability.md lacks \(event.name)") }
    }
}
