import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Membership: applies commands to each subscription's state, appends the ledger entries they
/// cause and refreshes the projections (per subscription, per user, finance facts), all in the
/// batch's transaction. Per batch the SQL is a fixed number of set-based statements.
///
/// Users (R6): a batch locks the `users` rows of every user it touches (in id order) before reading
/// their other subscriptions, so two workers that own two subscriptions of one user serialise on the
/// user and each computes the user's projection from committed state.
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
        let outcome = try MembershipWriter(database).apply(commands)
        Metrics.shared.increment("storeledger_ledger_entries_total", by: Double(outcome.entries))
        return result
    }
}

/// The PostgreSQL side of membership, usable outside a stage (benchmarks, rebuilds).
public struct MembershipWriter {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    public struct Outcome: Sendable { public var entries: Int; public var subscriptions: Int }

    /// Applies commands in order inside the caller's transaction.
    public func apply(_ commands: [MembershipCommand]) throws -> Outcome {
        let keys = Array(Set(commands.map(\.subscriptionKey))).sorted()
        let loaded = try loadStates(db, "SELECT state::text AS state FROM subscriptions WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key FOR UPDATE")
        var users = Set(loaded.compactMap(\.userId))
        for command in commands { if case .linkUser(let link) = command.action { users.insert(link.userId) } }
        var others: [SubscriptionState] = []
        if !users.isEmpty {
            let list = users.sorted()
            try db.execute("INSERT INTO users (user_id) SELECT u FROM unnest(\(list)::text[]) AS t(u) ORDER BY u ON CONFLICT DO NOTHING")
            _ = try db.query("SELECT user_id FROM users WHERE user_id = ANY(\(list)) ORDER BY user_id FOR UPDATE")
            others = try loadStates(db, """
                SELECT state::text AS state FROM subscriptions
                WHERE user_id = ANY(\(list)) AND NOT (subscription_key = ANY(\(keys))) ORDER BY subscription_key
                """)
        }
        let original = MembershipBook(loaded + others)
        var book = original
        var entries: [LedgerEntry] = []
        for command in commands { entries += book.apply(command) }

        let changed = keys.filter { book.subscriptions[$0] != original.subscriptions[$0] }
        var affectedUsers: Set<String> = []
        for key in changed {
            if let user = book.subscriptions[key]?.userId { affectedUsers.insert(user) }
            if let user = original.subscriptions[key]?.userId { affectedUsers.insert(user) }
        }
        try appendLedger(entries)
        try saveStates(changed.compactMap { book.subscriptions[$0] })
        try saveGrants(changed.compactMap { key in book.subscriptions[key].map { ($0, original.subscriptions[key]) } })
        try saveUserMembership(affectedUsers.sorted(), book)
        return Outcome(entries: entries.count, subscriptions: changed.count)
    }

