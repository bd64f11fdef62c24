import Crypto
import Domain
import Foundation

/// A `ledger` row: an entry with its reserved id and its cause already encoded (one per command).
public struct LedgerRow: BulkRow {
    public var id: Int64
    public var entry: LedgerEntry
    public var cause: [UInt8]

    public init(id: Int64, entry: LedgerEntry, cause: [UInt8]) {
        self.id = id
        self.entry = entry
        self.cause = cause
    }

    /// The change's identity (migration 12's `ledger_change`): one command writes one change once.
    public var changeKey: [UInt8] {
        LedgerRow.changeKey(commandId: entry.commandId, kind: entry.kind.rawValue, purchaseId: entry.purchaseId, group: entry.group,
                            startMs: entry.interval?.startMs, endMs: entry.interval?.endMs, amount: entry.amount,
                            cutKind: entry.cutKind?.rawValue, reason: entry.reason)
    }

    /// SHA-256 of the fields that make two entries the same change, encoded as migration 12 encodes the
    /// columns of the entries written before it (it must stay so: the two meet in one unique index): joined
    /// by `|`, a text as its UTF-8 length, `:` and itself, a number in decimal, nil as `-`. The reason is
    /// part of it: a replay's compensation names the code version that wrote it (migration 7).
    public static func changeKey(commandId: String, kind: String, purchaseId: String?, group: String?, startMs: Int64?, endMs: Int64?,
                                 amount: Int?, cutKind: String?, reason: String) -> [UInt8] {
        var text: [UInt8] = []
        text.reserveCapacity(commandId.utf8.count + reason.utf8.count + 128)
        func field(_ value: String?) {
            if !text.isEmpty { text.append(UInt8(ascii: "|")) }
            guard let value else { return text.append(UInt8(ascii: "-")) }
            text += String(value.utf8.count).utf8
            text.append(UInt8(ascii: ":"))
            text += value.utf8
        }
        func number(_ value: Int64?) {
            text.append(UInt8(ascii: "|"))
            guard let value else { return text.append(UInt8(ascii: "-")) }
            text += String(value).utf8
        }
        field(commandId)
        field(kind)
        field(purchaseId)
        field(group)
        number(startMs)
        number(endMs)
        number(amount.map(Int64.init))
        field(cutKind)
        field(reason)
        return SHA256.hash(text)
    }

    static let columns: [BulkColumn<Self>] = [
        .bigint("entry_id") { $0.id },
        .text("subscription_key") { $0.entry.subscriptionKey },
        .text("kind") { $0.entry.kind.rawValue },
        .text("purchase_id") { $0.entry.purchaseId },
        .text("product_id") { $0.entry.productId },
        .text("group_id") { $0.entry.group },
        .bigint("interval_start_ms") { $0.entry.interval?.startMs },
        .bigint("interval_end_ms") { $0.entry.interval?.endMs },
        .integer("amount") { $0.entry.amount },
        .jsonb("before_intervals") { intervalsJSON($0.entry.before) },
        .jsonb("after_intervals") { intervalsJSON($0.entry.after) },
        // The column is `integer`; the state keeps the exact balance (docs/limits.md).
        .integer("balance_after") { $0.entry.balanceAfter.map { Int(Int32(clamping: $0)) } },
        .text("cut_kind") { $0.entry.cutKind?.rawValue },
        .text("reason") { $0.entry.reason },
        .text("command_id") { $0.entry.commandId },
        .jsonb("cause") { $0.cause },
        .text("user_id") { $0.entry.userId },
        .text("environment") { $0.entry.environment },
        .bytea("change_key") { $0.changeKey },
    ]
}

/// A `membership_outbox` row, keyed like the topic: the event's details, from which and its ledger row
/// the relay rebuilds the bytes it publishes (`OutboxEvents`), or those bytes themselves.
public struct OutboxRow: BulkRow {
    public var eventKey: String
    public var entryId: Int64
    public var subscriptionKey: String
    public var eventType: String
    public var payload: String?
    public var details: [UInt8]?

    public init(eventKey: String, entryId: Int64, subscriptionKey: String, eventType: String, details: [UInt8]) {
        self.eventKey = eventKey
        self.entryId = entryId
        self.subscriptionKey = subscriptionKey
        self.eventType = eventType
        self.details = details
    }

