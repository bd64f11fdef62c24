import Foundation

/// The encoding of the records the stages pass each other (decoded, unique and commands topics).
///
/// A binary record starts with `marker`, `version` and a kind byte, then every field in a fixed order
/// (`BinaryRecord.swift` has the primitives). The marker is a byte no JSON text starts with, so readers
/// take both this encoding and the JSON records written before it (replay reads old records).
/// Foundation's JSON coding of these records was most of classify's CPU time; this costs a few
/// percent of it. `storeledger topics show` prints any of them as JSON.
public enum TopicRecords {
    public static let marker: UInt8 = 0xB7
    public static let version: UInt8 = 1

    public enum Kind: UInt8, Sendable, CaseIterable {
        case appleEvent = 1, uniqueEvent = 2, command = 3
    }

    /// Whether the bytes claim to be a binary record (the rest may still be corrupt).
    public static func isBinary(_ bytes: [UInt8]) -> Bool { bytes.first == marker }

    public static func kind(of bytes: [UInt8]) -> Kind? {
        guard bytes.count >= 3, bytes[0] == marker, bytes[1] == version else { return nil }
        return Kind(rawValue: bytes[2])
    }

    // MARK: encode

    public static func encode(_ event: AppleEvent) -> [UInt8] {
        var writer = header(.appleEvent)
        writer.event(event)
        return writer.bytes
    }

    public static func encode(_ unique: UniqueEvent) -> [UInt8] {
        var writer = header(.uniqueEvent)
        writer.uniqueHead(position: unique.decodedPosition, purchases: unique.purchases)
        writer.event(unique.event)
        return writer.bytes
    }

    /// Dedupe's output without re-encoding the event: a unique event ends with its event's fields, so
    /// a binary decoded record's body is copied as it is; a legacy JSON record's event is encoded.
    public static func encodeUnique(event: AppleEvent, decodedRecord: [UInt8], purchases: [PurchaseChange],
                                    position: RecordPosition?) -> [UInt8] {
        var writer = header(.uniqueEvent, capacity: decodedRecord.count + 256)
        writer.uniqueHead(position: position, purchases: purchases)
        if kind(of: decodedRecord) == .appleEvent {
            writer.bytes += decodedRecord[3...]
        } else {
            writer.event(event)
        }
        return writer.bytes
    }

    public static func encode(_ command: MembershipCommand) -> [UInt8] {
        var writer = header(.command, capacity: 256)
        writer.command(command)
        return writer.bytes
    }

    // MARK: decode (binary or legacy JSON)

    public static func decodeAppleEvent(_ bytes: [UInt8]) throws -> AppleEvent {
        guard isBinary(bytes) else { return try JSONDecoder().decode(AppleEvent.self, from: Data(bytes)) }
        return try whole(bytes, .appleEvent) { try $0.event() }
    }

    public static func decodeUniqueEvent(_ bytes: [UInt8]) throws -> UniqueEvent {
        guard isBinary(bytes) else { return try JSONDecoder().decode(UniqueEvent.self, from: Data(bytes)) }
        return try whole(bytes, .uniqueEvent) { reader in
            let position = try reader.optional { try $0.position() }
            let purchases = try reader.array { try $0.purchaseChange() }
            return UniqueEvent(event: try reader.event(), purchases: purchases, decodedPosition: position)
        }
    }

    public static func decodeCommand(_ bytes: [UInt8]) throws -> MembershipCommand {
        guard isBinary(bytes) else { return try JSONDecoder().decode(MembershipCommand.self, from: Data(bytes)) }
        return try whole(bytes, .command) { try $0.command() }
    }

