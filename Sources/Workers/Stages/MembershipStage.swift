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
        for command in commands { if case .linkUser(let link) = command.action { users.insert(link.userId) } }
        var others: [SubscriptionState] = []
        if !users.isEmpty {
            let ordered = users.sorted()
            try store.lockUsers(ordered)
            others = try store.states(ofUsers: ordered, excluding: keys)
        }
        let original = MembershipBook(loaded + others)
        var book = original
        var described: [DescribedEntry] = []
        // A replay's compensations say so in every entry they cause (issue 13).
        for command in commands { described += ReplayCompensation.labelled(book.applyDescribing(command), by: command) }
        let entries = described.map(\.entry)

        let changed = keys.filter { book.subscriptions[$0] != original.subscriptions[$0] }
        var affectedUsers: Set<String> = []
        for key in changed {
            if let user = book.subscriptions[key]?.userId { affectedUsers.insert(user) }
            if let user = original.subscriptions[key]?.userId { affectedUsers.insert(user) }
        }
        // Issue 17: the outbox rows go in with their entries (same transaction), under the users' locks.
        try appendOutbox(described, entryIds: try appendLedger(entries))
        try store.saveStates(changed.compactMap { key in book.subscriptions[key].map { SubscriptionRow($0, json: $0.json) } })
        // After the states: the finance rows take the grant facts from them.
        try store.saveGrants(grantRows(changed.compactMap { key in book.subscriptions[key].map { ($0, original.subscriptions[key]) } }))
        let viewUsers = affectedUsers.sorted()
        try store.replaceUserMembership(users: viewUsers, with: userMembershipRows(viewUsers, book))
        return Outcome(entries: entries.count, subscriptions: changed.count)
    }

    /// Returns the entries' ids, in order.
    private func appendLedger(_ entries: [LedgerEntry]) throws -> [Int64] {
        guard !entries.isEmpty else { return [] }
        let ids = try MembershipStore(db).reserveEntryIds(entries.count)
        var causes: [String: [UInt8]] = [:]   // one cause per command, shared by its entries
        var rows: [LedgerRow] = []
        rows.reserveCapacity(entries.count)
        for (index, entry) in entries.enumerated() {
            let cause = causes[entry.commandId] ?? entry.cause.json
            causes[entry.commandId] = cause
            rows.append(LedgerRow(id: ids[index], entry: entry, cause: cause))
        }
        try MembershipStore(db).appendLedger(rows)
        return ids
    }

    /// R10: one finance row per purchase whose facts, granted interval or owner changed.
    private func grantRows(_ pairs: [(SubscriptionState, SubscriptionState?)]) -> [GrantRow] {
        var rows: [GrantRow] = []
        for (state, before) in pairs {
            let ownerChanged = state.userId != before?.userId
            for (id, grant) in state.grants.sorted(by: { $0.key < $1.key }) {
                guard ownerChanged || before?.grants[id] != grant || before?.granted[id] != state.granted[id]
                        || before?.credited[id] != state.credited[id] else { continue }
                rows.append(GrantRow(subscriptionKey: state.subscriptionKey, purchaseId: id, userId: state.userId, grant: grant,
                                     granted: state.granted[id]))
            }
        }
        return rows
    }

    /// The per-user projection of every user whose subscriptions changed (or moved).
    private func userMembershipRows(_ users: [String], _ book: MembershipBook) -> [UserMembershipRow] {
        users.flatMap { user in
            groupMemberships(of: book.states(ofUser: user)).map { UserMembershipRow(userId: user, membership: $0, view: $0.json) }
        }
    }
}
