import Foundation
import XCTest

/// Readiness is observed through `/readyz` (LocalStack's boot sequence), never by reading a child's
/// standard output: no Swift file under Sources/ or Tests/ matches a readiness line that a process
/// printed (`BOOTSTRAP=`, `CONTROL=`, `INGEST=`, `SIGNER=`, `READY`, `STAGE_READY`) in what it read.
final class ReadinessLineTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// A read line compared with a readiness token: `hasPrefix("BOOTSTRAP=")`, `== "READY"`,
    /// `contains("READY")`, `value(after: "INGEST=")`, `dropFirst("BOOTSTRAP=".count)`.
    static let pattern = try! NSRegularExpression(pattern:
        #"(hasPrefix|contains|value\(after:|==|dropFirst)\s*\(?\s*"(BOOTSTRAP=|CONTROL=|INGEST=|SIGNER=|READY|STAGE_READY)"#)

    func testNoSourceParsesAReadinessLineFromStandardOutput() throws {
        var scanned = 0
        var offenders: [String] = []
        for folder in ["Sources", "Tests"] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let path as String in files where path.hasSuffix(".swift") {
                let file = base.appendingPathComponent(path)
                // This file's examples are the forms it looks for.
                guard file.standardizedFileURL.path != URL(fileURLWithPath: #filePath).standardizedFileURL.path else { continue }
                let text = try String(contentsOf: file, encoding: .utf8)
                scanned += 1
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let line = String(line)
                    if Self.pattern.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)) != nil {
                        offenders.append("\(folder)/\(path):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                    }
                }
            }
        }
        XCTAssertGreaterThan(scanned, 300, "the scan saw the repository's Swift files")
        XCTAssertEqual(offenders, [], "readiness comes from /readyz, not from a child's output")
    }

    /// The pattern finds the forms the old boot code used, and not ordinary code.
    func testThePatternFindsReadinessParsing() {
        func matches(_ line: String) -> Bool { Self.pattern.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)) != nil }
        XCTAssertTrue(matches(#"if line.hasPrefix("BOOTSTRAP=") {"#))
        XCTAssertTrue(matches(#"try waitUntil("dev prints READY", timeout: 60) { lines.contains("READY") }"#))
        XCTAssertTrue(matches(#"if line == "READY" { ready = true }"#))
        XCTAssertTrue(matches(#"let ingest = try XCTUnwrap(lines.value(after: "INGEST="))"#))
        XCTAssertTrue(matches(#"bootstrap = String(line.dropFirst("BOOTSTRAP=".count))"#))
        XCTAssertTrue(matches(#"if line.hasPrefix("CONTROL=") { control = line }"#))
        XCTAssertFalse(matches(#"if line.hasPrefix("PID ") { pids.append(line) }"#))
        XCTAssertFalse(matches(#"XCTAssertEqual(status, "ready")"#))
    }
}