    private func loadStates(_ db: PGConnection, _ sql: SQL) throws -> [SubscriptionState] {
        let decoder = JSONDecoder()
        return try db.query(sql).map { try decoder.decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) }
    }

    private func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try JSONEncoder.pipeline.encode(value), as: UTF8.self)
    }

    private func appendLedger(_ entries: [LedgerEntry]) throws {
        guard !entries.isEmpty else { return }
        var c = LedgerColumns()
        for entry in entries {
            c.keys.append(entry.subscriptionKey)
            c.kinds.append(entry.kind.rawValue)
            c.purchases.append(entry.purchaseId)
            c.products.append(entry.productId)
            c.groups.append(entry.group)
            c.starts.append(entry.interval?.startMs)
            c.ends.append(entry.interval?.endMs)
            c.amounts.append(entry.amount)
            c.befores.append(try json(entry.before))
            c.afters.append(try json(entry.after))
            c.balances.append(entry.balanceAfter)
            c.cutKinds.append(entry.cutKind?.rawValue)
            c.reasons.append(entry.reason)
            c.commands.append(entry.commandId)
            c.causes.append(try json(entry.cause))
            c.users.append(entry.userId)
        }
        // One multi-row insert per batch, in the order the entries were made.
        try db.execute("""
            INSERT INTO ledger (subscription_key, kind, purchase_id, product_id, group_id, interval_start_ms, interval_end_ms,
                                amount, before_intervals, after_intervals, balance_after, cut_kind, reason, command_id, cause, user_id)
            SELECT k, kind, p, pr, g, s, e, a::integer, b::jsonb, af::jsonb, bal::integer, ck, r, c, ca::jsonb, u
            FROM unnest(\(c.keys)::text[], \(c.kinds)::text[], \(c.purchases)::text[], \(c.products)::text[], \(c.groups)::text[],
                        \(c.starts)::bigint[], \(c.ends)::bigint[], \(c.amounts)::bigint[], \(c.befores)::text[],
                        \(c.afters)::text[], \(c.balances)::bigint[], \(c.cutKinds)::text[], \(c.reasons)::text[],
                        \(c.commands)::text[], \(c.causes)::text[], \(c.users)::text[])
                 WITH ORDINALITY AS t(k, kind, p, pr, g, s, e, a, b, af, bal, ck, r, c, ca, u, n)
            ORDER BY n
            """)
    }

    private struct LedgerColumns {
        var keys: [String] = [], kinds: [String] = [], purchases: [String?] = [], products: [String?] = []
        var groups: [String?] = [], starts: [Int64?] = [], ends: [Int64?] = [], amounts: [Int?] = []
        var befores: [String] = [], afters: [String] = [], balances: [Int?] = [], cutKinds: [String?] = []
        var reasons: [String] = [], commands: [String] = [], causes: [String] = [], users: [String?] = []
    }

    /// The subscription's state and its per-group projection (what `GET /v1/subscriptions/{id}` shows).
    private func saveStates(_ states: [SubscriptionState]) throws {
        guard !states.isEmpty else { return }
        var keys: [String] = [], users: [String?] = [], blobs: [String] = []
        var mKeys: [String] = [], mGroups: [String] = [], mIntervals: [String] = [], mExpires: [Int64?] = [], mViews: [String] = []
        for state in states {
            keys.append(state.subscriptionKey)
            users.append(state.userId)
            blobs.append(try json(state))
            for view in groupMemberships(of: [state]) {
                mKeys.append(state.subscriptionKey)
                mGroups.append(view.group)
                mIntervals.append(try json(view.intervals))
                mExpires.append(view.expiresMs)
                mViews.append(try json(view))
            }
        }
        try db.execute("""
            INSERT INTO subscriptions (subscription_key, user_id, state)
            SELECT k, u, s::jsonb FROM unnest(\(keys)::text[], \(users)::text[], \(blobs)::text[]) AS t(k, u, s)
            ON CONFLICT (subscription_key) DO UPDATE SET user_id = EXCLUDED.user_id, state = EXCLUDED.state, updated_at = now()
            """)
        guard !mKeys.isEmpty else { return }
        try db.execute("""
            INSERT INTO membership (subscription_key, group_id, intervals, expires_ms, view)
            SELECT k, g, i::jsonb, e, v::jsonb
            FROM unnest(\(mKeys)::text[], \(mGroups)::text[], \(mIntervals)::text[], \(mExpires)::bigint[], \(mViews)::text[]) AS t(k, g, i, e, v)
            ON CONFLICT (subscription_key, group_id) DO UPDATE
                SET intervals = EXCLUDED.intervals, expires_ms = EXCLUDED.expires_ms, view = EXCLUDED.view, updated_at = now()
            """)
    }

    /// R10: one finance row per purchase whose facts, granted interval or owner changed.
    private func saveGrants(_ pairs: [(SubscriptionState, SubscriptionState?)]) throws {
        var c = GrantColumns()
        for (state, before) in pairs {
            let ownerChanged = state.userId != before?.userId
            for (id, grant) in state.grants.sorted(by: { $0.key < $1.key }) {
                guard ownerChanged || before?.grants[id] != grant || before?.granted[id] != state.granted[id]
                        || before?.credited[id] != state.credited[id] else { continue }
                c.keys.append(state.subscriptionKey)
                c.ids.append(id)
                c.users.append(state.userId)
                c.groups.append(grant.group)
                c.products.append(grant.productId)
                c.kinds.append(grant.productKind.rawValue)
                c.transactions.append(grant.transactionId)
                c.originals.append(grant.originalTransactionId)
                c.facts.append(try json(grant))
                c.trials.append(grant.finance.isTrial)
                c.intros.append(grant.finance.isIntro)
                c.promos.append(grant.finance.promotionalOfferId)
                c.codes.append(grant.finance.offerCodeRefName)
                c.offerTypes.append(grant.finance.offerType)
                c.offerIds.append(grant.finance.offerIdentifier)
                c.purchases.append(grant.startMs)
                c.expires.append(grant.endMs)
                c.cancels.append(grant.cut?.atMs)
                c.cutKinds.append(grant.cut?.kind.rawValue)
                c.environments.append(grant.environment)
                c.grantedStarts.append(state.granted[id]?.startMs)
                c.grantedEnds.append(state.granted[id]?.endMs)
            }
        }
        guard !c.keys.isEmpty else { return }
        try db.execute("""
            INSERT INTO grants (subscription_key, purchase_id, user_id, group_id, product_id, product_kind, transaction_id,
                                original_transaction_id, grant_facts, is_trial, is_intro, promotional_offer_id,
                                offer_code_ref_name, offer_type, offer_identifier, purchase_ms, expires_ms, cancellation_ms,
                                cut_kind, environment, granted_start_ms, granted_end_ms)
            SELECT k, p, u, g, pr, kd, tx, o, f::jsonb, tr, it, po, oc, ot::integer, oi, pm, em, cm, ck, env, gs, ge
            FROM unnest(\(c.keys)::text[], \(c.ids)::text[], \(c.users)::text[], \(c.groups)::text[], \(c.products)::text[],
                        \(c.kinds)::text[], \(c.transactions)::text[], \(c.originals)::text[], \(c.facts)::text[],
                        \(c.trials)::boolean[], \(c.intros)::boolean[], \(c.promos)::text[], \(c.codes)::text[],
                        \(c.offerTypes)::bigint[], \(c.offerIds)::text[], \(c.purchases)::bigint[], \(c.expires)::bigint[],
                        \(c.cancels)::bigint[], \(c.cutKinds)::text[], \(c.environments)::text[], \(c.grantedStarts)::bigint[],
                        \(c.grantedEnds)::bigint[])
                 AS t(k, p, u, g, pr, kd, tx, o, f, tr, it, po, oc, ot, oi, pm, em, cm, ck, env, gs, ge)
            ON CONFLICT (subscription_key, purchase_id) DO UPDATE SET
                user_id = EXCLUDED.user_id, group_id = EXCLUDED.group_id, product_id = EXCLUDED.product_id,
                product_kind = EXCLUDED.product_kind, transaction_id = EXCLUDED.transaction_id,
                original_transaction_id = EXCLUDED.original_transaction_id, grant_facts = EXCLUDED.grant_facts,
                is_trial = EXCLUDED.is_trial, is_intro = EXCLUDED.is_intro, promotional_offer_id = EXCLUDED.promotional_offer_id,
                offer_code_ref_name = EXCLUDED.offer_code_ref_name, offer_type = EXCLUDED.offer_type,
                offer_identifier = EXCLUDED.offer_identifier, purchase_ms = EXCLUDED.purchase_ms, expires_ms = EXCLUDED.expires_ms,
                cancellation_ms = EXCLUDED.cancellation_ms, cut_kind = EXCLUDED.cut_kind, environment = EXCLUDED.environment,
                granted_start_ms = EXCLUDED.granted_start_ms, granted_end_ms = EXCLUDED.granted_end_ms, updated_at = now()
            """)
    }

    private struct GrantColumns {
        var keys: [String] = [], ids: [String] = [], users: [String?] = [], groups: [String] = [], products: [String] = []
        var kinds: [String] = [], transactions: [String] = [], originals: [String] = [], facts: [String] = []
        var trials: [Bool] = [], intros: [Bool] = [], promos: [String?] = [], codes: [String?] = [], offerTypes: [Int?] = []
        var offerIds: [String?] = [], purchases: [Int64] = [], expires: [Int64?] = [], cancels: [Int64?] = []
        var cutKinds: [String?] = [], environments: [String?] = [], grantedStarts: [Int64?] = [], grantedEnds: [Int64?] = []
    }

    /// Rewrites the per-user projection of every user whose subscriptions changed (or moved).
    private func saveUserMembership(_ users: [String], _ book: MembershipBook) throws {
        guard !users.isEmpty else { return }
        var uUsers: [String] = [], uGroups: [String] = [], uIntervals: [String] = [], uExpires: [Int64?] = [], uViews: [String] = []
        for user in users {
            for view in groupMemberships(of: book.states(ofUser: user)) {
                uUsers.append(user)
                uGroups.append(view.group)
                uIntervals.append(try json(view.intervals))
                uExpires.append(view.expiresMs)
                uViews.append(try json(view))
            }
        }
        try db.execute("DELETE FROM user_membership WHERE user_id = ANY(\(users))")
        guard !uUsers.isEmpty else { return }
        try db.execute("""
            INSERT INTO user_membership (user_id, group_id, intervals, expires_ms, view)
            SELECT u, g, i::jsonb, e, v::jsonb
            FROM unnest(\(uUsers)::text[], \(uGroups)::text[], \(uIntervals)::text[], \(uExpires)::bigint[], \(uViews)::text[]) AS t(u, g, i, e, v)
            """)
    }
}

