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

/// The PostgreSQL side of membership, usable outside a stage (benchmarks, rebuilds).
public struct MembershipWriter {
    let db: PGConnection
    /// Key order does not matter: every document goes into a jsonb column.
    let encoder = JSONEncoder()
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
        try saveStates(changed.compactMap { book.subscriptions[$0] })
        // After the states: the finance rows take the grant facts from them.
        try saveGrants(changed.compactMap { key in book.subscriptions[key].map { ($0, original.subscriptions[key]) } })
        try saveUserMembership(affectedUsers.sorted(), book)
        return Outcome(entries: entries.count, subscriptions: changed.count)
    }

    private func loadStates(_ db: PGConnection, _ sql: SQL) throws -> [SubscriptionState] {
        let decoder = JSONDecoder()
        return try db.query(sql).map { try decoder.decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) }
    }

    private func json<T: Encodable>(_ value: T) throws -> [UInt8] { [UInt8](try encoder.encode(value)) }

    /// Returns the entries' ids, in order.
    private func appendLedger(_ entries: [LedgerEntry]) throws -> [Int64] {
        guard !entries.isEmpty else { return [] }
        let ids = try reserveEntryIds(entries.count)
        var rows = JSONRows(capacity: entries.count * 600)
        var causes: [String: [UInt8]] = [:]   // one cause per command, shared by its entries
        for (index, entry) in entries.enumerated() {
            let cause = try causes[entry.commandId] ?? json(entry.cause)
            causes[entry.commandId] = cause
            rows.beginRow()
            rows.int("i", Int64(index))
            rows.int("id", ids[index])
            rows.string("k", entry.subscriptionKey)
            rows.string("kind", entry.kind.rawValue)
            rows.string("p", entry.purchaseId)
            rows.string("pr", entry.productId)
            rows.string("g", entry.group)
            rows.int("s", entry.interval?.startMs)
            rows.int("e", entry.interval?.endMs)
            rows.int("a", entry.amount.map(Int64.init))
            rows.raw("b", intervalsJSON(entry.before))
            rows.raw("af", intervalsJSON(entry.after))
            // The column is `integer`; the state keeps the exact balance (docs/limits.md).
            rows.int("bal", entry.balanceAfter.map { Int64(Int32(clamping: $0)) })
            rows.string("ck", entry.cutKind?.rawValue)
            rows.string("r", entry.reason)
            rows.string("c", entry.commandId)
            rows.raw("ca", cause)
            rows.string("u", entry.userId)
            rows.string("env", entry.environment)
            rows.endRow()
        }
        // One insert per batch, in the order the entries were made (entry ids follow it).
        try db.execute("""
            INSERT INTO ledger (entry_id, subscription_key, kind, purchase_id, product_id, group_id, interval_start_ms, interval_end_ms,
                                amount, before_intervals, after_intervals, balance_after, cut_kind, reason, command_id, cause, user_id,
                                environment)
            SELECT id, k, kind, p, pr, g, s, e, a, b, af, bal, ck, r, c, ca, u, env
            FROM jsonb_to_recordset(\(rows.json)) AS t(i bigint, id bigint, k text, kind text, p text, pr text, g text, s bigint, e bigint,
                                                    a integer, b jsonb, af jsonb, bal integer, ck text, r text, c text,
                                                    ca jsonb, u text, env text)
            ORDER BY i
            """)
        return ids
    }

    /// The subscription's state and its per-group projection (what `GET /v1/subscriptions/{id}` shows).
    private func saveStates(_ states: [SubscriptionState]) throws {
        guard !states.isEmpty else { return }
        var subscriptions = JSONRows(capacity: states.count * 2_000)
        var views = JSONRows(capacity: states.count * 400)
        for state in states {
            subscriptions.beginRow()
            subscriptions.string("k", state.subscriptionKey)
            subscriptions.string("u", state.userId)
            subscriptions.string("env", state.environment)
            subscriptions.raw("s", try json(state))
            subscriptions.endRow()
            for group in state.groups {
                let intervals = state.entitlement(group: group)
                views.beginRow()
                views.string("k", state.subscriptionKey)
                views.string("g", group)
                views.raw("i", intervalsJSON(intervals))
                views.int("e", intervals.last?.endMs)
                views.endRow()
            }
        }
        try db.execute("""
            INSERT INTO subscriptions (subscription_key, user_id, environment, state)
            SELECT k, u, env, s FROM jsonb_to_recordset(\(subscriptions.json)) AS t(k text, u text, env text, s jsonb)
            ON CONFLICT (subscription_key) DO UPDATE
                SET user_id = EXCLUDED.user_id, environment = EXCLUDED.environment, state = EXCLUDED.state, updated_at = now()
            """)
        guard views.count > 0 else { return }
        try db.execute("""
            INSERT INTO membership (subscription_key, group_id, intervals, expires_ms)
            SELECT k, g, i, e FROM jsonb_to_recordset(\(views.json)) AS t(k text, g text, i jsonb, e bigint)
            ON CONFLICT (subscription_key, group_id) DO UPDATE
                SET intervals = EXCLUDED.intervals, expires_ms = EXCLUDED.expires_ms, updated_at = now()
            """)
    }

    /// R10: one finance row per purchase whose facts, granted interval or owner changed.
    private func saveGrants(_ pairs: [(SubscriptionState, SubscriptionState?)]) throws {
        var rows = JSONRows()
        for (state, before) in pairs {
            let ownerChanged = state.userId != before?.userId
            for (id, grant) in state.grants.sorted(by: { $0.key < $1.key }) {
                guard ownerChanged || before?.grants[id] != grant || before?.granted[id] != state.granted[id]
                        || before?.credited[id] != state.credited[id] else { continue }
                rows.beginRow()
                rows.string("k", state.subscriptionKey)
                rows.string("p", id)
                rows.string("u", state.userId)
                rows.string("g", grant.group)
                rows.string("pr", grant.productId)
                rows.string("kd", grant.productKind.rawValue)
                rows.string("tx", grant.transactionId)
                rows.string("o", grant.originalTransactionId)
                rows.bool("tr", grant.finance.isTrial)
                rows.bool("it", grant.finance.isIntro)
                rows.string("po", grant.finance.promotionalOfferId)
                rows.string("oc", grant.finance.offerCodeRefName)
                rows.int("ot", grant.finance.offerType.map(Int64.init))
                rows.string("oi", grant.finance.offerIdentifier)
                rows.string("od", grant.finance.offerDiscountType)
                rows.int("pm", grant.startMs)
                rows.int("em", grant.endMs)
                rows.int("cm", grant.cut?.atMs)
                rows.string("ck", grant.cut?.kind.rawValue)
                rows.string("env", grant.environment)
                rows.int("gs", state.granted[id]?.startMs)
                rows.int("ge", state.granted[id]?.endMs)
                rows.endRow()
            }
        }
        guard rows.count > 0 else { return }
        try db.execute("""
            INSERT INTO grants (subscription_key, purchase_id, user_id, group_id, product_id, product_kind, transaction_id,
                                original_transaction_id, grant_facts, is_trial, is_intro, promotional_offer_id,
                                offer_code_ref_name, offer_type, offer_identifier, offer_discount_type, purchase_ms, expires_ms,
                                cancellation_ms, cut_kind, environment, granted_start_ms, granted_end_ms)
            SELECT t.k, t.p, t.u, t.g, t.pr, t.kd, t.tx, t.o, s.state->'grants'->t.p, t.tr, t.it, t.po, t.oc, t.ot, t.oi, t.od,
                   t.pm, t.em, t.cm, t.ck, t.env, t.gs, t.ge
            FROM jsonb_to_recordset(\(rows.json)) AS t(k text, p text, u text, g text, pr text, kd text, tx text, o text,
                                                    tr boolean, it boolean, po text, oc text, ot integer, oi text, od text,
                                                    pm bigint, em bigint, cm bigint, ck text, env text, gs bigint, ge bigint)
            -- The grant's facts as stored in the state just written (saves encoding them twice).
            JOIN subscriptions s ON s.subscription_key = t.k
            ON CONFLICT (subscription_key, purchase_id) DO UPDATE SET
                user_id = EXCLUDED.user_id, group_id = EXCLUDED.group_id, product_id = EXCLUDED.product_id,
                product_kind = EXCLUDED.product_kind, transaction_id = EXCLUDED.transaction_id,
                original_transaction_id = EXCLUDED.original_transaction_id, grant_facts = EXCLUDED.grant_facts,
                is_trial = EXCLUDED.is_trial, is_intro = EXCLUDED.is_intro, promotional_offer_id = EXCLUDED.promotional_offer_id,
                offer_code_ref_name = EXCLUDED.offer_code_ref_name, offer_type = EXCLUDED.offer_type,
                offer_identifier = EXCLUDED.offer_identifier, offer_discount_type = EXCLUDED.offer_discount_type, purchase_ms = EXCLUDED.purchase_ms, expires_ms = EXCLUDED.expires_ms,
                cancellation_ms = EXCLUDED.cancellation_ms, cut_kind = EXCLUDED.cut_kind, environment = EXCLUDED.environment,
                granted_start_ms = EXCLUDED.granted_start_ms, granted_end_ms = EXCLUDED.granted_end_ms, updated_at = now()
            """)
    }

    /// Rewrites the per-user projection of every user whose subscriptions changed (or moved).
    private func saveUserMembership(_ users: [String], _ book: MembershipBook) throws {
        guard !users.isEmpty else { return }
        var rows = JSONRows()
        for user in users {
            for view in groupMemberships(of: book.states(ofUser: user)) {
                rows.beginRow()
                rows.string("u", user)
                rows.string("g", view.group)
                rows.raw("i", intervalsJSON(view.intervals))
                rows.int("e", view.expiresMs)
                rows.raw("v", try json(view))
                rows.endRow()
            }
        }
        try db.execute("DELETE FROM user_membership WHERE user_id = ANY(\(users))")
        guard rows.count > 0 else { return }
        try db.execute("""
            INSERT INTO user_membership (user_id, group_id, intervals, expires_ms, view)
            SELECT u, g, i, e, v FROM jsonb_to_recordset(\(rows.json)) AS t(u text, g text, i jsonb, e bigint, v jsonb)
            """)
    }
}

