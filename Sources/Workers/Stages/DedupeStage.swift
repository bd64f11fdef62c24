import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Dedupe: one purchase, one identity (R1, R2). Known purchases, their transaction id aliases and
/// the inputs already seen live in PostgreSQL and are written in the batch's transaction; only what
/// is new or changed goes on. Per batch: two reads and at most four set-based writes.
public struct DedupeStage: StageLogic {
    public let name = "dedupe"
    public let inputTopics = [Topic.decoded]
    public let usesDatabase = true
    /// R1, or a deliberately wrong rule for replay tests (`STORELEDGER_TEST_WRONG_RULE`).
    public let rule: DedupeRule

    public init(rule: DedupeRule = .standard) { self.rule = rule }

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        guard let database else { throw StageError.configuration("dedupe needs PostgreSQL") }
        var result = StageBatchResult()
        var events: [(KafkaRecord, AppleEvent)] = []
        for record in records {
            do {
                let event = try TopicRecords.decodeAppleEvent(record.value)
                // Checked again here: a record can reach the decoded topic without passing decode.
                if let failure = EventBounds.check(event) {
                    result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                } else {
                    events.append((record, event))
                }
            } catch {
                result.deadLetters.append(DeadLetter(stage: name, record: record,
                                                     failure: PermanentFailure("invalid_event", "not a decoded AppleEvent: \(error)")))
            }
        }
        guard !events.isEmpty else { return result }

        let keys = Array(Set(events.map(\.1.subscriptionKey))).sorted()
        var known = try loadPurchases(keys: keys, database)
        var seen = try loadSeen(keys: keys, eventKeys: Array(Set(events.map { seenKey(of: $0.1) })), database)
        var touched: [String: Set<String>] = [:]
        var newlySeen: [SeenKey] = []
        var repeated: [SeenKey: Int] = [:]

        for (record, event) in events {
            let key = SeenKey(subscriptionKey: event.subscriptionKey, eventKey: seenKey(of: event))
            if seen.contains(key) {
                // Apple's retry, a second upload of the same bytes, a redelivered batch: counted, not forwarded.
                repeated[key, default: 0] += 1
                Metrics.shared.increment("storeledger_dedupe_total", ["outcome": "duplicate_event"])
                continue
            }
            seen.insert(key)
            newlySeen.append(key)
            let outcome = dedupe(event: event, known: known[event.subscriptionKey] ?? [], rule: rule)
            known[event.subscriptionKey] = outcome.updated
            touched[event.subscriptionKey, default: []].formUnion(outcome.touched)
            // Notifications, renewal facts and user links still matter without new purchase facts.
            guard !outcome.changes.isEmpty || event.notification != nil || event.renewalInfo != nil
                    || event.appUserId != nil else {
                Metrics.shared.increment("storeledger_dedupe_total", ["outcome": "nothing_new"])
                continue
            }
            // The whole input goes on (classify reads switch markers from the other transactions);
            // `purchases` says what is new. A binary event is copied in as the bytes it arrived as.
            result.outputs.append(OutputRecord(topic: Topic.unique, key: event.subscriptionKey,
                                               value: TopicRecords.encodeUnique(event: event, decodedRecord: record.value,
                                                                                purchases: outcome.changes, position: record.position)))
            Metrics.shared.increment("storeledger_dedupe_total", ["outcome": outcome.changes.isEmpty ? "forwarded_no_change" : "forwarded"])
        }
        try savePurchases(known, touched: touched, database)
        try saveSeen(newlySeen, repeated: repeated, database)
        return result
    }

    private struct SeenKey: Hashable { var subscriptionKey: String; var eventKey: String }

    private func loadPurchases(keys: [String], _ db: PGConnection) throws -> [String: [KnownPurchase]] {
        var known: [String: [KnownPurchase]] = [:]
        let decoder = JSONDecoder()
        for row in try db.query("SELECT subscription_key, state::text AS state FROM purchases WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key, purchase_id") {
            let purchase = try decoder.decode(KnownPurchase.self, from: Data(try row.string("state").utf8))
            known[try row.string("subscription_key"), default: []].append(purchase)
        }
        return known
    }

    private func loadSeen(keys: [String], eventKeys: [String], _ db: PGConnection) throws -> Set<SeenKey> {
        var seen: Set<SeenKey> = []
        for row in try db.query("SELECT subscription_key, event_key FROM seen_events WHERE subscription_key = ANY(\(keys)) AND event_key = ANY(\(eventKeys))") {
            seen.insert(SeenKey(subscriptionKey: try row.string("subscription_key"), eventKey: try row.string("event_key")))
        }
        return seen
    }

    /// Writes back only the purchases this batch changed (facts or aliases), and their new aliases.
    private func savePurchases(_ known: [String: [KnownPurchase]], touched: [String: Set<String>], _ db: PGConnection) throws {
        var rows = JSONRows()
        var aliasKeys: [String] = [], aliasIds: [String] = [], aliasPurchases: [String] = []
        let encoder = JSONEncoder()   // into jsonb: key order does not matter
        for (key, ids) in touched.sorted(by: { $0.key < $1.key }) where !ids.isEmpty {
            for purchase in known[key] ?? [] where ids.contains(purchase.purchaseId) {
                rows.beginRow()
                rows.string("k", key)
                rows.string("p", purchase.purchaseId)
                rows.raw("s", [UInt8](try encoder.encode(purchase)))
                rows.endRow()
                for alias in purchase.aliases {
                    aliasKeys.append(key)
                    aliasIds.append(alias)
                    aliasPurchases.append(purchase.purchaseId)
                }
            }
        }
        guard rows.count > 0 else { return }
        try db.execute("""
            INSERT INTO purchases (subscription_key, purchase_id, state)
            SELECT k, p, s FROM jsonb_to_recordset(\(rows.json)) AS t(k text, p text, s jsonb)
            ON CONFLICT (subscription_key, purchase_id) DO UPDATE SET state = EXCLUDED.state, updated_at = now()
            """)
        try db.execute("""
            INSERT INTO transaction_aliases (subscription_key, transaction_id, purchase_id)
            SELECT * FROM unnest(\(aliasKeys)::text[], \(aliasIds)::text[], \(aliasPurchases)::text[])
            ON CONFLICT DO NOTHING
            """)
    }

    private func saveSeen(_ seen: [SeenKey], repeated: [SeenKey: Int], _ db: PGConnection) throws {
        if !seen.isEmpty {
            try db.execute("""
                INSERT INTO seen_events (subscription_key, event_key)
                SELECT * FROM unnest(\(seen.map(\.subscriptionKey))::text[], \(seen.map(\.eventKey))::text[]) ON CONFLICT DO NOTHING
                """)
        }
        guard !repeated.isEmpty else { return }
        let entries = repeated.sorted { ($0.key.subscriptionKey, $0.key.eventKey) < ($1.key.subscriptionKey, $1.key.eventKey) }
        try db.execute("""
            UPDATE seen_events s SET deliveries = s.deliveries + t.n, last_seen_at = now()
            FROM unnest(\(entries.map(\.key.subscriptionKey))::text[], \(entries.map(\.key.eventKey))::text[], \(entries.map(\.value))::integer[]) AS t(k, e, n)
            WHERE s.subscription_key = t.k AND s.event_key = t.e
            """)
    }
}