    /// Any record of the three kinds as sorted-key JSON (binary ones decoded; JSON ones as they are),
    /// or nil when the bytes are a binary record that does not decode.
    public static func json(_ bytes: [UInt8], prettyPrinted: Bool = false) -> [UInt8]? {
        guard isBinary(bytes) else { return bytes }
        let encoder = JSONEncoder()
        encoder.outputFormatting = prettyPrinted ? [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
                                                 : [.sortedKeys, .withoutEscapingSlashes]
        let data: Data?
        switch kind(of: bytes) {
        case .appleEvent: data = try? encoder.encode(decodeAppleEvent(bytes))
        case .uniqueEvent: data = try? encoder.encode(decodeUniqueEvent(bytes))
        case .command: data = try? encoder.encode(decodeCommand(bytes))
        case nil: data = nil
        }
        return data.map { [UInt8]($0) }
    }

    private static func header(_ kind: Kind, capacity: Int = 768) -> BinaryWriter {
        var writer = BinaryWriter(capacity: capacity)
        writer.bytes += [marker, version, kind.rawValue]
        return writer
    }

    private static func whole<T>(_ bytes: [UInt8], _ expected: Kind, _ read: (inout BinaryReader) throws -> T) throws -> T {
        guard bytes.count >= 3 else { throw TopicRecordError("truncated header", at: bytes.count) }
        guard bytes[1] == version else { throw TopicRecordError("unknown record version \(bytes[1])", at: 1) }
        guard bytes[2] == expected.rawValue else {
            throw TopicRecordError("record kind \(bytes[2]), expected \(expected.rawValue) (\(expected))", at: 2)
        }
        var reader = BinaryReader(bytes, from: 3)
        let value = try read(&reader)
        guard reader.isAtEnd else { throw reader.failure("\(reader.remaining) trailing bytes") }
        return value
    }
}

// MARK: field order, version 1 (append-only changes need a new version)

extension BinaryWriter {
    mutating func position(_ position: RecordPosition) {
        string(position.topic)
        int64(Int64(position.partition))
        int64(position.offset)
    }

    mutating func uniqueHead(position: RecordPosition?, purchases: [PurchaseChange]) {
        optional(position) { $0.position($1) }
        count(purchases.count)
        for change in purchases {
            string(change.purchaseId)
            string(change.kind.rawValue)
            transaction(change.transaction)
            count(change.aliases.count)
            for alias in change.aliases { string(alias) }
        }
    }

    mutating func event(_ event: AppleEvent) {
        int(event.schema)
        string(event.eventId)
        string(event.source.rawValue)
        string(event.environment)
        optionalString(event.bundleId)
        string(event.subscriptionKey)
        optional(event.notification) { $0.notification($1) }
        count(event.transactions.count)
        for transaction in event.transactions { self.transaction(transaction) }
        optional(event.renewalInfo) { $0.renewal($1) }
        optionalString(event.appUserId)
        int64(event.receivedAtMs)
        optional(event.rawPosition) { $0.position($1) }
        optionalInt64(event.statedAtMs)
        optionalString(event.provenance)
    }

    mutating func notification(_ meta: NotificationMeta) {
        string(meta.type)
        optionalString(meta.subtype)
        optionalString(meta.uuid)
        optionalInt64(meta.signedDateMs)
        optionalBool(meta.autoRenewStatus)
        optionalString(meta.autoRenewProductId)
        optionalInt64(meta.autoRenewStatusChangeDateMs)
        optionalInt(meta.status)
        optionalString(meta.originalTransactionId)
        optionalString(meta.webOrderLineItemId)
        optionalInt64(meta.cancellationDateMs)
        optionalString(meta.cancellationReason)
        optionalString(meta.expirationIntent)
        optionalBool(meta.aboutAnotherSubscription)
        optionalString(meta.consumptionRequestReason)
    }

    mutating func transaction(_ facts: TransactionFacts) {
        string(facts.transactionId)
        string(facts.originalTransactionId)
        optionalString(facts.webOrderLineItemId)
        string(facts.productId)
        optionalString(facts.bundleId)
        int64(facts.purchaseDateMs)
        optionalInt64(facts.originalPurchaseDateMs)
        optionalInt64(facts.expiresDateMs)
        optionalInt64(facts.cancellationDateMs)
        optionalString(facts.cancellationReason)
        optionalBool(facts.isUpgraded)
        optionalBool(facts.isTrialPeriod)
        optionalBool(facts.isInIntroOfferPeriod)
        optionalString(facts.promotionalOfferId)
        optionalString(facts.offerCodeRefName)
        optionalInt(facts.offerType)
        optionalString(facts.offerIdentifier)
        optionalString(facts.offerDiscountType)
        int(facts.quantity)
        optionalString(facts.productType)
        optionalString(facts.inAppOwnershipType)
        optionalString(facts.subscriptionGroupIdentifier)
        optionalString(facts.appAccountToken)
        optionalString(facts.storefront)
        optionalString(facts.transactionReason)
        optionalInt64(facts.price)
        optionalString(facts.currency)
        optionalString(facts.revocationType)
        optionalInt(facts.revocationPercentage)
        optionalString(facts.offerPeriod)
        optionalString(facts.storefrontId)
        optionalString(facts.appTransactionId)
        optionalString(facts.billingPlanType)
        optional(facts.commitmentInfo) { $0.commitment($1) }
    }

