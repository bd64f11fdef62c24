import Foundation
import Kafka
import Postgres
import Store

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
        for row in try FenceStore(db).claim(group: groupId, owner: owner, partitions: partitions.map { ($0.topic, $0.partition) }) {
            claimed[PartitionID(topic: row.topic, partition: row.partition)] = row.generation
        }
        pending = nil
    }

    /// Inside the batch's transaction: throws `Fenced` unless every partition is still ours.
    func check(_ partitions: Set<PartitionID>, _ db: PGConnection) throws {
        guard !partitions.isEmpty else { return }
        let list = partitions.sorted()
        var current: [PartitionID: Int64] = [:]
        for row in try FenceStore(db).currentGenerations(group: groupId, partitions: list.map { ($0.topic, $0.partition) }) {
            current[PartitionID(topic: row.topic, partition: row.partition)] = row.generation
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
