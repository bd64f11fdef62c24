import Domain
import Foundation
import Postgres
import Runtime

extension MembershipWriter {
    /// Takes `count` ledger entry ids before the insert, so each outbox row can name its entry. They
    /// are taken while the batch holds its users' locks: one user's ids grow in commit order, which
    /// is the per-user order the relay publishes.
    func reserveEntryIds(_ count: Int) throws -> [Int64] {
        let rows = try db.query("""
            SELECT nextval(pg_get_serial_sequence('ledger', 'entry_id')) AS id FROM generate_series(1, \(count))
            """)
        return try rows.map { try $0.int64("id") }.sorted()
    }

    /// One outbox row per membership-changing entry (issue 17), in the caller's transaction: the event
    /// exists if and only if its ledger entry does.
    func appendOutbox(_ described: [DescribedEntry], entryIds: [Int64], nowMs: Int64 = currentTimeMs()) throws {
        var rows = JSONRows()
        for (index, item) in described.enumerated() {
            guard let event = MembershipEvent(item, entryId: entryIds[index], recordedAtMs: nowMs) else { continue }
            rows.beginRow()
            rows.string("k", event.partitionKey)
            rows.int("e", event.ledgerEntryId)
            rows.string("s", event.subscriptionKey)
            rows.string("t", event.type.rawValue)
            rows.string("p", String(decoding: event.json, as: UTF8.self))
            rows.endRow()
        }
        guard rows.count > 0 else { return }
        try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload)
            SELECT k, e, s, t, p FROM jsonb_to_recordset(\(rows.json)) AS t(k text, e bigint, s text, t text, p text)
            """)
        Metrics.shared.increment("storeledger_outbox_events_total", by: Double(rows.count))
    }
}