/// `[Interval]` as `Interval`'s Codable form (`{"endMs":…,"startMs":…}`, no `endMs` when open-ended),
/// written directly: the ledger needs two per entry.
func intervalsJSON(_ intervals: [Interval]) -> [UInt8] {
    var text = "["
    for (index, interval) in intervals.enumerated() {
        if index > 0 { text += "," }
        if let end = interval.endMs {
            text += "{\"endMs\":\(end),\"startMs\":\(interval.startMs)}"
        } else {
            text += "{\"startMs\":\(interval.startMs)}"
        }
    }
    return Array((text + "]").utf8)
}

/// Rows for `jsonb_to_recordset($1::jsonb)`: one JSON array parameter built from fragments that are
/// already JSON, so a batch's large documents (states, causes, views) are neither re-encoded nor
/// escaped into array literals, and PostgreSQL parses the whole batch once.
struct JSONRows {
    private(set) var bytes: [UInt8] = [UInt8(ascii: "[")]
    private(set) var count = 0
    private var fieldsInRow = 0

    init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    mutating func beginRow() {
        if count > 0 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "{"))
        count += 1
        fieldsInRow = 0
    }

    mutating func endRow() { bytes.append(UInt8(ascii: "}")) }

    private mutating func key(_ name: StaticString) {
        if fieldsInRow > 0 { bytes.append(UInt8(ascii: ",")) }
        fieldsInRow += 1
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        key(name)
        guard var value else { return bytes.append(contentsOf: Array("null".utf8)) }
        bytes.append(UInt8(ascii: "\""))
        value.withUTF8 { utf8 in
            // Copy runs of plain bytes at once; escape only quotes, backslashes and control bytes.
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                runStart = index + 1
                switch byte {
                case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
                case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                              hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func int(_ name: StaticString, _ value: Int64?) {
        key(name)
        bytes.append(contentsOf: Array((value.map { String($0) } ?? "null").utf8))
    }

    mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: Array((value ? "true" : "false").utf8))
    }

    /// A value that is already JSON (an encoded document).
    mutating func raw(_ name: StaticString, _ json: [UInt8]) {
        key(name)
        bytes.append(contentsOf: json)
    }

    var json: PGJSON {
        var all = bytes
        all.append(UInt8(ascii: "]"))
        return PGJSON(String(decoding: all, as: UTF8.self))
    }
}
