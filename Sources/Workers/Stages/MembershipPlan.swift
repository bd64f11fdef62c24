import Domain
import Store

/// What one batch of commands does to the states it loaded, as the rows membership writes: pure (no
/// I/O), so `MembershipWriter` only loads and stores, and `bench fold` measures the same work alone.
public struct MembershipPlan {
    /// Every entry the commands cause, in order, with its meaning for the outbox.
    public var described: [DescribedEntry]
    /// The subscriptions whose state changed, and their rows.
    public var changed: [SubscriptionState]
    public var states: [SubscriptionRow]
    /// R10: one finance row per purchase whose facts, granted interval or owner changed.
    public var grants: [GrantRow]
    /// The users whose per-user projection is rewritten, and its rows.
    public var viewUsers: [String]
    public var userViews: [UserMembershipRow]


    /// - Parameters:
    ///   - keys: the subscriptions the commands address, sorted.
    ///   - loaded: their stored states; `others`: the other subscriptions of their users.
    public init(_ commands: [MembershipCommand], keys: [String], loaded: [SubscriptionState], others: [SubscriptionState]) {
        let original = MembershipBook(loaded + others)
        var book = original
        var described: [DescribedEntry] = []
        // A replay's compensations say so in every entry they cause (issue 13).
        for command in commands { described += ReplayCompensation.labelled(book.applyDescribing(command), by: command) }
        self.described = described

        changed = keys.compactMap { key in book.subscriptions[key].flatMap { $0 != original.subscriptions[key] ? $0 : nil } }
        var affectedUsers: Set<String> = []
        for state in changed {
            if let user = state.userId { affectedUsers.insert(user) }
            if let user = original.subscriptions[state.subscriptionKey]?.userId { affectedUsers.insert(user) }
        }
        states = changed.map { SubscriptionRow($0, json: $0.json, isStored: original.subscriptions[$0.subscriptionKey] != nil) }
        grants = Self.grantRows(changed.map { ($0, original.subscriptions[$0.subscriptionKey]) })
        viewUsers = affectedUsers.sorted()
        userViews = viewUsers.flatMap { user in
            groupMemberships(of: book.states(ofUser: user)).map { UserMembershipRow(userId: user, membership: $0, view: $0.json) }
        }
    }

    /// The ledger rows of `described` under their reserved `ids`; one cause document per command, shared by
    /// its entries that have that cause (all of them today: the relay rebuilds each event's cause from it).
    public func ledgerRows(ids: [Int64]) -> [LedgerRow] {
        var causes: [String: (cause: Cause, json: [UInt8])] = [:]
        var rows: [LedgerRow] = []
        rows.reserveCapacity(described.count)
        for (index, item) in described.enumerated() {
            let entry = item.entry
            let json: [UInt8]
            if let cached = causes[entry.commandId], cached.cause == entry.cause {
                json = cached.json
            } else {
                json = entry.cause.json
                causes[entry.commandId] = (entry.cause, json)
            }
            rows.append(LedgerRow(id: ids[index], entry: entry, cause: json))
        }
        return rows
    }

    /// One outbox row per membership-changing entry (issue 17).
    public func outboxRows(ids: [Int64], nowMs: Int64) -> [OutboxRow] {
        var rows: [OutboxRow] = []
        for (index, item) in described.enumerated() {
            guard let event = MembershipEvent(item, entryId: ids[index], recordedAtMs: nowMs) else { continue }
            rows.append(OutboxRow(eventKey: event.partitionKey, entryId: event.ledgerEntryId, subscriptionKey: event.subscriptionKey,
                                  eventType: event.type.rawValue, details: MembershipEventDetails(event).bytes))
        }
        return rows
    }

    private static func grantRows(_ pairs: [(SubscriptionState, SubscriptionState?)]) -> [GrantRow] {
        var rows: [GrantRow] = []
        for (state, before) in pairs {
            let ownerChanged = state.userId != before?.userId
            // The ids sorted, not the grants: sorting key-value pairs copied every grant of every changed state.
            for id in state.grants.keys.sorted() {
                guard let grant = state.grants[id] else { continue }
                guard ownerChanged || before?.grants[id] != grant || before?.granted[id] != state.granted[id]
                        || before?.credited[id] != state.credited[id] else { continue }
                // A state's grants are only ever added to, and written with it: the row exists iff the loaded state had it.
                rows.append(GrantRow(subscriptionKey: state.subscriptionKey, purchaseId: id, userId: state.userId, grant: grant,
                                     granted: state.granted[id], isStored: before?.grants[id] != nil))
            }
        }
        return rows
    }
}
