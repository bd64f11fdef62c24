import Foundation
import Postgres
import Store
import Synchronization
import XCTest

/// Base class (as PostgresTests has it): one real throwaway PostgreSQL (EmbeddedPostgres) per test class, started in
/// class setUp and stopped (directory removed) in class tearDown.
class PGTestCase: XCTestCase {
    private static let servers = Mutex<[ObjectIdentifier: Result<EmbeddedPostgres, PGError>]>([:])

    override class func setUp() {
        super.setUp()
        let started: Result<EmbeddedPostgres, PGError>
        do {
            started = .success(try EmbeddedPostgres.start())
        } catch let error as PGError {
            started = .failure(error)
        } catch {
            started = .failure(PGError(kind: .embeddedServer, message: "\(error)"))
        }
        servers.withLock { $0[ObjectIdentifier(self)] = started }
    }

    override class func tearDown() {
        let server = servers.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        if case .success(let server) = server { server.stop() }
        super.tearDown()
    }

    /// This class's server (fails the test if it could not start).
    var server: EmbeddedPostgres {
        get throws {
            let result = PGTestCase.servers.withLock { $0[ObjectIdentifier(type(of: self))] }
            guard let result else { throw PGError(kind: .usage, message: "no server started for \(type(of: self))") }
            return try result.get()
        }
    }

    func connect() throws -> PGConnection {
        try PGConnection(url: server.url)
    }

    /// A database of its own with StoreLedger's schema, so tests never see each other's rows.
    func migratedDatabase() throws -> PGConnection {
        try PGConnection(url: try migratedDatabaseURL())
    }

    func migratedDatabaseURL() throws -> String {
        let url = try server.createDatabase("s_\(UUID().uuidString.prefix(8).lowercased())")
        let conn = try PGConnection(url: url)
        defer { conn.close() }
        try Store.migrate(conn)
        return url
    }
}

extension PGTestCase {
    /// A fresh table name per test so tests in one class never see each other's rows.
    func uniqueTable(_ prefix: String = "t") -> String {
        "\(prefix)_\(UUID().uuidString.prefix(8).lowercased())"
    }
}
