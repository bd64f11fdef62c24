import Postgres

/// What a primary says about its standbys (`pg_stat_replication`), for tests and failover drills.
public struct ReplicationQueries {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// True when a standby streams from this server, as the synchronous one when `synchronous`.
    public func standbyStreams(synchronous: Bool) throws -> Bool {
        let state = try db.query("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'").first?.string("sync_state")
        return state == (synchronous ? "sync" : "async")
    }

    /// For `EmbeddedPostgres.startStandby(streams:)`.
    public static func standbyStreams(_ db: PGConnection, synchronous: Bool) throws -> Bool {
        try ReplicationQueries(db).standbyStreams(synchronous: synchronous)
    }
}
