import Foundation
import Runtime
import XCTest

/// Secrets on disk: owner-only from creation, replaced whole, nothing left behind.
final class PrivateFileTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "storeledger-private-file-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(atPath: directory) }

    private func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    func testWritesOwnerOnlyWhateverTheUmaskAndLeavesNoTemporaryFile() throws {
        let path = directory + "/key.p8"
        let previous = umask(0)   // the widest umask: a plain create would be world-readable
        defer { umask(previous) }
        try PrivateFile.write(Array("secret".utf8), to: path)
        XCTAssertEqual(try mode(path), 0o600)
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("secret".utf8))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), ["key.p8"])
    }

    func testReplacesAnExistingFileWholeAndTightensItsMode() throws {
        let path = directory + "/secret"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(repeating: 0x41, count: 4096),
                                                     attributes: [.posixPermissions: 0o644]))
        try PrivateFile.write(Array("short".utf8), to: path)
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("short".utf8))
        XCTAssertEqual(try mode(path), 0o600)
    }

    func testAFailureNamesThePathAndLeavesNothing() throws {
        let path = directory + "/missing/secret"
        XCTAssertThrowsError(try PrivateFile.write([1, 2, 3], to: path)) { error in
            XCTAssertTrue("\(error)".contains(path), "\(error)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [])
    }

    func testReplacesALinkAtThePathRatherThanWritingThroughIt() throws {
        // A link planted where the secret goes: rename replaces the link itself, its target keeps its bytes.
        let target = directory + "/target"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("untouched".utf8)))
        let path = directory + "/link"
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
        try PrivateFile.write(Array("secret".utf8), to: path)
        XCTAssertEqual(FileManager.default.contents(atPath: target), Data("untouched".utf8))
        XCTAssertNil(try? FileManager.default.destinationOfSymbolicLink(atPath: path))
        XCTAssertEqual(try mode(path), 0o600)
    }
}
