import Domain
import Kafka
import Postgres
import Runtime
import Store

/// Membership: applies commands to each subscription's state, appends the ledger entries they
/// cause and refreshes the projections (the subscription's state, per user, finance facts), all in
/// the batch's transaction, through `MembershipStore`: a fixed number of set-based statements.
///
/// Users (R6): a batch locks the `users` rows of every user it touches (in id order) before reading
/// their other subscriptions, so two workers that own two subscriptions of one user serialise on the
/// user and each computes the user's projection from committed state.
public struct MembershipStage: StageLogic {
    public let name = "membership"
    public let inputTopics = [Topic.commands]
    public let usesDatabase = true
    public let writesLedger = true

    public init() {}

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        guard let database else { throw StageError.configuration("membership needs PostgreSQL") }
        var result = StageBatchResult()
        var commands: [MembershipCommand] = []
        for record in records {
            do {
                let command = try TopicRecords.decodeCommand(record.value)
                if let failure = EventBounds.check(command) {
                    result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                } else {
                    commands.append(command)
                }
            } catch {
                result.deadLetters.append(DeadLetter(stage: name, record: record,
                                                     failure: PermanentFailure("invalid_command", "not a MembershipCommand: \(error)")))
            }
        }
        guard !commands.isEmpty else { return result }
        let outcome = try MembershipWriter(database).apply(commands)
        Metrics.shared.increment("storeledger_ledger_entries_total", by: Double(outcome.entries))
        return result
    }
}

/// Membership's batch as Store rows, usable outside a stage (benchmarks, rebuilds, replay).
public struct MembershipWriter {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    public struct Outcome: Sendable { public var entries: Int; public var subscriptions: Int }

    /// Applies commands in order inside the caller's transaction.
    public func apply(_ commands: [MembershipCommand]) throws -> Outcome {
        let store = MembershipStore(db)
        let keys = Array(Set(commands.map(\.subscriptionKey))).sorted()
        let loaded = try store.lockStates(keys)
        var users = Set(loaded.compactMap(\.userId))
        let states = Dictionary(loaded.map { ($0.subscriptionKey, $0) }) { first, _ in first }
        for command in commands {
            guard case .linkUser(let link) = command.action else { continue }
            users.insert(link.userId)
            // A claim can hand the subscription to an earlier claimant (R17: a token's claim only
            // moves earlier), who must be locked and loaded too: their other subscriptions make
            // their per-user view, which is rewritten whole.
            users.formUnion(states[command.subscriptionKey]?.claimants ?? [])
        }
        var others: [SubscriptionState] = []
        if !users.isEmpty {
            let ordered = users.sorted()
            try store.lockUsers(ordered)
            others = try store.states(ofUsers: ordered, excluding: keys)
        }
        let plan = MembershipPlan(commands, keys: keys, loaded: loaded, others: others)
        if !plan.described.isEmpty {
            let ids = try store.reserveEntryIds(plan.described.count)
            try store.appendLedger(plan.ledgerRows(ids: ids))
            // Issue 17: the outbox rows go in with their entries (same transaction), under the users' locks:
            // an event exists if and only if its ledger entry does.
            let outbox = plan.outboxRows(ids: ids, nowMs: currentTimeMs())
            try store.appendOutbox(outbox)
            Metrics.shared.increment("storeledger_outbox_events_total", by: Double(outbox.count))
        }
        try store.saveStates(plan.states)
        // After the states: the finance rows take the grant facts from them.
        try store.saveGrants(plan.grants)
        try store.replaceUserMembership(users: plan.viewUsers, with: plan.userViews)
        return Outcome(entries: plan.described.count, subscriptions: plan.states.count)
    }
}
