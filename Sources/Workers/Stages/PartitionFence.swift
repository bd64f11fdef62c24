import Foundation
import Kafka
import Postgres
import Store

/// Fencing of zombie members (issue 9): Kafka fences a member evicted after a long pause only at
/// its offset commit, after its PostgreSQL effects are already durable. So each member claims the
/// partitions it is assigned in `partition_owners` (bumping their generation) before its first
/// batch, and every batch checks, inside its transaction just before COMMIT (PostgreSQL does, in the
/// COMMIT's round trip: migration 16), that each of its partitions still carries the generation this
/// member claimed. A zombie that resumes after a newer owner claimed finds a newer generation and
/// rolls back. The check takes FOR SHARE row locks, so a claim waits for a batch already past its
/// check to commit: effects and claims are serialised.
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

    /// Inside the batch's transaction, deferred to the COMMIT: unless every partition is still ours, the
    /// COMMIT fails with `FenceStore.fencedState` and does not run.
    func check(_ partitions: Set<PartitionID>, _ db: PGConnection) throws {
        guard !partitions.isEmpty else { return }
        try FenceStore(db).check(group: groupId, partitions: partitions.sorted().map { ($0.topic, $0.partition, claimed[$0] ?? 0) })
    }
}
