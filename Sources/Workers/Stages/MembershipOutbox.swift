import Domain
import Foundation
import Postgres
import Runtime
import Store

extension MembershipWriter {
    /// One outbox row per membership-changing entry (issue 17), in the caller's transaction: the event
    /// exists if and only if its ledger entry does.
    func appendOutbox(_ described: [DescribedEntry], entryIds: [Int64], nowMs: Int64 = currentTimeMs()) throws {
        var rows: [OutboxRow] = []
        for (index, item) in described.enumerated() {
            guard let event = MembershipEvent(item, entryId: entryIds[index], recordedAtMs: nowMs) else { continue }
            rows.append(OutboxRow(eventKey: event.partitionKey, entryId: event.ledgerEntryId, subscriptionKey: event.subscriptionKey,
                                  eventType: event.type.rawValue, payload: String(decoding: event.json, as: UTF8.self)))
        }
        guard !rows.isEmpty else { return }
        try MembershipStore(db).appendOutbox(rows)
        Metrics.shared.increment("storeledger_outbox_events_total", by: Double(rows.count))
    }
}
