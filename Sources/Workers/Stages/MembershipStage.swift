import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Membership: applies commands to each subscription's state, appends the ledger entries they
/// cause and refreshes the membership projection, all in the batch's transaction.
public struct MembershipStage: StageLogic {
    public let name = "membership"
    public let inputTopics = [Topic.commands]
    public let usesDatabase = true

    public init() {}

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        guard let database else { throw StageError.configuration("membership needs PostgreSQL") }
        var result = StageBatchResult()
        let decoder = JSONDecoder()
        var commands: [MembershipCommand] = []
        for record in records {
            do {
                commands.append(try decoder.decode(MembershipCommand.self, from: Data(record.value)))
            } catch {
                result.deadLetters.append(DeadLetter(stage: name, record: record,
                                                     failure: PermanentFailure("invalid_command", "not a MembershipCommand: \(error)")))
            }
        }
        guard !commands.isEmpty else { return result }
        let keys = Array(Set(commands.map(\.subscriptionKey)))
        var states = try loadStates(keys: keys, database)
        var entries: [LedgerEntry] = []
        var touched: Set<String> = []
        for command in commands {
            var state = states[command.subscriptionKey] ?? SubscriptionState(subscriptionKey: command.subscriptionKey)
            let caused = apply(command, to: &state)
            states[command.subscriptionKey] = state
            touched.insert(command.subscriptionKey)
            entries += caused
        }
        try appendLedger(entries, states: states, database)
        try saveStates(states.filter { touched.contains($0.key) }, database)
        Metrics.shared.increment("storeledger_ledger_entries_total", by: Double(entries.count))
        return result
    }

    private func loadStates(keys: [String], _ db: PGConnection) throws -> [String: SubscriptionState] {
        var states: [String: SubscriptionState] = [:]
        let decoder = JSONDecoder()
        for row in try db.query("SELECT subscription_key, state::text AS state FROM subscriptions WHERE subscription_key = ANY(\(keys)) FOR UPDATE") {
            states[try row.string("subscription_key")] =
                try decoder.decode(SubscriptionState.self, from: Data(try row.string("state").utf8))
        }
        return states
    }

    private func appendLedger(_ entries: [LedgerEntry], states: [String: SubscriptionState], _ db: PGConnection) throws {
        guard !entries.isEmpty else { return }
        let encoder = JSONEncoder.pipeline
        func json<T: Encodable>(_ value: T) throws -> String { String(decoding: try encoder.encode(value), as: UTF8.self) }
        var columns = LedgerColumns()
        for entry in entries {
            columns.keys.append(entry.subscriptionKey)
            columns.kinds.append(entry.kind.rawValue)
            columns.purchases.append(entry.purchaseId ?? "")
            columns.groups.append(entry.group ?? "")
            columns.starts.append(entry.interval.map { String($0.startMs) } ?? "")
            columns.ends.append(entry.interval?.endMs.map(String.init) ?? "")
            columns.amounts.append(entry.amount.map(String.init) ?? "")
            columns.befores.append(try json(entry.before))
            columns.afters.append(try json(entry.after))
            columns.reasons.append(entry.reason)
            columns.commands.append(entry.commandId)
            columns.causes.append(try json(entry.cause))
            columns.users.append(states[entry.subscriptionKey]?.userId ?? "")
        }
        // One multi-row insert per batch; empty strings stand for NULL (nullif) since text[] binds have no NULLs.
        try db.execute("""
            INSERT INTO ledger (subscription_key, kind, purchase_id, group_id, interval_start_ms, interval_end_ms, amount,
                                before_intervals, after_intervals, reason, command_id, cause, user_id)
            SELECT k, kind, nullif(p, ''), nullif(g, ''), nullif(s, '')::bigint, nullif(e, '')::bigint, nullif(a, '')::integer,
                   b::jsonb, af::jsonb, r, c, ca::jsonb, nullif(u, '')
            FROM unnest(\(columns.keys)::text[], \(columns.kinds)::text[], \(columns.purchases)::text[], \(columns.groups)::text[],
                        \(columns.starts)::text[], \(columns.ends)::text[], \(columns.amounts)::text[], \(columns.befores)::text[],
                        \(columns.afters)::text[], \(columns.reasons)::text[], \(columns.commands)::text[], \(columns.causes)::text[],
                        \(columns.users)::text[])
                 WITH ORDINALITY AS t(k, kind, p, g, s, e, a, b, af, r, c, ca, u, n)
            ORDER BY n
            """)
    }

    private struct LedgerColumns {
        var keys: [String] = [], kinds: [String] = [], purchases: [String] = [], groups: [String] = []
        var starts: [String] = [], ends: [String] = [], amounts: [String] = [], befores: [String] = []
        var afters: [String] = [], reasons: [String] = [], commands: [String] = [], causes: [String] = []
        var users: [String] = []
    }

    private func saveStates(_ states: [String: SubscriptionState], _ db: PGConnection) throws {
        guard !states.isEmpty else { return }
        let encoder = JSONEncoder.pipeline
        var keys: [String] = [], users: [String] = [], blobs: [String] = []
        var mKeys: [String] = [], mGroups: [String] = [], mIntervals: [String] = [], mExpires: [String] = []
        for (key, state) in states.sorted(by: { $0.key < $1.key }) {
            keys.append(key)
            users.append(state.userId ?? "")
            blobs.append(String(decoding: try encoder.encode(state), as: UTF8.self))
            for group in state.groups {
                let intervals = state.entitlement(group: group)
                mKeys.append(key)
                mGroups.append(group)
                mIntervals.append(String(decoding: try encoder.encode(intervals), as: UTF8.self))
                mExpires.append(intervals.last.map { $0.endMs.map(String.init) ?? "" } ?? "")
            }
        }
        try db.execute("""
            INSERT INTO subscriptions (subscription_key, user_id, state)
            SELECT k, nullif(u, ''), s::jsonb FROM unnest(\(keys)::text[], \(users)::text[], \(blobs)::text[]) AS t(k, u, s)
            ON CONFLICT (subscription_key) DO UPDATE SET user_id = EXCLUDED.user_id, state = EXCLUDED.state, updated_at = now()
            """)
        guard !mKeys.isEmpty else { return }
        try db.execute("""
            INSERT INTO membership (subscription_key, group_id, intervals, expires_ms)
            SELECT k, g, i::jsonb, nullif(e, '')::bigint FROM unnest(\(mKeys)::text[], \(mGroups)::text[], \(mIntervals)::text[], \(mExpires)::text[]) AS t(k, g, i, e)
            ON CONFLICT (subscription_key, group_id) DO UPDATE SET intervals = EXCLUDED.intervals, expires_ms = EXCLUDED.expires_ms, updated_at = now()
            """)
    }
}
