/// The documents stored in PostgreSQL's JSON columns (`purchases.state`, `subscriptions.state`,
/// `ledger.cause`, `user_membership.view`), written directly: the same members and values as their `Encodable` conformances
/// (`StateJSONTests` compares the two, and counts the fields), so every reader that decodes them
/// with `JSONDecoder` or reads them in SQL sees no difference. Foundation's encoder of these
/// was 11 % of the pipeline's samples. Members go in sorted order, dictionaries by key.
extension KnownPurchase {
    public var json: [UInt8] {
        SortedKeyJSON.document {
            $0.strings("aliases", aliases)
            $0.int("cancellationStatedAtMs", cancellationStatedAtMs)
            $0.object("facts") { facts.write(&$0) }
            $0.string("purchaseId", purchaseId)
        }
    }
}

extension Cause {
    public var json: [UInt8] {
        SortedKeyJSON.document {
            if let decodedPosition { $0.object("decodedPosition") { decodedPosition.write(&$0) } }
            $0.string("environment", environment)
            $0.string("eventId", eventId)
            $0.string("notificationSubtype", notificationSubtype)
            $0.string("notificationType", notificationType)
            $0.string("notificationUUID", notificationUUID)
            $0.string("provenance", provenance)
            $0.string("purchaseId", purchaseId)
            if let rawPosition { $0.object("rawPosition") { rawPosition.write(&$0) } }
            $0.string("source", source.rawValue)
            $0.string("transactionId", transactionId)
        }
    }
}

extension SubscriptionState {
    /// As `encode(to:)`: empty `claims`, `graceEnds` and `factPositions` are left out, the others kept.
    public var json: [UInt8] {
        SortedKeyJSON.document {
            if !claims.isEmpty { $0.dictionary("claims", claims) { $0.int($1) } }
            $0.dictionary("credited", credited) { $0.int($1) }
            $0.string("environment", environment)
            if !factPositions.isEmpty { $0.dictionary("factPositions", factPositions) { out, position in out.object { position.write(&$0) } } }
            if !graceEnds.isEmpty { $0.dictionary("graceEnds", graceEnds) { $0.ints($1) } }
            $0.dictionary("graces", graces) { out, grace in
                out.object {
                    $0.int("endMs", grace.endMs)
                    $0.string("group", grace.group)
                    $0.string("productId", grace.productId)
                    $0.int("startMs", grace.startMs)
                }
            }
            $0.dictionary("granted", granted) { out, interval in out.object { $0.interval(interval) } }
            $0.dictionary("grants", grants) { out, grant in out.object { grant.write(&$0) } }
            $0.strings("recordedCommands", recordedCommands.sorted())
            if let renewal { $0.object("renewal") { renewal.write(&$0) } }
            $0.string("subscriptionKey", subscriptionKey)
            $0.string("userId", userId)
        }
    }
}

extension GroupMembership {
    /// The per-user view, one per user and group, rewritten whenever one of the user's subscriptions changes.
    public var json: [UInt8] {
        SortedKeyJSON.document {
            $0.bool("autoRenewStatus", autoRenewStatus)
            $0.int("balance", balance)
            $0.string("currentProduct", currentProduct)
            $0.string("currentSubscriptionKey", currentSubscriptionKey)
            if let environments { $0.strings("environments", environments) }
            $0.int("expiresMs", expiresMs)
            $0.int("gracePeriodExpiresMs", gracePeriodExpiresMs)
            $0.string("group", group)
            $0.intervals("intervals", intervals)
            $0.bool("isInBillingRetry", isInBillingRetry)
            $0.bool("openEnded", openEnded)
            $0.string("pendingChange", pendingChange)
            $0.string("pendingProduct", pendingProduct)
            $0.strings("subscriptionKeys", subscriptionKeys)
        }
    }
}

