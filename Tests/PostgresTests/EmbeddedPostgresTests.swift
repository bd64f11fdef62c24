import Foundation
import Postgres
import XCTest

/// Contract: EmbeddedPostgres starts a private server on 127.0.0.1 with a `storeledger`
/// database, and `stop()` (idempotent) leaves neither a process nor its directory behind.
final class EmbeddedPostgresTests: XCTestCase {
    private func postgresProcesses(mentioning directory: String) throws -> String {
        let pgrep = Process()
        pgrep.executableURL = URL(fileURLWithPath: "/usr/bin/pgrep")
        pgrep.arguments = ["-f", directory]
        let pipe = Pipe()
        pgrep.standardOutput = pipe
        try pgrep.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        pgrep.waitUntilExit()
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func testStartServeStopLeavesNothingBehind() throws {
        let started = Date()
        let server = try EmbeddedPostgres.start()
        let startup = Date().timeIntervalSince(started)
        XCTAssertLessThan(startup, 15, "startup took \(startup)s")
        XCTAssertTrue(FileManager.default.fileExists(atPath: server.directory))
        XCTAssertEqual(server.url, "postgres://postgres@127.0.0.1:\(server.port)/storeledger")
        XCTAssertFalse(try postgresProcesses(mentioning: server.directory).isEmpty, "server process is running")

        let conn = try PGConnection(url: server.url)
        let row = try XCTUnwrap(conn.query("""
            SELECT current_database() AS db, current_setting('fsync') AS fsync,
                   current_setting('max_connections') AS max, current_setting('server_encoding') AS enc
            """).first)
        XCTAssertEqual(try row.string("db"), "storeledger")
        XCTAssertEqual(try row.string("fsync"), "off")
        XCTAssertEqual(try row.string("max"), "200")
        XCTAssertEqual(try row.string("enc"), "UTF8")
        conn.close()

        server.stop()
        XCTAssertFalse(FileManager.default.fileExists(atPath: server.directory))
        XCTAssertEqual(try postgresProcesses(mentioning: server.directory), "")
        server.stop()  // idempotent
        XCTAssertThrowsError(try PGConnection(url: server.url))
    }

    func testExplicitDirectoryIsUsedAndRemoved() throws {
        let directory = NSTemporaryDirectory() + "/storeledger-pg-explicit-\(UUID().uuidString.prefix(8))"
        let server = try EmbeddedPostgres.start(directory: directory)
        XCTAssertEqual(server.directory, URL(fileURLWithPath: directory).standardizedFileURL.path)
        XCTAssertTrue(FileManager.default.fileExists(atPath: server.directory + "/data/PG_VERSION"))
        let other = try server.createDatabase("second")
        XCTAssertEqual(try PGConnection(url: other).query("SELECT current_database() AS db").first?.string("db"), "second")
        server.stop()
        XCTAssertFalse(FileManager.default.fileExists(atPath: server.directory))
        XCTAssertEqual(try postgresProcesses(mentioning: server.directory), "")
    }

    func testNonEmptyDirectoryIsRefused() throws {
        let directory = NSTemporaryDirectory() + "/storeledger-pg-busy-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(atPath: directory + "/keep", contents: Data("x".utf8))
        XCTAssertThrowsError(try EmbeddedPostgres.start(directory: directory)) { error in
            XCTAssertEqual((error as? PGError)?.kind, .embeddedServer)
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory + "/keep"))
    }
}
