import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store

/// Dedupe: one purchase, one identity (R1, R2). Known purchases, their transaction id aliases and
/// the inputs already seen live in PostgreSQL and are written in the batch's transaction; only what
/// is new or changed goes on. Per batch: two reads and at most four set-based writes.
public struct DedupeStage: StageLogic {
    public let name = "dedupe"
    public let inputTopics = [Topic.decoded]
    public let usesDatabase = true
    /// R1, or a deliberately wrong rule for replay tests (`Setting.testWrongRule`).
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
        let store = DedupeStore(database)
        let inputs = events.map { SeenEvent(subscriptionKey: $0.1.subscriptionKey, eventKey: seenKey(of: $0.1)) }
        var (known, seen) = try store.batchState(of: keys, inputs: Array(Set(inputs)))
        let stored = known
        var touched: [String: Set<String>] = [:]
        var newlySeen: [SeenEvent] = []
        var repeated: [SeenEvent: Int] = [:]
        var outcomes: [String: Int] = [:]   // counted per batch: one metric update per outcome, not per event

        for ((record, event), key) in zip(events, inputs) {
            if seen.contains(key) {
                // Apple's retry, a second upload of the same bytes, a redelivered batch: counted, not forwarded.
                repeated[key, default: 0] += 1
                outcomes["duplicate_event", default: 0] += 1
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
                outcomes["nothing_new", default: 0] += 1
                continue
            }
            // The whole input goes on (classify reads switch markers from the other transactions);
            // `purchases` says what is new. A binary event is copied in as the bytes it arrived as.
            result.outputs.append(OutputRecord(topic: Topic.unique, key: event.subscriptionKey,
                                               value: TopicRecords.encodeUnique(event: event, decodedRecord: record.value,
                                                                                purchases: outcome.changes, position: record.position)))
            outcomes[outcome.changes.isEmpty ? "forwarded_no_change" : "forwarded", default: 0] += 1
        }
        for (outcome, count) in outcomes {
            Metrics.shared.increment("storeledger_dedupe_total", ["outcome": outcome], by: Double(count))
        }
        try store.save(changedPurchases(known, stored: stored, touched: touched))
        try store.record(firstSeen: newlySeen, repeated: repeated)
        return result
    }

    private typealias SeenEvent = DedupeStore.SeenEvent

    /// Only the purchases this batch changed (facts or aliases) are written back, each marked with
    /// whether its row exists and which of its aliases are new: `stored` is every purchase the batch read,
    /// and a purchase's aliases only grow, so the aliases table holds exactly the stored ones' aliases.
    private func changedPurchases(_ known: [String: [KnownPurchase]], stored: [String: [KnownPurchase]],
                                  touched: [String: Set<String>]) -> [DedupeStore.PurchaseRow] {
        var rows: [DedupeStore.PurchaseRow] = []
        for (key, ids) in touched.sorted(by: { $0.key < $1.key }) where !ids.isEmpty {
            let before = stored[key] ?? []
            let storedIds = Set(before.map(\.purchaseId))
            var aliased = Set(before.flatMap(\.aliases))
            for purchase in known[key] ?? [] where ids.contains(purchase.purchaseId) {
                // The table's key is (subscription, transaction id): the first purchase to claim one keeps it.
                let newAliases = purchase.aliases.filter { aliased.insert($0).inserted }
                rows.append(DedupeStore.PurchaseRow(subscriptionKey: key, purchase: purchase, isStored: storedIds.contains(purchase.purchaseId),
                                                    newAliases: newAliases))
            }
        }
        return rows
    }
}
