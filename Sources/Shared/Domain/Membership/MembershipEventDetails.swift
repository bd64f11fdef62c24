/// What a membership event says beyond its ledger entry: the purchase's transaction ids, the product
/// change, transfer, renewal and offer facts, whether it corrects, when it was recorded, and the exact
/// amount and balance (the ledger's integer columns clamp them). The outbox keeps these few bytes and
/// the relay and webhooks rebuild the event from them and the entry's ledger row (`MembershipEvent
/// init(type:entry:details:)`), rather than a second copy of the entry as JSON beside it: the copy was
/// most of the outbox's bytes, written with the entry and rewritten at each of the relay's two marks.
public struct MembershipEventDetails: Sendable, Equatable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var amount: Int?
    public var balanceAfter: Int?
    public var productChange: MembershipEvent.ProductChange?
    public var transfer: MembershipEvent.Transfer?
    public var renewal: MembershipEvent.Renewal?
    public var offer: MembershipEvent.Offer?
    public var correction: Bool
    public var recordedAtMs: Int64

    public init(_ event: MembershipEvent) {
        transactionId = event.transactionId
        originalTransactionId = event.originalTransactionId
        amount = event.amount
        balanceAfter = event.balanceAfter
        productChange = event.productChange
        transfer = event.transfer
        renewal = event.renewal
        offer = event.offer
        correction = event.correction
        recordedAtMs = event.recordedAtMs
    }

    /// The first byte of the encoding; another version is refused, not misread. A release that adds a
    /// field or a case to any of the fields' enums writes a higher version, so that the relay of an
    /// older release waits for its own upgrade instead of taking the row for a damaged one.
    static let version: UInt8 = 1

    /// Whether `bytes` are details of a later version than this release writes.
    public static func isNewer(_ bytes: [UInt8]) -> Bool { (bytes.first ?? 0) > version }

    /// The binary encoding (`BinaryRecord.swift`'s primitives), fields in a fixed order.
    public var bytes: [UInt8] {
        var out = BinaryWriter(capacity: 64)
        out.bytes.append(Self.version)
        out.optionalString(transactionId)
        out.optionalString(originalTransactionId)
        out.optionalInt(amount)
        out.optionalInt(balanceAfter)
        out.optional(productChange) { out, change in
            out.string(change.mode.rawValue)
            out.optionalString(change.fromProductId)
            out.optionalString(change.toProductId)
        }
        out.optional(transfer) { out, transfer in
            out.optionalString(transfer.fromUserId)
            out.optionalString(transfer.toUserId)
        }
        out.optional(renewal) { out, renewal in
            out.optionalBool(renewal.autoRenewStatus)
            out.optionalString(renewal.autoRenewProductId)
            out.optionalBool(renewal.isInBillingRetry)
            out.optionalInt64(renewal.gracePeriodExpiresMs)
            out.optionalString(renewal.expirationIntent)
        }
        out.optional(offer) { out, offer in
            out.bool(offer.isTrial)
            out.bool(offer.isIntro)
            out.optionalString(offer.promotionalOfferId)
            out.optionalString(offer.offerCodeRefName)
            out.optionalInt(offer.offerType)
            out.optionalString(offer.offerDiscountType)
        }
        out.bool(correction)
        out.int64(recordedAtMs)
        return out.bytes
    }

    /// Reads `bytes`; a `TopicRecordError` for anything but one whole encoding of this version.
    public init(bytes: [UInt8]) throws {
        var reader = BinaryReader(bytes)
        guard try reader.byte() == Self.version else { throw TopicRecordError("unknown event details version", at: 0) }
        transactionId = try reader.optionalString()
        originalTransactionId = try reader.optionalString()
        amount = try reader.optionalInt()
        balanceAfter = try reader.optionalInt()
        productChange = try reader.optional {
            MembershipEvent.ProductChange(mode: try $0.raw(ProductChangeMode.self), fromProductId: try $0.optionalString(),
                                          toProductId: try $0.optionalString())
        }
        transfer = try reader.optional {
            MembershipEvent.Transfer(fromUserId: try $0.optionalString(), toUserId: try $0.optionalString())
        }
        renewal = try reader.optional {
            MembershipEvent.Renewal(autoRenewStatus: try $0.optionalBool(), autoRenewProductId: try $0.optionalString(),
                                    isInBillingRetry: try $0.optionalBool(), gracePeriodExpiresMs: try $0.optionalInt64(),
                                    expirationIntent: try $0.optionalString())
        }
        offer = try reader.optional {
            MembershipEvent.Offer(isTrial: try $0.bool(), isIntro: try $0.bool(), promotionalOfferId: try $0.optionalString(),
                                  offerCodeRefName: try $0.optionalString(), offerType: try $0.optionalInt(),
                                  offerDiscountType: try $0.optionalString())
        }
        correction = try reader.bool()
        recordedAtMs = try reader.int64()
        guard reader.isAtEnd else { throw TopicRecordError("bytes after the event details", at: reader.index) }
    }
}

