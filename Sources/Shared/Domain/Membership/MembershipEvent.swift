/// One message of `storeledger.membership.events` (and one webhook body): a membership-changing
/// ledger entry as downstream services consume it. The shape is versioned by `schema` and described
/// by `schemas/membership-event.v1.json`; fields are only ever added within a version.
public struct MembershipEvent: Codable, Sendable, Equatable {
    public static let schemaId = "storeledger-membership-event/1"

    public var schema: String = MembershipEvent.schemaId
    /// Unique and stable: `ledger-<entry id>` (consumers dedupe on it).
    public var eventId: String
    public var type: MembershipEventType
    public var ledgerEntryId: Int64
    public var ledgerKind: String
    /// The user the entitlement belongs to; nil while the subscription is linked to no user.
    public var userId: String?
    public var subscriptionKey: String
    public var environment: String?
    public var group: String?
    public var productId: String?
    public var purchaseId: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    /// The interval granted, extended or cut.
    public var interval: Interval?
    public var amount: Int?
    public var balanceAfter: Int?
    public var cutKind: String?
    public var entitlement: Entitlement
    public var productChange: ProductChange?
    public var transfer: Transfer?
    public var renewal: Renewal?
    public var offer: Offer?
    public var correction: Bool
    public var reason: String
    public var cause: EventCause
    public var recordedAtMs: Int64

    public struct Entitlement: Codable, Sendable, Equatable {
        public var before: [Interval]
        public var after: [Interval]
    }

    public struct ProductChange: Codable, Sendable, Equatable {
        public var mode: ProductChangeMode
        public var fromProductId: String?
        public var toProductId: String?
    }

    public struct Transfer: Codable, Sendable, Equatable {
        public var fromUserId: String?
        public var toUserId: String?
    }

    public struct Renewal: Codable, Sendable, Equatable {
        public var autoRenewStatus: Bool?
        public var autoRenewProductId: String?
        public var isInBillingRetry: Bool?
        public var gracePeriodExpiresMs: Int64?
        public var expirationIntent: String?
    }

    public struct Offer: Codable, Sendable, Equatable {
        public var isTrial: Bool
        public var isIntro: Bool
        public var promotionalOfferId: String?
        public var offerCodeRefName: String?
        public var offerType: Int?
        public var offerDiscountType: String?
    }

    public struct EventCause: Codable, Sendable, Equatable {
        public var source: String
        public var eventId: String
        public var notificationType: String?
        public var notificationSubtype: String?
        public var transactionId: String?

        public init(source: String, eventId: String, notificationType: String?, notificationSubtype: String?, transactionId: String?) {
            self.source = source
            self.eventId = eventId
            self.notificationType = notificationType
            self.notificationSubtype = notificationSubtype
            self.transactionId = transactionId
        }
    }

    /// The event of a described ledger entry once PostgreSQL gave it its id; nil when the entry
    /// changes nothing for a user.
    public init?(_ described: DescribedEntry, entryId: Int64, recordedAtMs: Int64) {
        guard let meaning = described.meaning else { return nil }
        let entry = described.entry
        eventId = "ledger-\(entryId)"
        type = meaning.type
        ledgerEntryId = entryId
        ledgerKind = entry.kind.rawValue
        userId = entry.userId
        subscriptionKey = entry.subscriptionKey
        environment = entry.environment
        group = entry.group
        productId = entry.productId
        purchaseId = entry.purchaseId
        transactionId = described.grant?.transactionId
        originalTransactionId = described.grant?.originalTransactionId
        interval = entry.interval
        amount = entry.amount
        balanceAfter = entry.balanceAfter
        cutKind = entry.cutKind?.rawValue
        entitlement = Entitlement(before: entry.before, after: entry.after)
        productChange = meaning.productChange.map {
            ProductChange(mode: $0, fromProductId: meaning.fromProductId, toProductId: meaning.toProductId)
        }
        transfer = meaning.type == .transfer ? Transfer(fromUserId: meaning.fromUserId, toUserId: meaning.toUserId) : nil
        if entry.kind == .renewal, let state = described.renewal {
            renewal = Renewal(autoRenewStatus: state.autoRenewStatus, autoRenewProductId: state.autoRenewProductId,
                              isInBillingRetry: state.isInBillingRetry, gracePeriodExpiresMs: state.gracePeriodExpiresMs,
                              expirationIntent: state.expirationIntent)
        }
        if entry.kind == .grant, let finance = described.grant?.finance {
            offer = Offer(isTrial: finance.isTrial, isIntro: finance.isIntro, promotionalOfferId: finance.promotionalOfferId,
                          offerCodeRefName: finance.offerCodeRefName, offerType: finance.offerType,
                          offerDiscountType: finance.offerDiscountType)
        }
        correction = meaning.correction
        reason = entry.reason
        cause = EventCause(source: entry.cause.source.rawValue, eventId: entry.cause.eventId,
                           notificationType: entry.cause.notificationType, notificationSubtype: entry.cause.notificationSubtype,
                           transactionId: entry.cause.transactionId)
        self.recordedAtMs = recordedAtMs
    }

    /// The Kafka key (and webhook ordering key): the user, or the subscription while it has none.
    public var partitionKey: String { userId ?? "subscription:\(subscriptionKey)" }
}
