/// The stored documents loaded per event, read back by `StoredJSONReader` (the other half of
/// `StateJSON`): the members their `Decodable` conformances read, required where those require them,
/// nil for null or absent where they use `decodeIfPresent`, unknown members skipped. A document of
/// another shape declines and goes to JSONDecoder.
public protocol StoredJSONDocument: Decodable {
    static func read(_ reader: inout StoredJSONReader) throws -> Self
}

/// A required member: absent declines (JSONDecoder would throw keyNotFound).
@inline(__always)
private func required<T>(_ value: T?) throws -> T {
    guard let value else { throw StoredJSONReader.Decline() }
    return value
}

extension SubscriptionState: StoredJSONDocument {
    public static func read(_ reader: inout StoredJSONReader) throws -> SubscriptionState {
        var key: String?
        var state = SubscriptionState(subscriptionKey: "")
        try reader.object { reader, member in
            switch member {
            case "subscriptionKey": key = try reader.string()
            case "userId": state.userId = try reader.optional { try $0.string() }
            case "grants": state.grants = try reader.optional { try $0.dictionary { try PurchaseGrant.read(&$0) } } ?? [:]
            case "granted": state.granted = try reader.optional { try $0.dictionary { try Interval.read(&$0) } } ?? [:]
            case "credited": state.credited = try reader.optional { try $0.dictionary { try $0.int() } } ?? [:]
            case "recordedCommands": state.recordedCommands = Set(try reader.optional { try $0.list { try $0.string() } } ?? [])
            case "renewal": state.renewal = try reader.optional { try RenewalState.read(&$0) }
            case "graces": state.graces = try reader.optional { try $0.dictionary { try GraceRecord.read(&$0) } } ?? [:]
            case "claims": state.claims = try reader.optional { try $0.dictionary { try $0.int64() } } ?? [:]
            case "environment": state.environment = try reader.optional { try $0.string() }
            case "graceEnds": state.graceEnds = try reader.optional { try $0.dictionary { try $0.list { try $0.int64() } } } ?? [:]
            case "factPositions": state.factPositions = try reader.optional { try $0.dictionary { try RecordPosition.read(&$0) } } ?? [:]
            default: try reader.skipValue()
            }
        }
        state.subscriptionKey = try required(key)
        return state
    }
}

extension SubscriptionState.GraceRecord {
    static func read(_ reader: inout StoredJSONReader) throws -> Self {
        var group: String?, productId: String?, startMs: Int64?, endMs: Int64?
        try reader.object { reader, member in
            switch member {
            case "group": group = try reader.string()
            case "productId": productId = try reader.optional { try $0.string() }
            case "startMs": startMs = try reader.int64()
            case "endMs": endMs = try reader.int64()
            default: try reader.skipValue()
            }
        }
        return Self(group: try required(group), productId: productId, startMs: try required(startMs), endMs: try required(endMs))
    }
}

extension Interval {
    static func read(_ reader: inout StoredJSONReader) throws -> Interval {
        var startMs: Int64?, endMs: Int64?
        try reader.object { reader, member in
            switch member {
            case "startMs": startMs = try reader.int64()
            case "endMs": endMs = try reader.optional { try $0.int64() }
            default: try reader.skipValue()
            }
        }
        return Interval(startMs: try required(startMs), endMs: endMs)
    }
}

extension RecordPosition {
    static func read(_ reader: inout StoredJSONReader) throws -> RecordPosition {
        var topic: String?, partition: Int32?, offset: Int64?
        try reader.object { reader, member in
            switch member {
            case "topic": topic = try reader.string()
            case "partition": partition = try reader.int32()
            case "offset": offset = try reader.int64()
            default: try reader.skipValue()
            }
        }
        return RecordPosition(topic: try required(topic), partition: try required(partition), offset: try required(offset))
    }
}

extension PurchaseGrant {
    static func read(_ reader: inout StoredJSONReader) throws -> PurchaseGrant {
        var purchaseId: String?, transactionId: String?, originalTransactionId: String?, productId: String?
        var productKind: ProductKind?, group: String?, startMs: Int64?, finance: FinanceFlags?
        var grant = PurchaseGrant(purchaseId: "", transactionId: "", originalTransactionId: "", productId: "",
                                  productKind: .unknown, group: "", startMs: 0, endMs: nil)
        try reader.object { reader, member in
            switch member {
            case "purchaseId": purchaseId = try reader.string()
            case "transactionId": transactionId = try reader.string()
            case "originalTransactionId": originalTransactionId = try reader.string()
            case "productId": productId = try reader.string()
            case "productKind": productKind = try reader.raw(ProductKind.self)
            case "group": group = try reader.string()
            case "startMs": startMs = try reader.int64()
            case "endMs": grant.endMs = try reader.optional { try $0.int64() }
            case "cut": grant.cut = try reader.optional { try Cut.read(&$0) }
            case "credit": grant.credit = try reader.optional { try $0.int() }
            case "finance": finance = try FinanceFlags.read(&reader)
            case "level": grant.level = try reader.optional { try $0.int() }
            case "durationDays": grant.durationDays = try reader.optional { try $0.int() }
            case "inCatalog": grant.inCatalog = try reader.optional { try $0.bool() }
            case "environment": grant.environment = try reader.optional { try $0.string() }
            default: try reader.skipValue()
            }
        }
        grant.purchaseId = try required(purchaseId)
        grant.transactionId = try required(transactionId)
        grant.originalTransactionId = try required(originalTransactionId)
        grant.productId = try required(productId)
        grant.productKind = try required(productKind)
        grant.group = try required(group)
        grant.startMs = try required(startMs)
        grant.finance = try required(finance)
        return grant
    }
}