extension MembershipWriter {
    /// Rebuilds every projection from the ledger alone (the source of truth) and compares it with the
    /// stored states; returns the subscriptions whose stored grants differ from the ledger's fold.
    public func verifyAgainstLedger() throws -> [String] {
        let decoder = JSONDecoder()
        var entries: [LedgerEntry] = []
        for row in try db.query("SELECT * FROM ledger ORDER BY entry_id") {
            entries.append(try LedgerRow.entry(row, decoder: decoder))
        }
        let fromLedger = LedgerProjection(entries: entries)
        let fromStates = LedgerProjection(states: try loadStates(db, "SELECT state::text AS state FROM subscriptions"))
        let keys = Set(fromLedger.subscriptions.keys).union(fromStates.subscriptions.keys)
        return keys.filter { fromLedger.subscriptions[$0] != fromStates.subscriptions[$0] }.sorted()
    }
}

/// A ledger row back as a `LedgerEntry`.
public enum LedgerRow {
    public static func entry(_ row: PGRow, decoder: JSONDecoder) throws -> LedgerEntry {
        func decode<T: Decodable>(_ type: T.Type, _ column: String) throws -> T {
            try decoder.decode(type, from: Data(try row.string(column).utf8))
        }
        let start: Int64? = try row.decode("interval_start_ms")
        let end: Int64? = try row.decode("interval_end_ms")
        let cutKind: String? = try row.decode("cut_kind")
        return LedgerEntry(
            kind: LedgerEntry.Kind(rawValue: try row.string("kind")) ?? .record,
            subscriptionKey: try row.string("subscription_key"), userId: try row.decode("user_id"),
            purchaseId: try row.decode("purchase_id"), productId: try row.decode("product_id"), group: try row.decode("group_id"),
            interval: start.map { Interval(startMs: $0, endMs: end) }, amount: try row.decode("amount"),
            before: try decode([Interval].self, "before_intervals"), after: try decode([Interval].self, "after_intervals"),
            balanceAfter: try row.decode("balance_after"), cutKind: cutKind.flatMap(Cut.Kind.init(rawValue:)),
            reason: try row.string("reason"), commandId: try row.string("command_id"), cause: try decode(Cause.self, "cause"))
    }
}
