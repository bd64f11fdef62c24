import Foundation
import Kafka
import Postgres

/// Fencing of zombie members (issue 9): Kafka fences a member evicted after a long pause only at
/// its offset commit, after its PostgreSQL effects are already durable. So each member claims the
/// partitions it is assigned in `partition_owners` (bumping their generation) before its first
/// batch, and every batch checks, inside its transaction just before COMMIT, that each of its
/// partitions still carries the generation this member claimed. A zombie that resumes after a
/// newer owner claimed finds a newer generation and rolls back. The check takes FOR SHARE row
/// locks, so a claim waits for a batch already past its check to commit: effects and claims are
/// serialised.
struct PartitionFence {
    let groupId: String
    /// Who claimed, for operators reading the table.
    let owner: String
    private(set) var claimed: [PartitionID: Int64] = [:]
    private var pending: Set<PartitionID>?

    init(groupId: String, owner: String = "\(ProcessInfo.processInfo.hostName)/\(getpid())") {
        self.groupId = groupId
        self.owner = owner
    }

    /// A rebalance happened: claim these before the next batch.
    mutating func assigned(_ partitions: Set<PartitionID>) {
        pending = partitions
        claimed = claimed.filter { partitions.contains($0.key) }
    }

    /// Claims what a rebalance gave us, in its own (auto-committed) statement.
    mutating func claimIfNeeded(_ db: PGConnection) throws {
        guard let partitions = pending?.sorted() else { return }
        guard !partitions.isEmpty else { pending = nil; return }
        let rows = try db.query("""
            INSERT INTO partition_owners (group_id, topic, partition, generation, owner)
            SELECT \(groupId), t, p, 1, \(owner) FROM unnest(\(partitions.map(\.topic))::text[], \(partitions.map { Int($0.partition) })::integer[]) AS x(t, p)
            ON CONFLICT (group_id, topic, partition)
            DO UPDATE SET generation = partition_owners.generation + 1, owner = EXCLUDED.owner, claimed_at = now()
            RETURNING topic, partition, generation
            """)
        for row in rows {
            claimed[PartitionID(topic: try row.string("topic"), partition: try row.int32("partition"))] = try row.int64("generation")
        }
        pending = nil
    }

    /// Inside the batch's transaction: throws `Fenced` unless every partition is still ours.
    func check(_ partitions: Set<PartitionID>, _ db: PGConnection) throws {
        guard !partitions.isEmpty else { return }
        let list = partitions.sorted()
        var current: [PartitionID: Int64] = [:]
        for row in try db.query("""
            SELECT o.topic, o.partition, o.generation FROM partition_owners o
            JOIN unnest(\(list.map(\.topic))::text[], \(list.map { Int($0.partition) })::integer[]) AS x(t, p)
              ON o.topic = x.t AND o.partition = x.p
            WHERE o.group_id = \(groupId)
            ORDER BY o.topic, o.partition
            FOR SHARE OF o
            """) {
            current[PartitionID(topic: try row.string("topic"), partition: try row.int32("partition"))] = try row.int64("generation")
        }
        for partition in list where current[partition] == nil || current[partition] != claimed[partition] {
            throw Fenced(partition: partition, ours: claimed[partition], current: current[partition])
        }
    }

    struct Fenced: Error, CustomStringConvertible {
        let partition: PartitionID
        let ours: Int64?
        let current: Int64?
        var description: String {
            "fenced: \(partition) is at owner generation \(current.map(String.init) ?? "none"), this member claimed \(ours.map(String.init) ?? "none")"
        }
    }
}