extension Cut {
    static func read(_ reader: inout StoredJSONReader) throws -> Cut {
        var atMs: Int64?, kind: Kind?, appleReason: String?, refundedShare: Int?
        try reader.object { reader, member in
            switch member {
            case "atMs": atMs = try reader.int64()
            case "kind": kind = try reader.raw(Kind.self)
            case "appleReason": appleReason = try reader.optional { try $0.string() }
            case "refundedShare": refundedShare = try reader.optional { try $0.int() }
            default: try reader.skipValue()
            }
        }
        return Cut(atMs: try required(atMs), kind: try required(kind), appleReason: appleReason, refundedShare: refundedShare)
    }
}

extension FinanceFlags {
    static func read(_ reader: inout StoredJSONReader) throws -> FinanceFlags {
        var isTrial: Bool?, isIntro: Bool?
        var flags = FinanceFlags()
        try reader.object { reader, member in
            switch member {
            case "isTrial": isTrial = try reader.bool()
            case "isIntro": isIntro = try reader.bool()
            case "promotionalOfferId": flags.promotionalOfferId = try reader.optional { try $0.string() }
            case "offerCodeRefName": flags.offerCodeRefName = try reader.optional { try $0.string() }
            case "offerType": flags.offerType = try reader.optional { try $0.int() }
            case "offerIdentifier": flags.offerIdentifier = try reader.optional { try $0.string() }
            case "offerDiscountType": flags.offerDiscountType = try reader.optional { try $0.string() }
            case "offerPeriod": flags.offerPeriod = try reader.optional { try $0.string() }
            case "billingPlanType": flags.billingPlanType = try reader.optional { try $0.string() }
            case "commitment": flags.commitment = try reader.optional { try CommitmentInfo.read(&$0) }
            default: try reader.skipValue()
            }
        }
        flags.isTrial = try required(isTrial)
        flags.isIntro = try required(isIntro)
        return flags
    }
}

extension CommitmentInfo {
    static func read(_ reader: inout StoredJSONReader) throws -> CommitmentInfo {
        var info = CommitmentInfo()
        try reader.object { reader, member in
            switch member {
            case "billingPeriodNumber": info.billingPeriodNumber = try reader.optional { try $0.int() }
            case "totalBillingPeriods": info.totalBillingPeriods = try reader.optional { try $0.int() }
            case "commitmentExpiresDateMs": info.commitmentExpiresDateMs = try reader.optional { try $0.int64() }
            case "commitmentPrice": info.commitmentPrice = try reader.optional { try $0.int64() }
            default: try reader.skipValue()
            }
        }
        return info
    }
}

extension RenewalState {
    static func read(_ reader: inout StoredJSONReader) throws -> RenewalState {
        var asOfMs: Int64?
        var renewal = RenewalState(autoRenewStatus: nil, productId: nil, autoRenewProductId: nil, isInBillingRetry: nil,
                                   gracePeriodExpiresMs: nil, asOfMs: 0)
        try reader.object { reader, member in
            switch member {
            case "asOfMs": asOfMs = try reader.int64()
            case "asOfRank": renewal.asOfRank = try reader.optional { try $0.int() }
            case "autoRenewProductId": renewal.autoRenewProductId = try reader.optional { try $0.string() }
            case "autoRenewStatus": renewal.autoRenewStatus = try reader.optional { try $0.bool() }
            case "expirationIntent": renewal.expirationIntent = try reader.optional { try $0.string() }
            case "gracePeriodExpiresMs": renewal.gracePeriodExpiresMs = try reader.optional { try $0.int64() }
            case "isInBillingRetry": renewal.isInBillingRetry = try reader.optional { try $0.bool() }
            case "pendingChange": renewal.pendingChange = try reader.optional { try $0.string() }
            case "priceIncreaseStatus": renewal.priceIncreaseStatus = try reader.optional { try $0.string() }
            case "productId": renewal.productId = try reader.optional { try $0.string() }
            case "sourceEventId": renewal.sourceEventId = try reader.optional { try $0.string() }
            default: try reader.skipValue()
            }
        }
        renewal.asOfMs = try required(asOfMs)
        return renewal
    }
}

