import Domain
import Foundation
import Postgres

/// Why an outbox row's event cannot be published here. Either a newer release wrote it (details of a
/// later version, an event type this release does not know): its relay and deliverers publish it, and
/// this release's wait; or nothing can (its ledger row deleted, its details damaged by hand): the relay
/// and webhooks say so and go on with the rows behind it.
public struct OutboxEventUnreadable: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public var writtenByNewerRelease = false
    public var description: String { reason }
}

/// The bytes an outbox row publishes, read with the row: the payload a row written before migration 16
/// stored, else the event rebuilt from the row's details and its ledger row (`MembershipEventDetails`).
enum OutboxEvents {
    /// The columns of outbox row `o` and of its ledger row `l`, joined by `ledgerJoin`.
    static let columns: SQL = """
        o.payload, o.details, o.event_type AS outbox_event_type, o.entry_id AS event_entry_id, o.subscription_key AS event_subscription_key,
        l.entry_id AS ledger_entry_id, l.kind AS ledger_kind, l.user_id AS ledger_user_id, l.environment AS ledger_environment,
        l.group_id AS ledger_group, l.product_id AS ledger_product_id, l.purchase_id AS ledger_purchase_id,
        l.interval_start_ms AS ledger_start_ms, l.interval_end_ms AS ledger_end_ms, l.cut_kind AS ledger_cut_kind,
        l.before_intervals::text AS ledger_before, l.after_intervals::text AS ledger_after, l.reason AS ledger_reason,
        l.cause->>'source' AS cause_source, l.cause->>'eventId' AS cause_event_id,
        l.cause->>'notificationType' AS cause_type, l.cause->>'notificationSubtype' AS cause_subtype,
        l.cause->>'transactionId' AS cause_transaction_id
        """
    /// Rows with a stored payload need no ledger row (its columns come back NULL); the others find theirs
    /// by the ledger's primary key.
    static let ledgerJoin: SQL = "LEFT JOIN ledger l ON o.payload IS NULL AND l.subscription_key = o.subscription_key AND l.entry_id = o.entry_id"

    static func payload(_ row: PGRow) throws -> Result<[UInt8], OutboxEventUnreadable> {
        if let stored = try row.decode("payload", as: String?.self) { return .success(Array(stored.utf8)) }
        let entryId = try row.int64("event_entry_id")
        func unreadable(_ why: String, newer: Bool = false) -> Result<[UInt8], OutboxEventUnreadable> {
            .failure(OutboxEventUnreadable(reason: "outbox row of ledger entry \(entryId): \(why)", writtenByNewerRelease: newer))
        }
        guard let bytes = try row.decode("details", as: [UInt8]?.self) else { return unreadable("neither payload nor details") }
        let eventType = try row.string("outbox_event_type")
        guard let type = MembershipEventType(rawValue: eventType), !MembershipEventDetails.isNewer(bytes) else {
            return unreadable("written by a newer release (details version \(bytes.first ?? 0), type \(eventType))", newer: true)
        }
        guard try row.decode("ledger_entry_id", as: Int64?.self) != nil else { return unreadable("its ledger row is missing") }
        let details: MembershipEventDetails
        do { details = try MembershipEventDetails(bytes: bytes) } catch { return unreadable("details: \(error)") }
        guard let before = intervals(try row.string("ledger_before")), let after = intervals(try row.string("ledger_after")),
              let source = try row.decode("cause_source", as: String?.self),
              let causeEventId = try row.decode("cause_event_id", as: String?.self) else {
            return unreadable("its ledger row's intervals or cause are not readable")
        }
        let start: Int64? = try row.decode("ledger_start_ms")
        let end: Int64? = try row.decode("ledger_end_ms")
        let entry = MembershipEventEntry(
            entryId: entryId, ledgerKind: try row.string("ledger_kind"), userId: try row.decode("ledger_user_id"),
            subscriptionKey: try row.string("event_subscription_key"), environment: try row.decode("ledger_environment"),
            group: try row.decode("ledger_group"), productId: try row.decode("ledger_product_id"),
            purchaseId: try row.decode("ledger_purchase_id"), interval: start.map { Interval(startMs: $0, endMs: end) },
            cutKind: try row.decode("ledger_cut_kind"), before: before, after: after, reason: try row.string("ledger_reason"),
            cause: MembershipEvent.EventCause(source: source, eventId: causeEventId, notificationType: try row.decode("cause_type"),
                                              notificationSubtype: try row.decode("cause_subtype"),
                                              transactionId: try row.decode("cause_transaction_id")))
        return .success(MembershipEvent(type: type, entry: entry, details: details).json)
    }

    /// Our writer's and jsonb's prints read directly; anything else by JSONDecoder.
    private static func intervals(_ text: String) -> [Interval]? {
        Interval.storedList(text) ?? (try? JSONDecoder().decode([Interval].self, from: Data(text.utf8)))
    }
}
