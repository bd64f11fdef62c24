import Domain
import Foundation
import Postgres

/// Dedupe's state (migration 1): known purchases by identity (R1), their transaction id aliases,
/// and the inputs already seen, read and written in the batch's transaction.
public struct DedupeStore {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// An input dedupe has seen, per subscription.
    public struct SeenEvent: Hashable, Sendable, BulkRow {
        public var subscriptionKey: String
        public var eventKey: String
        public init(subscriptionKey: String, eventKey: String) {
            self.subscriptionKey = subscriptionKey
            self.eventKey = eventKey
        }

        static let columns: [BulkColumn<Self>] = [
            .text("subscription_key") { $0.subscriptionKey },
            .text("event_key") { $0.eventKey },
        ]
    }

    /// A transaction id known to a purchase of a subscription (R1).
    struct Alias: BulkRow {
        var subscriptionKey: String
        var transactionId: String
        var purchaseId: String

        static let columns: [BulkColumn<Self>] = [
            .text("subscription_key") { $0.subscriptionKey },
            .text("transaction_id") { $0.transactionId },
            .text("purchase_id") { $0.purchaseId },
        ]
    }

    /// A purchase to write back: its subscription and its merged facts (with aliases).
    public struct PurchaseRow: StoredRow {
        public var subscriptionKey: String
        public var purchase: KnownPurchase
        /// Whether its row exists (it was among the purchases the batch read): upserted, else inserted.
        public var isStored: Bool
        /// Its transaction ids that `transaction_aliases` does not hold yet for the subscription.
        public var newAliases: [String]
        /// `purchase` as JSON (`KnownPurchase.json`).
        var state: [UInt8]

        public init(subscriptionKey: String, purchase: KnownPurchase, isStored: Bool = false, newAliases: [String]? = nil) {
            self.subscriptionKey = subscriptionKey
            self.purchase = purchase
            self.isStored = isStored
            self.newAliases = newAliases ?? purchase.aliases
            state = purchase.json
        }

        static let columns: [BulkColumn<Self>] = [
            .text("subscription_key") { $0.subscriptionKey },
            .text("purchase_id") { $0.purchase.purchaseId },
            .json("state") { $0.state },
        ]
    }

    /// A batch's lookups, in one round trip: the known purchases of these subscriptions (by subscription,
    /// in purchase id order) and which of these inputs were seen before.
    public func batchState(of keys: [String], inputs: [SeenEvent]) throws -> (known: [String: [KnownPurchase]], seen: Set<SeenEvent>) {
        let answers = try db.queries([Self.purchasesQuery(keys), Self.seenQuery(inputs)])
        return (try Self.purchases(answers[0]), try Self.seen(answers[1]))
    }

    private static func purchasesQuery(_ keys: [String]) -> SQL {
        """
        SELECT subscription_key, state::text AS state FROM purchases WHERE subscription_key = ANY(\(keys))
        ORDER BY subscription_key, purchase_id
        """
    }

    private static func purchases(_ rows: PGRows) throws -> [String: [KnownPurchase]] {
        var known: [String: [KnownPurchase]] = [:]
        let decoder = JSONDecoder()
        for row in rows {
            known[try row.string("subscription_key"), default: []].append(try storedDocument(try row.string("state"), fallback: decoder))
        }
        return known
    }

    /// One index probe per input. (Two `ANY` lists, the batch's keys and its event keys, made PostgreSQL
    /// probe the key with every pair of the two: 28 ms for a batch of 500 against 2 ms for the pairs.)
    private static func seenQuery(_ inputs: [SeenEvent]) -> SQL {
        """
        SELECT s.subscription_key, s.event_key FROM seen_events s
        JOIN unnest(\(inputs.map(\.subscriptionKey))::text[], \(inputs.map(\.eventKey))::text[]) AS t(k, e)
          ON s.subscription_key = t.k AND s.event_key = t.e
        """
    }

    private static func seen(_ rows: PGRows) throws -> Set<SeenEvent> {
        Set(try rows.map { SeenEvent(subscriptionKey: try $0.string("subscription_key"), eventKey: try $0.string("event_key")) })
    }

    /// Writes the purchases (`BulkRows.write`: inserts the new, upserts the stored) and adds their new
    /// aliases (a plain insert too: the stage knows which the table holds).
    public func save(_ purchases: [PurchaseRow]) throws {
        guard !purchases.isEmpty else { return }
        try BulkRows.write(purchases, into: "purchases", key: ["subscription_key", "purchase_id"], on: db)
        let aliases = purchases.flatMap { row in
            row.newAliases.map { Alias(subscriptionKey: row.subscriptionKey, transactionId: $0, purchaseId: row.purchase.purchaseId) }
        }
        try BulkRows.insert(aliases, into: "transaction_aliases", on: db)
    }

    /// Records first sightings (inputs the batch's lookup did not find, each once) and counts Apple's
    /// retries of inputs already seen (one statement each; a plain insert, as in `save`).
    public func record(firstSeen: [SeenEvent], repeated: [SeenEvent: Int]) throws {
        try BulkRows.insert(firstSeen, into: "seen_events", on: db)
        guard !repeated.isEmpty else { return }
        let entries = repeated.sorted { ($0.key.subscriptionKey, $0.key.eventKey) < ($1.key.subscriptionKey, $1.key.eventKey) }
        try db.executeDeferred("""
            UPDATE seen_events s SET deliveries = s.deliveries + t.n, last_seen_at = now()
            FROM unnest(\(entries.map(\.key.subscriptionKey))::text[], \(entries.map(\.key.eventKey))::text[], \(entries.map(\.value))::integer[]) AS t(k, e, n)
            WHERE s.subscription_key = t.k AND s.event_key = t.e
            """)
    }

    /// Forgets everything dedupe knows of these subscriptions (a replay of dedupe rebuilds it).
    public func forget(_ keys: [String]) throws {
        try db.executeDeferred("DELETE FROM seen_events WHERE subscription_key = ANY(\(keys))")
        try db.executeDeferred("DELETE FROM transaction_aliases WHERE subscription_key = ANY(\(keys))")
        try db.executeDeferred("DELETE FROM purchases WHERE subscription_key = ANY(\(keys))")
    }
}

extension DedupeStore {
    /// An input as dedupe recorded it: how often it arrived (Apple's retries included) and when last.
    public struct Sighting: Sendable, Equatable {
        public var eventKey: String
        public var deliveries: Int
        public var lastSeenAt: String
    }

    /// The sightings of these inputs, each under the subscription dedupe recorded it for (one index
    /// probe each): the doctor's and recovery's check that the pipeline received a notification
    /// (`uuid:<notificationUUID>`), and how many times Apple delivered it. Looked up by event key
    /// alone, the check read the whole table, which grows by a row per input.
    public func sightings(_ inputs: [SeenEvent]) throws -> [Sighting] {
        guard !inputs.isEmpty else { return [] }
        return try db.query("""
            SELECT s.event_key, s.deliveries, s.last_seen_at::text AS last_seen_at FROM seen_events s
            JOIN unnest(\(inputs.map(\.subscriptionKey))::text[], \(inputs.map(\.eventKey))::text[]) AS t(k, e)
              ON s.subscription_key = t.k AND s.event_key = t.e
            ORDER BY s.event_key
            """).map { Sighting(eventKey: try $0.string("event_key"), deliveries: try $0.int("deliveries"), lastSeenAt: try $0.string("last_seen_at")) }
    }
}