    mutating func commitment(_ info: CommitmentInfo) {
        optionalInt(info.billingPeriodNumber)
        optionalInt(info.totalBillingPeriods)
        optionalInt64(info.commitmentExpiresDateMs)
        optionalInt64(info.commitmentPrice)
    }

    mutating func renewal(_ facts: RenewalFacts) {
        string(facts.originalTransactionId)
        optionalString(facts.productId)
        optionalString(facts.autoRenewProductId)
        optionalBool(facts.autoRenewStatus)
        optionalString(facts.expirationIntent)
        optionalBool(facts.isInBillingRetryPeriod)
        optionalInt64(facts.gracePeriodExpiresDateMs)
        optionalString(facts.priceIncreaseStatus)
        optionalString(facts.appAccountToken)
        optionalInt64(facts.renewalDateMs)
        optionalInt64(facts.renewalPrice)
        optionalString(facts.currency)
        optionalInt(facts.offerType)
        optionalString(facts.offerIdentifier)
    }

    mutating func command(_ command: MembershipCommand) {
        string(command.commandId)
        string(command.subscriptionKey)
        action(command.action)
        string(command.reason)
        cause(command.cause)
    }

    mutating func action(_ action: MembershipCommand.Action) {
        bytes.append(ActionTag(action).rawValue)
        switch action {
        case .purchase(let grant): self.grant(grant)
        case .renewal(let state): renewalState(state)
        case .linkUser(let link):
            string(link.userId)
            string(link.via)
            string(link.transfer.rawValue)
            optionalInt64(link.claimedAtMs)
        case .record(let what): string(what)
        case .gracePeriod(let grace):
            optionalString(grace.productId)
            optionalString(grace.group)
            optionalInt64(grace.fromMs)
            int64(grace.untilMs)
        case .endGrace(let end):
            optionalString(end.productId)
            optionalString(end.group)
            int64(end.atMs)
        }
    }

    mutating func grant(_ grant: PurchaseGrant) {
        string(grant.purchaseId)
        string(grant.transactionId)
        string(grant.originalTransactionId)
        string(grant.productId)
        string(grant.productKind.rawValue)
        string(grant.group)
        int64(grant.startMs)
        optionalInt64(grant.endMs)
        optional(grant.cut) { writer, cut in
            writer.int64(cut.atMs)
            writer.string(cut.kind.rawValue)
            writer.optionalString(cut.appleReason)
            writer.optionalInt(cut.refundedShare)
        }
        optionalInt(grant.credit)
        finance(grant.finance)
        optionalInt(grant.level)
        optionalInt(grant.durationDays)
        optionalBool(grant.inCatalog)
        optionalString(grant.environment)
    }

    mutating func finance(_ flags: FinanceFlags) {
        bool(flags.isTrial)
        bool(flags.isIntro)
        optionalString(flags.promotionalOfferId)
        optionalString(flags.offerCodeRefName)
        optionalInt(flags.offerType)
        optionalString(flags.offerIdentifier)
        optionalString(flags.offerDiscountType)
        optionalString(flags.offerPeriod)
        optionalString(flags.billingPlanType)
        optional(flags.commitment) { $0.commitment($1) }
    }

    mutating func renewalState(_ state: RenewalState) {
        optionalBool(state.autoRenewStatus)
        optionalString(state.productId)
        optionalString(state.autoRenewProductId)
        optionalBool(state.isInBillingRetry)
        optionalInt64(state.gracePeriodExpiresMs)
        int64(state.asOfMs)
        optionalString(state.pendingChange)
        optionalString(state.expirationIntent)
        optionalString(state.priceIncreaseStatus)
        optionalInt(state.asOfRank)
        optionalString(state.sourceEventId)
    }