extension KnownPurchase: StoredJSONDocument {
    public static func read(_ reader: inout StoredJSONReader) throws -> KnownPurchase {
        var purchaseId: String?, facts: TransactionFacts?, aliases: [String]?, cancellationStatedAtMs: Int64?
        try reader.object { reader, member in
            switch member {
            case "purchaseId": purchaseId = try reader.string()
            case "facts": facts = try TransactionFacts.read(&reader)
            case "aliases": aliases = try reader.list { try $0.string() }
            case "cancellationStatedAtMs": cancellationStatedAtMs = try reader.optional { try $0.int64() }
            default: try reader.skipValue()
            }
        }
        return KnownPurchase(purchaseId: try required(purchaseId), facts: try required(facts), aliases: try required(aliases),
                             cancellationStatedAtMs: cancellationStatedAtMs)
    }
}

extension TransactionFacts {
    static func read(_ reader: inout StoredJSONReader) throws -> TransactionFacts {
        var transactionId: String?, originalTransactionId: String?, productId: String?, purchaseDateMs: Int64?, quantity: Int?
        var facts = TransactionFacts(transactionId: "", originalTransactionId: "", productId: "", purchaseDateMs: 0)
        try reader.object { reader, member in
            switch member {
            case "transactionId": transactionId = try reader.string()
            case "originalTransactionId": originalTransactionId = try reader.string()
            case "productId": productId = try reader.string()
            case "purchaseDateMs": purchaseDateMs = try reader.int64()
            case "quantity": quantity = try reader.int()
            case "webOrderLineItemId": facts.webOrderLineItemId = try reader.optional { try $0.string() }
            case "bundleId": facts.bundleId = try reader.optional { try $0.string() }
            case "originalPurchaseDateMs": facts.originalPurchaseDateMs = try reader.optional { try $0.int64() }
            case "expiresDateMs": facts.expiresDateMs = try reader.optional { try $0.int64() }
            case "cancellationDateMs": facts.cancellationDateMs = try reader.optional { try $0.int64() }
            case "cancellationReason": facts.cancellationReason = try reader.optional { try $0.string() }
            case "isUpgraded": facts.isUpgraded = try reader.optional { try $0.bool() }
            case "isTrialPeriod": facts.isTrialPeriod = try reader.optional { try $0.bool() }
            case "isInIntroOfferPeriod": facts.isInIntroOfferPeriod = try reader.optional { try $0.bool() }
            case "promotionalOfferId": facts.promotionalOfferId = try reader.optional { try $0.string() }
            case "offerCodeRefName": facts.offerCodeRefName = try reader.optional { try $0.string() }
            case "offerType": facts.offerType = try reader.optional { try $0.int() }
            case "offerIdentifier": facts.offerIdentifier = try reader.optional { try $0.string() }
            case "offerDiscountType": facts.offerDiscountType = try reader.optional { try $0.string() }
            case "productType": facts.productType = try reader.optional { try $0.string() }
            case "inAppOwnershipType": facts.inAppOwnershipType = try reader.optional { try $0.string() }
            case "subscriptionGroupIdentifier": facts.subscriptionGroupIdentifier = try reader.optional { try $0.string() }
            case "appAccountToken": facts.appAccountToken = try reader.optional { try $0.string() }
            case "storefront": facts.storefront = try reader.optional { try $0.string() }
            case "transactionReason": facts.transactionReason = try reader.optional { try $0.string() }
            case "price": facts.price = try reader.optional { try $0.int64() }
            case "currency": facts.currency = try reader.optional { try $0.string() }
            case "revocationType": facts.revocationType = try reader.optional { try $0.string() }
            case "revocationPercentage": facts.revocationPercentage = try reader.optional { try $0.int() }
            case "offerPeriod": facts.offerPeriod = try reader.optional { try $0.string() }
            case "storefrontId": facts.storefrontId = try reader.optional { try $0.string() }
            case "appTransactionId": facts.appTransactionId = try reader.optional { try $0.string() }
            case "billingPlanType": facts.billingPlanType = try reader.optional { try $0.string() }
            case "commitmentInfo": facts.commitmentInfo = try reader.optional { try CommitmentInfo.read(&$0) }
            default: try reader.skipValue()
            }
        }
        facts.transactionId = try required(transactionId)
        facts.originalTransactionId = try required(originalTransactionId)
        facts.productId = try required(productId)
        facts.purchaseDateMs = try required(purchaseDateMs)
        facts.quantity = try required(quantity)
        return facts
    }
}