    /// A row carrying its published bytes, as rows written before migration 16 do.
    public init(eventKey: String, entryId: Int64, subscriptionKey: String, eventType: String, payload: String) {
        self.eventKey = eventKey
        self.entryId = entryId
        self.subscriptionKey = subscriptionKey
        self.eventType = eventType
        self.payload = payload
    }

    static let columns: [BulkColumn<Self>] = [
        .text("event_key") { $0.eventKey },
        .bigint("entry_id") { $0.entryId },
        .text("subscription_key") { $0.subscriptionKey },
        .text("event_type") { $0.eventType },
        .text("payload") { $0.payload },
        .bytea("details") { $0.details },
    ]
}

/// A `subscriptions` row: the state as JSON plus the owner readers filter on.
public struct SubscriptionRow: StoredRow {
    public var subscriptionKey: String
    public var userId: String?
    public var state: [UInt8]
    /// Whether the row exists (its state was loaded for the batch): upserted, else inserted.
    public var isStored: Bool

    public init(_ state: SubscriptionState, json: [UInt8], isStored: Bool = false) {
        subscriptionKey = state.subscriptionKey
        userId = state.userId
        self.state = json
        self.isStored = isStored
    }

    static let columns: [BulkColumn<Self>] = [
        .text("subscription_key") { $0.subscriptionKey },
        .text("user_id") { $0.userId },
        .json("state") { $0.state },
    ]
}

/// A `grants` row (R10 finance facts of one purchase, kept in step with the subscription's owner).
public struct GrantRow: StoredRow {
    public var subscriptionKey: String
    public var purchaseId: String
    public var userId: String?
    public var grant: PurchaseGrant
    /// What was granted of it (the cut-aware interval), if anything.
    public var granted: Interval?
    /// Whether the row exists (the grant was in the state loaded for the batch): upserted, else inserted.
    public var isStored: Bool

    public init(subscriptionKey: String, purchaseId: String, userId: String?, grant: PurchaseGrant, granted: Interval?,
                isStored: Bool = false) {
        self.subscriptionKey = subscriptionKey
        self.purchaseId = purchaseId
        self.userId = userId
        self.grant = grant
        self.granted = granted
        self.isStored = isStored
    }

    static let columns: [BulkColumn<Self>] = [
        .text("subscription_key") { $0.subscriptionKey },
        .text("purchase_id") { $0.purchaseId },
        .text("user_id") { $0.userId },
        .text("group_id") { $0.grant.group },
        .text("product_id") { $0.grant.productId },
        .text("product_kind") { $0.grant.productKind.rawValue },
        .text("transaction_id") { $0.grant.transactionId },
        .boolean("is_trial") { $0.grant.finance.isTrial },
        .boolean("is_intro") { $0.grant.finance.isIntro },
        .text("promotional_offer_id") { $0.grant.finance.promotionalOfferId },
        .text("offer_code_ref_name") { $0.grant.finance.offerCodeRefName },
        .integer("offer_type") { $0.grant.finance.offerType },
        .text("offer_identifier") { $0.grant.finance.offerIdentifier },
        .text("offer_discount_type") { $0.grant.finance.offerDiscountType },
        .bigint("purchase_ms") { $0.grant.startMs },
        .bigint("expires_ms") { $0.grant.endMs },
        .bigint("cancellation_ms") { $0.grant.cut?.atMs },
        .text("cut_kind") { $0.grant.cut?.kind.rawValue },
        .text("environment") { $0.grant.environment },
        .bigint("granted_start_ms") { $0.granted?.startMs },
        .bigint("granted_end_ms") { $0.granted?.endMs },
        // The grant as the state keeps it (`state->'grants'->purchase_id`), written here rather than
        // read back from the state just saved: that read decompressed the whole state once per grant.
        .json("grant_facts") { $0.grant.json },
    ]
}

/// A `user_membership` row: one user's membership of one group (GroupMembership JSON in `view`).
public struct UserMembershipRow: BulkRow {
    public var userId: String
    public var membership: GroupMembership
    public var view: [UInt8]

    public init(userId: String, membership: GroupMembership, view: [UInt8]) {
        self.userId = userId
        self.membership = membership
        self.view = view
    }

    static let columns: [BulkColumn<Self>] = [
        .text("user_id") { $0.userId },
        .text("group_id") { $0.membership.group },
        .jsonb("intervals") { intervalsJSON($0.membership.intervals) },
        .bigint("expires_ms") { $0.membership.expiresMs },
        .jsonb("view") { $0.view },
    ]
}
