import Foundation
import XCTest

/// Public data written by others (real Apple-signed receipts, Apple's published test chain):
/// `../shared/fixtures` beside the package root, or `$STORELEDGER_FIXTURES`. Only tests whose
/// point is Apple's own bytes read it; they skip, naming the missing file, when it is absent.
public enum SharedFixtures {
    public static let root: URL = {
        if let path = ProcessInfo.processInfo.environment["STORELEDGER_FIXTURES"], !path.isEmpty {
            return URL(fileURLWithPath: path).standardized
        }
        return packageRoot.appendingPathComponent("../shared/fixtures").standardized
    }()

    /// The folder holding Package.swift.
    public static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // TestSupport
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()

    public static var isPresent: Bool { FileManager.default.fileExists(atPath: root.path) }

    /// The absolute path of `relative`; skips the calling test when the file is absent.
    /// Call it outside `XCTUnwrap`'s autoclosure: a skip thrown there counts as a failure.
    public static func path(_ relative: String) throws -> String {
        let path = root.appendingPathComponent(relative).path
        guard FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("needs Apple's data \(relative): " + (isPresent ? "not in \(root.path)" : "\(root.path) is absent"))
        }
        return path
    }

    public static func data(_ relative: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: try path(relative)))
    }

    public static func bytes(_ relative: String) throws -> [UInt8] { Array(try data(relative)) }

    public static func text(_ relative: String) throws -> String { String(decoding: try data(relative), as: UTF8.self) }
}