    mutating func cause(_ cause: Cause) {
        string(cause.source.rawValue)
        string(cause.eventId)
        optionalString(cause.notificationType)
        optionalString(cause.notificationSubtype)
        optionalString(cause.notificationUUID)
        optionalString(cause.transactionId)
        optionalString(cause.purchaseId)
        optional(cause.rawPosition) { $0.position($1) }
        optional(cause.decodedPosition) { $0.position($1) }
        optionalString(cause.environment)
        optionalString(cause.provenance)
    }
}

/// The action's case on the wire: explicit numbers, so reordering the enum changes nothing.
enum ActionTag: UInt8 {
    case purchase = 1, renewal, linkUser, record, gracePeriod, endGrace

    init(_ action: MembershipCommand.Action) {
        switch action {
        case .purchase: self = .purchase
        case .renewal: self = .renewal
        case .linkUser: self = .linkUser
        case .record: self = .record
        case .gracePeriod: self = .gracePeriod
        case .endGrace: self = .endGrace
        }
    }
}

extension BinaryReader {
    mutating func position() throws -> RecordPosition {
        RecordPosition(topic: try string(), partition: try int32(), offset: try int64())
    }

    mutating func purchaseChange() throws -> PurchaseChange {
        PurchaseChange(purchaseId: try string(), kind: try raw(PurchaseChange.Kind.self), transaction: try transaction(),
                       aliases: try array { try $0.string() })
    }

    mutating func event() throws -> AppleEvent {
        let schema = try int()
        var event = AppleEvent(
            eventId: try string(), source: try raw(EventSource.self), environment: try string(),
            bundleId: try optionalString(), subscriptionKey: try string(),
            notification: try optional { try $0.notification() }, transactions: try array { try $0.transaction() },
            renewalInfo: try optional { try $0.renewal() }, appUserId: try optionalString(), receivedAtMs: try int64(),
            rawPosition: try optional { try $0.position() }, statedAtMs: try optionalInt64(), provenance: try optionalString())
        event.schema = schema
        return event
    }

    mutating func notification() throws -> NotificationMeta {
        NotificationMeta(
            type: try string(), subtype: try optionalString(), uuid: try optionalString(), signedDateMs: try optionalInt64(),
            autoRenewStatus: try optionalBool(), autoRenewProductId: try optionalString(),
            autoRenewStatusChangeDateMs: try optionalInt64(), status: try optionalInt(),
            originalTransactionId: try optionalString(), webOrderLineItemId: try optionalString(),
            cancellationDateMs: try optionalInt64(), cancellationReason: try optionalString(),
            expirationIntent: try optionalString(), aboutAnotherSubscription: try optionalBool(),
            consumptionRequestReason: try optionalString())
    }

    mutating func transaction() throws -> TransactionFacts {
        TransactionFacts(
            transactionId: try string(), originalTransactionId: try string(), webOrderLineItemId: try optionalString(),
            productId: try string(), bundleId: try optionalString(), purchaseDateMs: try int64(),
            originalPurchaseDateMs: try optionalInt64(), expiresDateMs: try optionalInt64(),
            cancellationDateMs: try optionalInt64(), cancellationReason: try optionalString(), isUpgraded: try optionalBool(),
            isTrialPeriod: try optionalBool(), isInIntroOfferPeriod: try optionalBool(), promotionalOfferId: try optionalString(),
            offerCodeRefName: try optionalString(), offerType: try optionalInt(), offerIdentifier: try optionalString(),
            offerDiscountType: try optionalString(), quantity: try int(), productType: try optionalString(),
            inAppOwnershipType: try optionalString(), subscriptionGroupIdentifier: try optionalString(),
            appAccountToken: try optionalString(), storefront: try optionalString(), transactionReason: try optionalString(),
            price: try optionalInt64(), currency: try optionalString(), revocationType: try optionalString(),
            revocationPercentage: try optionalInt(), offerPeriod: try optionalString(), storefrontId: try optionalString(),
            appTransactionId: try optionalString(), billingPlanType: try optionalString(),
            commitmentInfo: try optional { try $0.commitment() })
    }

