import Domain
import Foundation
import Postgres

/// Replay's own table (migration 8): per subscription and topic, the partitions' high watermarks
/// before a replay republished its corrected derivation; later replays skip records below them.
public struct ReplayStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// A subscription's horizon on one topic: the high watermark of each partition, by partition.
    public struct Horizon: BulkRow, Sendable, Equatable {
        public var subscriptionKey: String
        public var topic: String
        public var partitionHighs: [Int64]

        public init(subscriptionKey: String, topic: String, partitionHighs: [Int64]) {
            self.subscriptionKey = subscriptionKey
            self.topic = topic
            self.partitionHighs = partitionHighs
        }

        static let columns: [BulkColumn<Self>] = [
            .text("subscription_key") { $0.subscriptionKey },
            .text("topic") { $0.topic },
            .jsonb("partition_highs") { Array("[\($0.partitionHighs.map(String.init).joined(separator: ","))]".utf8) },
        ]
    }

    /// The horizons of these subscriptions on these topics.
    public func horizons(of keys: [String], topics: [String]) throws -> [Horizon] {
        guard !keys.isEmpty else { return [] }
        let decoder = JSONDecoder()
        return try db.query("""
            SELECT subscription_key, topic, partition_highs::text AS h FROM replay_horizons
            WHERE subscription_key = ANY(\(keys)) AND topic = ANY(\(topics))
            """).map { row in
            Horizon(subscriptionKey: try row.string("subscription_key"), topic: try row.string("topic"),
                    partitionHighs: try decoder.decode([Int64].self, from: Data(try row.string("h").utf8)))
        }
    }

    /// Records (or moves) these horizons, naming the stage replayed and the code version.
    public func save(_ horizons: [Horizon], stage: String, codeVersion: String) throws {
        guard !horizons.isEmpty else { return }
        typealias Rows = BulkRows<Horizon>
        try db.execute("""
            INSERT INTO replay_horizons (\(fragment: Rows.columnList), stage, code_version)
            SELECT \(fragment: Rows.fields("x")), \(stage), \(codeVersion) FROM \(fragment: BulkRows(horizons).recordset("x"))
            ON CONFLICT (subscription_key, topic) DO UPDATE SET partition_highs = EXCLUDED.partition_highs, stage = EXCLUDED.stage,
                code_version = EXCLUDED.code_version, replayed_at = now()
            """)
    }

    /// Of these subscriptions, the ones stored as owned by one of `users`.
    public func owned(by users: Set<String>, among keys: [String]) throws -> Set<String> {
        let rows = try db.query("SELECT subscription_key, user_id FROM subscriptions WHERE subscription_key = ANY(\(keys))")
        var owned: Set<String> = []
        for row in rows {
            let user: String? = try row.decode("user_id")
            if let user, users.contains(user) { owned.insert(try row.string("subscription_key")) }
        }
        return owned
    }

    /// The stored states of these subscriptions (unlocked: the replay holds the stages' groups).
    public func states(_ keys: [String]) throws -> [SubscriptionState] {
        try subscriptionStates(try db.query("""
            SELECT state::text AS state FROM subscriptions WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key
            """))
    }
}
