import Foundation
import XCTest

/// The repository's documents stand alone: every path they name exists in the repository, and
/// none sends a reader outside it.
final class DocumentationTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private func documents() throws -> [(name: String, text: String)] {
        let docs = root.appendingPathComponent("docs")
        let names = try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }.sorted()
        var out = try ["README.md", "BENCHMARKS.md"].map { name in
            (name: name, text: try String(contentsOf: root.appendingPathComponent(name), encoding: .utf8))
        }
        for name in names {
            out.append((name: "docs/" + name, text: try String(contentsOf: docs.appendingPathComponent(name), encoding: .utf8)))
        }
        return out
    }

    func testEveryRepositoryPathNamedInTheDocsExists() throws {
        // Back-quoted paths under the repository's top-level folders.
        let pattern = try NSRegularExpression(pattern: "`((?:Sources|Tests|docs|deploy|scripts)/[A-Za-z0-9_./-]+)`")
        // Files the operator creates (secrets, certificates) are git-ignored and named on purpose.
        let ignored = try String(contentsOf: root.appendingPathComponent(".gitignore"), encoding: .utf8)
            .split(separator: "\n").map { $0.hasPrefix("/") ? String($0.dropFirst()) : String($0) }
        var checked = 0
        for doc in try documents() {
            let range = NSRange(doc.text.startIndex..., in: doc.text)
            for match in pattern.matches(in: doc.text, range: range) {
                let path = String(doc.text[Range(match.range(at: 1), in: doc.text)!])
                guard !ignored.contains(path) else { continue }
                checked += 1
                XCTAssert(FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path),
                          "\(doc.name) names \(path), which does not exist")
            }
        }
        XCTAssertGreaterThan(checked, 40, "the architecture map names the files behind every rule")
    }

    func testArchitectureNamesCodeAndTestsForEveryRule() throws {
        let text = try String(contentsOf: root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        for rule in 1...19 {
            let row = text.split(separator: "\n").first { $0.hasPrefix("| R\(rule) ") }
            XCTAssertNotNil(row, "docs/architecture.md has no row for R\(rule)")
            if let row { XCTAssert(row.contains("`Sources/") && row.contains("`Tests/"), "R\(rule) names code and tests") }
        }
    }

    func testNoDocumentSendsTheReaderOutsideTheRepository() throws {
        for doc in try documents() {
            XCTAssertFalse(doc.text.contains("../shared"), "\(doc.name) refers to ../shared")
        }
    }
}