/// The part of a membership event its ledger row holds, as the relay reads the row.
public struct MembershipEventEntry: Sendable, Equatable {
    public var entryId: Int64
    public var ledgerKind: String
    public var userId: String?
    public var subscriptionKey: String
    public var environment: String?
    public var group: String?
    public var productId: String?
    public var purchaseId: String?
    public var interval: Interval?
    public var cutKind: String?
    public var before: [Interval]
    public var after: [Interval]
    public var reason: String
    public var cause: MembershipEvent.EventCause

    public init(entryId: Int64, ledgerKind: String, userId: String?, subscriptionKey: String, environment: String?, group: String?,
                productId: String?, purchaseId: String?, interval: Interval?, cutKind: String?, before: [Interval],
                after: [Interval], reason: String, cause: MembershipEvent.EventCause) {
        self.entryId = entryId
        self.ledgerKind = ledgerKind
        self.userId = userId
        self.subscriptionKey = subscriptionKey
        self.environment = environment
        self.group = group
        self.productId = productId
        self.purchaseId = purchaseId
        self.interval = interval
        self.cutKind = cutKind
        self.before = before
        self.after = after
        self.reason = reason
        self.cause = cause
    }
}

extension MembershipEvent {
    /// The event the membership worker described, rebuilt from its ledger row and details: equal to it
    /// (`MembershipEventDetailsTests`), so its JSON is byte for byte the same.
    public init(type: MembershipEventType, entry: MembershipEventEntry, details: MembershipEventDetails) {
        schema = Self.schemaId
        eventId = "ledger-\(entry.entryId)"
        self.type = type
        ledgerEntryId = entry.entryId
        ledgerKind = entry.ledgerKind
        userId = entry.userId
        subscriptionKey = entry.subscriptionKey
        environment = entry.environment
        group = entry.group
        productId = entry.productId
        purchaseId = entry.purchaseId
        transactionId = details.transactionId
        originalTransactionId = details.originalTransactionId
        interval = entry.interval
        amount = details.amount
        balanceAfter = details.balanceAfter
        cutKind = entry.cutKind
        entitlement = Entitlement(before: entry.before, after: entry.after)
        productChange = details.productChange
        transfer = details.transfer
        renewal = details.renewal
        offer = details.offer
        correction = details.correction
        reason = entry.reason
        cause = entry.cause
        recordedAtMs = details.recordedAtMs
    }
}

extension Interval {
    /// A stored list of intervals (a ledger row's `before_intervals` / `after_intervals`, as our writer or
    /// jsonb prints it); nil when the text is of another shape.
    public static func storedList(_ text: String) -> [Interval]? {
        var text = text
        return text.withUTF8 { StoredJSONReader.document($0) { try $0.list { try Interval.read(&$0) } } }
    }
}