    mutating func commitment() throws -> CommitmentInfo {
        CommitmentInfo(billingPeriodNumber: try optionalInt(), totalBillingPeriods: try optionalInt(),
                       commitmentExpiresDateMs: try optionalInt64(), commitmentPrice: try optionalInt64())
    }

    mutating func renewal() throws -> RenewalFacts {
        RenewalFacts(
            originalTransactionId: try string(), productId: try optionalString(), autoRenewProductId: try optionalString(),
            autoRenewStatus: try optionalBool(), expirationIntent: try optionalString(), isInBillingRetryPeriod: try optionalBool(),
            gracePeriodExpiresDateMs: try optionalInt64(), priceIncreaseStatus: try optionalString(),
            appAccountToken: try optionalString(), renewalDateMs: try optionalInt64(), renewalPrice: try optionalInt64(),
            currency: try optionalString(), offerType: try optionalInt(), offerIdentifier: try optionalString())
    }

    mutating func command() throws -> MembershipCommand {
        MembershipCommand(commandId: try string(), subscriptionKey: try string(), action: try action(), reason: try string(),
                          cause: try cause())
    }

    mutating func action() throws -> MembershipCommand.Action {
        let tag = try byte()
        switch ActionTag(rawValue: tag) {
        case .purchase: return .purchase(try grant())
        case .renewal: return .renewal(try renewalState())
        case .linkUser:
            return .linkUser(UserLink(userId: try string(), via: try string(), transfer: try raw(AccountPolicy.TransferPolicy.self),
                                      claimedAtMs: try optionalInt64()))
        case .record: return .record(try string())
        case .gracePeriod:
            return .gracePeriod(GracePeriodGrant(productId: try optionalString(), group: try optionalString(),
                                                 fromMs: try optionalInt64(), untilMs: try int64()))
        case .endGrace:
            return .endGrace(GraceEnd(productId: try optionalString(), group: try optionalString(), atMs: try int64()))
        case nil: throw failure("unknown command action \(tag)")
        }
    }

    mutating func grant() throws -> PurchaseGrant {
        PurchaseGrant(
            purchaseId: try string(), transactionId: try string(), originalTransactionId: try string(),
            productId: try string(), productKind: try raw(ProductKind.self), group: try string(), startMs: try int64(),
            endMs: try optionalInt64(),
            cut: try optional { reader in
                Cut(atMs: try reader.int64(), kind: try reader.raw(Cut.Kind.self), appleReason: try reader.optionalString(),
                    refundedShare: try reader.optionalInt())
            },
            credit: try optionalInt(), finance: try finance(), level: try optionalInt(), durationDays: try optionalInt(),
            inCatalog: try optionalBool(), environment: try optionalString())
    }

    mutating func finance() throws -> FinanceFlags {
        FinanceFlags(isTrial: try bool(), isIntro: try bool(), promotionalOfferId: try optionalString(),
                     offerCodeRefName: try optionalString(), offerType: try optionalInt(), offerIdentifier: try optionalString(),
                     offerDiscountType: try optionalString(), offerPeriod: try optionalString(),
                     billingPlanType: try optionalString(), commitment: try optional { try $0.commitment() })
    }

    mutating func renewalState() throws -> RenewalState {
        RenewalState(autoRenewStatus: try optionalBool(), productId: try optionalString(), autoRenewProductId: try optionalString(),
                     isInBillingRetry: try optionalBool(), gracePeriodExpiresMs: try optionalInt64(), asOfMs: try int64(),
                     pendingChange: try optionalString(), expirationIntent: try optionalString(),
                     priceIncreaseStatus: try optionalString(), asOfRank: try optionalInt(), sourceEventId: try optionalString())
    }

    mutating func cause() throws -> Cause {
        Cause(source: try raw(EventSource.self), eventId: try string(), notificationType: try optionalString(),
              notificationSubtype: try optionalString(), notificationUUID: try optionalString(),
              transactionId: try optionalString(), purchaseId: try optionalString(),
              rawPosition: try optional { try $0.position() }, decodedPosition: try optional { try $0.position() },
              environment: try optionalString(), provenance: try optionalString())
    }
}
