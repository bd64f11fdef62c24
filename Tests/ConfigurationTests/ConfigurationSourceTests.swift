import Configuration
import Foundation
import XCTest

/// The list against the repository: docs/configuration.md documents exactly the listed settings
/// (and the roles it names), and no code outside the Configuration module names a variable or
/// reads the environment.
final class ConfigurationSourceTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The first cell of each table row of docs/configuration.md: the variables it documents, with
    /// the role in parentheses when the row names one (`STORELEDGER_PORT`, `X` (signer)).
    private func documentedRows() throws -> [(names: [String], role: String?)] {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let name = try NSRegularExpression(pattern: "`([A-Z][A-Z0-9_]*[A-Z0-9])`")
        let role = try NSRegularExpression(pattern: "`\\s*\\(([a-z]+)\\)\\s*$")
        return text.split(separator: "\n").compactMap { line -> (names: [String], role: String?)? in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            guard line.hasPrefix("|"), cells.count > 2 else { return nil }
            let cell = String(cells[1]).trimmingCharacters(in: .whitespaces)
            let range = NSRange(cell.startIndex..., in: cell)
            let names = name.matches(in: cell, range: range).map { String(cell[Range($0.range(at: 1), in: cell)!]) }
            guard !names.isEmpty else { return nil }
            let named = role.firstMatch(in: cell, range: range).map { String(cell[Range($0.range(at: 1), in: cell)!]) }
            return (names, named)
        }
    }

    /// A variable's name, or a read of the environment (passing `environ` on to a spawned child is fine).
    private static func forbidden() throws -> NSRegularExpression {
        try NSRegularExpression(pattern: "STORELEDGER_(?!FUZZING\\b)|processInfo\\.environment|ProcessInfo\\(\\)\\.environment|\\bgetenv\\(")
    }

    func testTheDocumentationListsExactlyTheSettings() throws {
        let rows = try documentedRows()
        let documented = Set(rows.flatMap(\.names))
        XCTAssertGreaterThan(documented.count, 60)
        for setting in Setting.all where !documented.contains(setting.name) {
            XCTFail("\(setting) is in Setting.all but docs/configuration.md has no row for it")
        }
        for name in documented.sorted() where Setting.named(name) == nil {
            XCTFail("docs/configuration.md documents \(name), which is not in Setting.all")
        }
        var checkedRoles = 0
        for row in rows {
            guard let roleName = row.role else { continue }
            let role = try XCTUnwrap(ProcessRole(rawValue: roleName), "docs/configuration.md names an unknown role \(roleName)")
            for name in row.names {
                XCTAssert(Setting.named(name)?.roles.contains(role) == true, "docs/configuration.md says \(roleName) reads \(name); Setting.all does not")
                checkedRoles += 1
            }
        }
        XCTAssertGreaterThan(checkedRoles, 1)
    }

    /// Outside Sources/Shared/Configuration: no `STORELEDGER_` (except the fuzz build's compile
    /// condition `STORELEDGER_FUZZING`, which is no variable) and no environment read.
    func testNoCodeOutsideTheConfigurationModuleNamesAVariableOrReadsTheEnvironment() throws {
        let sources = Self.root.appendingPathComponent("Sources")
        let forbidden = try Self.forbidden()
        var files = 0
        let enumerator = try XCTUnwrap(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        for case let url as URL in enumerator where url.pathExtension == "swift" {
            let path = String(url.path.dropFirst(Self.root.path.count + 1))
            guard !path.hasPrefix("Sources/Shared/Configuration/") else { continue }
            files += 1
            let text = try String(contentsOf: url, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let line = String(line)
                if forbidden.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)) != nil {
                    XCTFail("\(path):\(number + 1) names a variable or reads the environment; use Setting and ConfigurationReader: \(line)")
                }
            }
        }
        XCTAssertGreaterThan(files, 100)
    }

    /// The rule above is no rule if its pattern cannot match.
    func testTheSourceRuleCatchesWhatItForbids() throws {
        let forbidden = try Self.forbidden()
        for line in ["let x = ProcessInfo.processInfo.environment[\"A\"]", "getenv(\"A\")", "// STORELEDGER_PORT", "\"STORELEDGER_FUZZ_JWS_ROOT\""] {
            XCTAssertNotNil(forbidden.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)), line)
        }
        for line in ["#if STORELEDGER_FUZZING", "Setting.port.name", "process.environment = env"] {
            XCTAssertNil(forbidden.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)), line)
        }
    }
}
