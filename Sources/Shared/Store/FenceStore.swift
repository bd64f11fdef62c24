import Postgres

/// Partition owner fences (migration 3, issue 9): a member claims the partitions a rebalance gave
/// it by bumping their generation; each batch checks, in its transaction, that they are still at
/// the generation it claimed.
public struct FenceStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// A partition of a topic and its owner generation.
    public struct Generation: Sendable, Equatable {
        public var topic: String
        public var partition: Int32
        public var generation: Int64
    }

    /// Claims the partitions for `owner` (auto-committed when outside a transaction): each one's
    /// generation goes up by one, starting at 1.
    public func claim(group: String, owner: String, partitions: [(topic: String, partition: Int32)]) throws -> [Generation] {
        try generations(try db.query("""
            INSERT INTO partition_owners (group_id, topic, partition, generation, owner)
            SELECT \(group), t, p, 1, \(owner) FROM unnest(\(partitions.map(\.topic))::text[], \(partitions.map { Int($0.partition) })::integer[]) AS x(t, p)
            ON CONFLICT (group_id, topic, partition)
            DO UPDATE SET generation = partition_owners.generation + 1, owner = EXCLUDED.owner, claimed_at = now()
            RETURNING topic, partition, generation
            """))
    }

    /// The partitions' current generations, FOR SHARE: a claim waits for a batch already past its
    /// check to commit, so effects and claims are serialised.
    public func currentGenerations(group: String, partitions: [(topic: String, partition: Int32)]) throws -> [Generation] {
        try generations(try db.query("""
            SELECT o.topic, o.partition, o.generation FROM partition_owners o
            JOIN unnest(\(partitions.map(\.topic))::text[], \(partitions.map { Int($0.partition) })::integer[]) AS x(t, p)
              ON o.topic = x.t AND o.partition = x.p
            WHERE o.group_id = \(group)
            ORDER BY o.topic, o.partition
            FOR SHARE OF o
            """))
    }

    private func generations(_ rows: PGRows) throws -> [Generation] {
        try rows.map { Generation(topic: try $0.string("topic"), partition: try $0.int32("partition"), generation: try $0.int64("generation")) }
    }
}
