/// What dedupe emits on the unique topic: the decoded event reduced to what is *new*.
/// Purchases seen before with the same facts are dropped; a purchase seen again with new facts
/// (a cancellation date, a new expiry) is a change (R2).
public struct UniqueEvent: Codable, Sendable, Equatable {
    public var event: AppleEvent
    public var purchases: [PurchaseChange]
    /// Where the decoded record sat (the cause chain continues from it).
    public var decodedPosition: RecordPosition?

    public init(event: AppleEvent, purchases: [PurchaseChange], decodedPosition: RecordPosition? = nil) {
        self.event = event
        self.purchases = purchases
        self.decodedPosition = decodedPosition
    }
}

public struct PurchaseChange: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable { case new, changed }
    public var purchaseId: String
    public var kind: Kind
    /// The merged facts of the purchase after this event (the latest non-nil value of each field).
    public var transaction: TransactionFacts
    /// Every transaction_id seen for this purchase so far, oldest first (R1 aliases).
    public var aliases: [String]

    public init(purchaseId: String, kind: Kind, transaction: TransactionFacts, aliases: [String]) {
        self.purchaseId = purchaseId
        self.kind = kind
        self.transaction = transaction
        self.aliases = aliases
    }
}

/// Why a membership change happened: the evidence support staff show a customer (R4).
public struct Cause: Codable, Sendable, Equatable {
    public var source: EventSource
    public var eventId: String
    public var notificationType: String?
    public var notificationSubtype: String?
    public var notificationUUID: String?
    public var transactionId: String?
    public var purchaseId: String?
    public var rawPosition: RecordPosition?
    public var decodedPosition: RecordPosition?
    /// Apple's environment of the input (R18): support sees a Sandbox purchase as one.
    public var environment: String?
    /// "recovered" or "server-api" when the input did not come through ingest (`AppleEvent.provenance`).
    public var provenance: String?

    public init(source: EventSource, eventId: String, notificationType: String? = nil,
                notificationSubtype: String? = nil, notificationUUID: String? = nil, transactionId: String? = nil,
                purchaseId: String? = nil, rawPosition: RecordPosition? = nil, decodedPosition: RecordPosition? = nil,
                environment: String? = nil, provenance: String? = nil) {
        self.provenance = provenance
        self.source = source
        self.eventId = eventId
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        self.notificationUUID = notificationUUID
        self.transactionId = transactionId
        self.purchaseId = purchaseId
        self.rawPosition = rawPosition
        self.decodedPosition = decodedPosition
        self.environment = environment
    }
}
