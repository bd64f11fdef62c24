import Foundation
import Postgres
import Synchronization
import XCTest

/// Base class of the PostgreSQL adapter's and the Store's tests: one real throwaway PostgreSQL
/// (EmbeddedPostgres) per test class, started in class setUp and stopped (directory removed) in class tearDown.
open class PGTestCase: XCTestCase {
    private static let servers = Mutex<[ObjectIdentifier: Result<EmbeddedPostgres, PGError>]>([:])

    override open class func setUp() {
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

    override open class func tearDown() {
        let server = servers.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        if case .success(let server) = server { server.stop() }
        super.tearDown()
    }

    /// This class's server (fails the test if it could not start).
    public var server: EmbeddedPostgres {
        get throws {
            let result = PGTestCase.servers.withLock { $0[ObjectIdentifier(type(of: self))] }
            guard let result else { throw PGError(kind: .usage, message: "no server started for \(type(of: self))") }
            return try result.get()
        }
    }

    public func connect() throws -> PGConnection {
        try PGConnection(url: server.url)
    }

    /// A fresh table name per test so tests in one class never see each other's rows.
    public func uniqueTable(_ prefix: String = "t") -> String {
        "\(prefix)_\(UUID().uuidString.prefix(8).lowercased())"
    }
}
