import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Dedupe: one purchase, one identity (R1, R2). Known purchases and events live in PostgreSQL and
/// are written in the batch's transaction; only what is new or changed goes on.
public struct DedupeStage: StageLogic {
    public let name = "dedupe"
    public let inputTopics = [Topic.decoded]
    public let usesDatabase = true

    public init() {}

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        guard let database else { throw StageError.configuration("dedupe needs PostgreSQL") }
        var result = StageBatchResult()
        let decoder = JSONDecoder()
        var events: [(KafkaRecord, AppleEvent)] = []
        for record in records {
            do {
                events.append((record, try decoder.decode(AppleEvent.self, from: Data(record.value))))
            } catch {
                result.deadLetters.append(DeadLetter(stage: name, record: record,
                                                     failure: PermanentFailure("invalid_event", "not a decoded AppleEvent: \(error)")))
            }
        }
        guard !events.isEmpty else { return result }

        let keys = Array(Set(events.map(\.1.subscriptionKey)))
        var known = try loadPurchases(keys: keys, database)
        var seen = try loadSeen(keys: keys, eventIds: events.map(\.1.eventId), database)
        var touched: Set<String> = []
        var newlySeen: [(String, String)] = []
        let encoder = JSONEncoder.pipeline

        for (record, event) in events {
            let seenKey = SeenKey(subscriptionKey: event.subscriptionKey, eventId: event.eventId)
            if seen.contains(seenKey) {
                Metrics.shared.increment("storeledger_dedupe_total", ["outcome": "duplicate_event"])
                continue
            }
            seen.insert(seenKey)
            newlySeen.append((event.subscriptionKey, event.eventId))
            let outcome = dedupe(event: event, known: known[event.subscriptionKey] ?? [])
            known[event.subscriptionKey] = outcome.updated
            if !outcome.changes.isEmpty { touched.insert(event.subscriptionKey) }
            // Notifications and user links still matter without new purchase facts.
            guard !outcome.changes.isEmpty || event.notification != nil || event.renewalInfo != nil
                    || event.appUserId != nil else {
                Metrics.shared.increment("storeledger_dedupe_total", ["outcome": "nothing_new"])
                continue
            }
            var reduced = event
            reduced.transactions = outcome.changes.map(\.transaction)
            let unique = UniqueEvent(event: reduced, purchases: outcome.changes, decodedPosition: record.position)
            result.outputs.append(OutputRecord(topic: Topic.unique, key: event.subscriptionKey,
                                               value: try encoder.encode(unique).bytes))
            Metrics.shared.increment("storeledger_dedupe_total", ["outcome": "forwarded"])
        }
        try savePurchases(known.filter { touched.contains($0.key) }, database)
        try saveSeen(newlySeen, database)
        return result
    }

    private struct SeenKey: Hashable { var subscriptionKey: String; var eventId: String }

    private func loadPurchases(keys: [String], _ db: PGConnection) throws -> [String: [KnownPurchase]] {
        var known: [String: [KnownPurchase]] = [:]
        let decoder = JSONDecoder()
        for row in try db.query("SELECT subscription_key, state::text AS state FROM purchases WHERE subscription_key = ANY(\(keys)) ORDER BY subscription_key, purchase_id") {
            let purchase = try decoder.decode(KnownPurchase.self, from: Data(try row.string("state").utf8))
            known[try row.string("subscription_key"), default: []].append(purchase)
        }
        return known
    }

    private func loadSeen(keys: [String], eventIds: [String], _ db: PGConnection) throws -> Set<SeenKey> {
        var seen: Set<SeenKey> = []
        for row in try db.query("SELECT subscription_key, event_key FROM seen_events WHERE subscription_key = ANY(\(keys)) AND event_key = ANY(\(eventIds))") {
            seen.insert(SeenKey(subscriptionKey: try row.string("subscription_key"), eventId: try row.string("event_key")))
        }
        return seen
    }

    private func savePurchases(_ purchases: [String: [KnownPurchase]], _ db: PGConnection) throws {
        var keys: [String] = [], ids: [String] = [], states: [String] = []
        var aliasKeys: [String] = [], aliasIds: [String] = [], aliasPurchases: [String] = []
        let encoder = JSONEncoder.pipeline
        for (key, list) in purchases {
            for purchase in list {
                keys.append(key)
                ids.append(purchase.purchaseId)
                states.append(String(decoding: try encoder.encode(purchase), as: UTF8.self))
                for alias in purchase.aliases {
                    aliasKeys.append(key)
                    aliasIds.append(alias)
                    aliasPurchases.append(purchase.purchaseId)
                }
            }
        }
        guard !keys.isEmpty else { return }
        try db.execute("""
            INSERT INTO purchases (subscription_key, purchase_id, state)
            SELECT k, p, s::jsonb FROM unnest(\(keys)::text[], \(ids)::text[], \(states)::text[]) AS t(k, p, s)
            ON CONFLICT (subscription_key, purchase_id) DO UPDATE SET state = EXCLUDED.state, updated_at = now()
            """)
        try db.execute("""
            INSERT INTO transaction_aliases (subscription_key, transaction_id, purchase_id)
            SELECT * FROM unnest(\(aliasKeys)::text[], \(aliasIds)::text[], \(aliasPurchases)::text[])
            ON CONFLICT DO NOTHING
            """)
    }

    private func saveSeen(_ seen: [(String, String)], _ db: PGConnection) throws {
        guard !seen.isEmpty else { return }
        try db.execute("""
            INSERT INTO seen_events (subscription_key, event_key)
            SELECT * FROM unnest(\(seen.map(\.0))::text[], \(seen.map(\.1))::text[]) ON CONFLICT DO NOTHING
            """)
    }
}