extension TransactionFacts {
    func write(_ out: inout SortedKeyJSON) {
        out.string("appAccountToken", appAccountToken)
        out.string("appTransactionId", appTransactionId)
        out.string("billingPlanType", billingPlanType)
        out.string("bundleId", bundleId)
        out.int("cancellationDateMs", cancellationDateMs)
        out.string("cancellationReason", cancellationReason)
        if let commitmentInfo { out.object("commitmentInfo") { commitmentInfo.write(&$0) } }
        out.string("currency", currency)
        out.int("expiresDateMs", expiresDateMs)
        out.string("inAppOwnershipType", inAppOwnershipType)
        out.bool("isInIntroOfferPeriod", isInIntroOfferPeriod)
        out.bool("isTrialPeriod", isTrialPeriod)
        out.bool("isUpgraded", isUpgraded)
        out.string("offerCodeRefName", offerCodeRefName)
        out.string("offerDiscountType", offerDiscountType)
        out.string("offerIdentifier", offerIdentifier)
        out.string("offerPeriod", offerPeriod)
        out.int("offerType", offerType)
        out.int("originalPurchaseDateMs", originalPurchaseDateMs)
        out.string("originalTransactionId", originalTransactionId)
        out.int("price", price)
        out.string("productId", productId)
        out.string("productType", productType)
        out.string("promotionalOfferId", promotionalOfferId)
        out.int("purchaseDateMs", purchaseDateMs)
        out.int("quantity", quantity)
        out.int("revocationPercentage", revocationPercentage)
        out.string("revocationType", revocationType)
        out.string("storefront", storefront)
        out.string("storefrontId", storefrontId)
        out.string("subscriptionGroupIdentifier", subscriptionGroupIdentifier)
        out.string("transactionId", transactionId)
        out.string("transactionReason", transactionReason)
        out.string("webOrderLineItemId", webOrderLineItemId)
    }
}

extension CommitmentInfo {
    func write(_ out: inout SortedKeyJSON) {
        out.int("billingPeriodNumber", billingPeriodNumber)
        out.int("commitmentExpiresDateMs", commitmentExpiresDateMs)
        out.int("commitmentPrice", commitmentPrice)
        out.int("totalBillingPeriods", totalBillingPeriods)
    }
}

extension RecordPosition {
    func write(_ out: inout SortedKeyJSON) {
        out.int("offset", offset)
        out.int("partition", partition)
        out.string("topic", topic)
    }
}

extension PurchaseGrant {
    /// The grant alone, as it sits in the state's `grants` (the finance row's `grant_facts`).
    public var json: [UInt8] { SortedKeyJSON.document { write(&$0) } }

    func write(_ out: inout SortedKeyJSON) {
        out.int("credit", credit)
        if let cut {
            out.object("cut") {
                $0.string("appleReason", cut.appleReason)
                $0.int("atMs", cut.atMs)
                $0.string("kind", cut.kind.rawValue)
                $0.int("refundedShare", cut.refundedShare)
            }
        }
        out.int("durationDays", durationDays)
        out.int("endMs", endMs)
        out.string("environment", environment)
        out.object("finance") { finance.write(&$0) }
        out.string("group", group)
        out.bool("inCatalog", inCatalog)
        out.int("level", level)
        out.string("originalTransactionId", originalTransactionId)
        out.string("productId", productId)
        out.string("productKind", productKind.rawValue)
        out.string("purchaseId", purchaseId)
        out.int("startMs", startMs)
        out.string("transactionId", transactionId)
    }
}

extension FinanceFlags {
    func write(_ out: inout SortedKeyJSON) {
        out.string("billingPlanType", billingPlanType)
        if let commitment { out.object("commitment") { commitment.write(&$0) } }
        out.bool("isIntro", isIntro)
        out.bool("isTrial", isTrial)
        out.string("offerCodeRefName", offerCodeRefName)
        out.string("offerDiscountType", offerDiscountType)
        out.string("offerIdentifier", offerIdentifier)
        out.string("offerPeriod", offerPeriod)
        out.int("offerType", offerType)
        out.string("promotionalOfferId", promotionalOfferId)
    }
}

extension RenewalState {
    func write(_ out: inout SortedKeyJSON) {
        out.int("asOfMs", asOfMs)
        out.int("asOfRank", asOfRank)
        out.string("autoRenewProductId", autoRenewProductId)
        out.bool("autoRenewStatus", autoRenewStatus)
        out.string("expirationIntent", expirationIntent)
        out.int("gracePeriodExpiresMs", gracePeriodExpiresMs)
        out.bool("isInBillingRetry", isInBillingRetry)
        out.string("pendingChange", pendingChange)
        out.string("priceIncreaseStatus", priceIncreaseStatus)
        out.string("productId", productId)
        out.string("sourceEventId", sourceEventId)
    }
}

extension SortedKeyJSON {
    mutating func strings(_ key: StaticString, _ values: [String]) {
        self.key(key)
        array(values) { $0.quotedValue($1) }
    }

    mutating func ints(_ values: [Int64]) {
        array(values) { $0.int($1) }
    }

    /// A JSON object from a dictionary, its keys in order (jsonb keeps no order; the bytes stay stable).
    mutating func dictionary<Value>(_ key: StaticString, _ values: [String: Value], _ write: (inout SortedKeyJSON, Value) -> Void) {
        object(key) { out in
            for entry in values.sorted(by: { $0.key < $1.key }) {
                out.key(entry.key)
                write(&out, entry.value)
            }
        }
    }
}
