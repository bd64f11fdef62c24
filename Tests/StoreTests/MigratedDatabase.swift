import Foundation
import Postgres
import Store
import TestSupport

extension PGTestCase {
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
