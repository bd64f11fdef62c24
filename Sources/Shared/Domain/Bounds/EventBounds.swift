/// The limits on everything that comes from outside and becomes a Kafka key, a header or a PostgreSQL
/// value (STYLE.md practice 12; docs/limits.md lists them). One validator for the whole pipeline:
/// ingest checks the ids a request carries (400 with the reason), decode checks every decoded event,
/// and dedupe, classify and membership check again where a record enters them (a record can reach a
/// topic some other way); a violation is a `PermanentFailure`, so the record is dead-lettered with
/// its original bytes and the stage moves on.
///
/// Reasons name the field and what is wrong with it, never the offending value of a string (a 4 KB
/// id would bloat the dead letter, and a token is nobody's business in a log).
public enum EventBounds {
    // MARK: limits

    /// Apple's identifiers (transaction, original transaction, web order line item, product, bundle,
    /// subscription group, offer and offer code ids, notification UUID, tokens) and our user ids.
    /// Apple's are at most a few dozen bytes; 255 keeps every key well inside PostgreSQL's index rows.
    public static let maxIdentifierBytes = 255
    /// The partition key after decode: an original transaction id, or `app:` + a bundle id.
    public static let maxSubscriptionKeyBytes = 300
    /// Ids StoreLedger derives from the above (event, purchase and command ids).
    public static let maxDerivedIdBytes = 2_048
    /// Apple's raw vocabulary kept as text (types, subtypes, reasons, environment, currency, storefront).
    public static let maxTextBytes = 255
    /// Transactions in one decoded event (one subscription): 40 years of monthly renewals, and a
    /// decoded record that stays far below the broker's message size.
    public static let maxTransactions = 500

    /// Dates Apple can state: the App Store opened in 2008; 2100 is a generous horizon.
    public static let earliestMs: Int64 = 1_199_145_600_000   // 2008-01-01T00:00:00Z
    public static let latestMs: Int64 = 4_102_444_800_000     // 2100-01-01T00:00:00Z
    public static let dates: ClosedRange<Int64> = earliestMs...latestMs

    /// Units in one purchase: StoreKit sells at most 10; the bound leaves room and stays a sanity check.
    public static let quantity: ClosedRange<Int> = 1...1_000
    /// Prices in milli-units of the currency (V2 `price`, `renewalPrice`): 10^12 units of any currency.
    public static let price: ClosedRange<Int64> = 0...1_000_000_000_000_000
    /// Apple's small enumerations sent as numbers (`offerType`, `status`): stored in `integer` columns.
    public static let enumeration: ClosedRange<Int> = 0...1_000
    /// V2 `revocationPercentage`, in thousandths of a percent.
    public static let revocationPercentage: ClosedRange<Int> = 0...100_000
    /// V2 `commitmentInfo` period numbers: a commitment of monthly charges over at most 100 years.
    public static let billingPeriods: ClosedRange<Int> = 0...1_200

    /// Catalog numbers (docs/catalog.md): a subscription lasts at most 100 years, a consumable credits
    /// at most a million units per purchase, so credits × quantity fits PostgreSQL's `integer`.
    public static let durationDays: ClosedRange<Int> = 1...36_600
    public static let credits: ClosedRange<Int> = 1...1_000_000
    public static let level: ClosedRange<Int> = 1...1_000
    public static let maxCredit = credits.upperBound * quantity.upperBound
    /// A grant may end a catalog duration after the latest date Apple can state.
    public static let grantTimes: ClosedRange<Int64> = earliestMs...(latestMs + Int64(durationDays.upperBound) * 86_400_000)

    /// JSON nesting (objects and arrays) in any body from outside: Apple's deepest is 5.
    public static let maxJSONDepth = 32

    // MARK: single values

    /// nil when `value` is a usable identifier: at most `maxBytes` UTF-8 bytes, no control characters
    /// (U+0000–U+001F, U+007F–U+009F), no line or paragraph separator, no U+2063 (the separator of
    /// the promotional-offer signature payload, R9), and not empty when `required`.
    public static func identifier(_ value: String, field: @autoclosure () -> String, maxBytes: Int = maxIdentifierBytes,
                                  required: Bool = true) -> PermanentFailure? {
        let bytes = value.utf8.count
        if bytes == 0 {
            return required ? PermanentFailure("empty_identifier", "\(field()) is empty") : nil
        }
        if bytes > maxBytes {
            return PermanentFailure("identifier_too_long", "\(field()) is \(bytes) bytes long, at most \(maxBytes) allowed")
        }
        return forbiddenCharacter(value, field: field())
    }

    /// Raw text from Apple (never an identifier): bounded and free of control characters.
    public static func text(_ value: String, field: @autoclosure () -> String, maxBytes: Int = maxTextBytes) -> PermanentFailure? {
        let bytes = value.utf8.count
        if bytes > maxBytes {
            return PermanentFailure("text_too_long", "\(field()) is \(bytes) bytes long, at most \(maxBytes) allowed")
        }
        return forbiddenCharacter(value, field: field())
    }

    public static func date(_ ms: Int64, field: @autoclosure () -> String, range: ClosedRange<Int64> = dates) -> PermanentFailure? {
        guard !range.contains(ms) else { return nil }
        return PermanentFailure("date_out_of_range",
                                "\(field()) = \(ms) ms is outside \(TimeText.iso(range.lowerBound)) … \(TimeText.iso(range.upperBound))")
    }

    public static func number<T: BinaryInteger>(_ value: T, field: @autoclosure () -> String, range: ClosedRange<T>,
                                                kind: String = "number_out_of_range") -> PermanentFailure? {
        guard !range.contains(value) else { return nil }
        return PermanentFailure(kind, "\(field()) = \(value) is outside \(range.lowerBound) … \(range.upperBound)")
    }

    static func forbiddenCharacter(_ value: String, field: @autoclosure () -> String) -> PermanentFailure? {
        // Printable ASCII (nearly every id) needs no scalar decoding.
        if isPrintableASCII(value) { return nil }
        var offset = 0
        for scalar in value.unicodeScalars {
            if isForbidden(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                return PermanentFailure("forbidden_character",
                                        "\(field()) contains U+\(String(repeating: "0", count: max(0, 4 - hex.count)))\(hex) at byte \(offset)")
            }
            offset += UTF8.width(scalar)
        }
        return nil
    }

    /// This runs on every string of every record in four stages: `utf8.allSatisfy` went byte by byte
    /// through the view, the string's own storage goes eight bytes at a time.
    static func isPrintableASCII(_ value: String) -> Bool {
        value.utf8.withContiguousStorageIfAvailable(PlainASCII.isPrintable) ?? value.utf8.allSatisfy { (0x20..<0x7F).contains($0) }
    }

    static func isForbidden(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029, 0x2063: return true
        default: return false
        }
    }
}

// MARK: records

extension EventBounds {
    /// The first violation in a decoded event (decode's output, dedupe's input), or nil.
    public static func check(_ event: AppleEvent) -> PermanentFailure? {
        var check = Checker()
        check.event(event, "event")
        return check.failure
    }

    /// The first violation in a record entering classify: the event and what dedupe says is new.
    public static func check(_ unique: UniqueEvent) -> PermanentFailure? {
        var check = Checker()
        check.event(unique.event, "event")
        check.count(unique.purchases.count, "purchases", max: maxTransactions)
        for (index, change) in unique.purchases.enumerated() {
            check.id(change.purchaseId, "purchases[\(index)].purchaseId", maxBytes: maxDerivedIdBytes)
            check.transaction(change.transaction, "purchases[\(index)].transaction")
            for (aliasIndex, alias) in change.aliases.enumerated() { check.id(alias, "purchases[\(index)].aliases[\(aliasIndex)]") }
        }
        return check.failure
    }

    /// The first violation in a record entering membership.
    public static func check(_ command: MembershipCommand) -> PermanentFailure? {
        var check = Checker()
        check.id(command.commandId, "commandId", maxBytes: maxDerivedIdBytes)
        check.id(command.subscriptionKey, "subscriptionKey", maxBytes: maxSubscriptionKeyBytes)
        check.forbidden(command.reason, "reason")
        switch command.action {
        case .purchase(let grant): check.grant(grant)
        case .renewal(let renewal): check.renewal(renewal)
        case .linkUser(let link):
            check.id(link.userId, "linkUser.userId")
            check.text(link.via, "linkUser.via")
        case .record(let what): check.text(what, "record")
        case .gracePeriod(let grace):
            check.optionalId(grace.productId, "gracePeriod.productId")
            check.optionalId(grace.group, "gracePeriod.group")
            check.optionalDate(grace.fromMs, "gracePeriod.fromMs", range: grantTimes)
            check.date(grace.untilMs, "gracePeriod.untilMs", range: grantTimes)
        case .endGrace(let end):
            check.optionalId(end.productId, "endGrace.productId")
            check.optionalId(end.group, "endGrace.group")
            check.date(end.atMs, "endGrace.atMs", range: grantTimes)
        }
        return check.failure
    }
}

/// Walks a record's fields in a fixed order and keeps the first violation. Field names and the paths
/// of nested parts are autoclosures: a path like `event.transactions[0].productId` is built only for
/// a violation (the check runs on every record in four stages).
private struct Checker {
    var failure: PermanentFailure?

    private mutating func keep(_ found: @autoclosure () -> PermanentFailure?) {
        if failure == nil { failure = found() }
    }

    mutating func id(_ value: String, _ field: @autoclosure () -> String, maxBytes: Int = EventBounds.maxIdentifierBytes) {
        keep(EventBounds.identifier(value, field: field(), maxBytes: maxBytes))
    }

    mutating func optionalId(_ value: String?, _ field: @autoclosure () -> String) {
        if let value { keep(EventBounds.identifier(value, field: field(), required: false)) }
    }

    mutating func text(_ value: String?, _ field: @autoclosure () -> String) {
        if let value { keep(EventBounds.text(value, field: field())) }
    }

    /// Text we compose ourselves (reasons): only the characters are checked, PostgreSQL refuses NUL.
    mutating func forbidden(_ value: String, _ field: @autoclosure () -> String) {
        keep(EventBounds.forbiddenCharacter(value, field: field()))
    }

    mutating func date(_ ms: Int64, _ field: @autoclosure () -> String, range: ClosedRange<Int64> = EventBounds.dates) {
        keep(EventBounds.date(ms, field: field(), range: range))
    }

    mutating func optionalDate(_ ms: Int64?, _ field: @autoclosure () -> String, range: ClosedRange<Int64> = EventBounds.dates) {
        if let ms { date(ms, field(), range: range) }
    }

    mutating func number<T: BinaryInteger>(_ value: T?, _ field: @autoclosure () -> String, _ range: ClosedRange<T>,
                                           kind: String = "number_out_of_range") {
        if let value { keep(EventBounds.number(value, field: field(), range: range, kind: kind)) }
    }

    mutating func count(_ count: Int, _ field: @autoclosure () -> String, max: Int) {
        if count > max { keep(PermanentFailure("too_many_items", "\(field()) has \(count) entries, at most \(max) allowed")) }
    }

    mutating func event(_ event: AppleEvent, _ path: @autoclosure () -> String) {
        id(event.eventId, "\(path()).eventId", maxBytes: EventBounds.maxDerivedIdBytes)
        text(event.environment, "\(path()).environment")
        optionalId(event.bundleId, "\(path()).bundleId")
        id(event.subscriptionKey, "\(path()).subscriptionKey", maxBytes: EventBounds.maxSubscriptionKeyBytes)
        optionalId(event.appUserId, "\(path()).appUserId")
        date(event.receivedAtMs, "\(path()).receivedAtMs")
        optionalDate(event.statedAtMs, "\(path()).statedAtMs")
        text(event.provenance, "\(path()).provenance")
        if let meta = event.notification { notification(meta, "\(path()).notification") }
        count(event.transactions.count, "\(path()).transactions", max: EventBounds.maxTransactions)
        for (index, transaction) in event.transactions.enumerated() {
            self.transaction(transaction, "\(path()).transactions[\(index)]")
        }
        if let renewal = event.renewalInfo { self.renewal(renewal, "\(path()).renewalInfo") }
    }

    mutating func notification(_ meta: NotificationMeta, _ p: @autoclosure () -> String) {
        text(meta.type, "\(p()).type")
        text(meta.subtype, "\(p()).subtype")
        optionalId(meta.uuid, "\(p()).uuid")
        optionalDate(meta.signedDateMs, "\(p()).signedDateMs")
        optionalId(meta.autoRenewProductId, "\(p()).autoRenewProductId")
        optionalDate(meta.autoRenewStatusChangeDateMs, "\(p()).autoRenewStatusChangeDateMs")
        number(meta.status, "\(p()).status", EventBounds.enumeration)
        optionalId(meta.originalTransactionId, "\(p()).originalTransactionId")
        optionalId(meta.webOrderLineItemId, "\(p()).webOrderLineItemId")
        optionalDate(meta.cancellationDateMs, "\(p()).cancellationDateMs")
        text(meta.cancellationReason, "\(p()).cancellationReason")
        text(meta.expirationIntent, "\(p()).expirationIntent")
        text(meta.consumptionRequestReason, "\(p()).consumptionRequestReason")
    }

    mutating func transaction(_ t: TransactionFacts, _ p: @autoclosure () -> String) {
        id(t.transactionId, "\(p()).transactionId")
        id(t.originalTransactionId, "\(p()).originalTransactionId")
        optionalId(t.webOrderLineItemId, "\(p()).webOrderLineItemId")
        id(t.productId, "\(p()).productId")
        optionalId(t.bundleId, "\(p()).bundleId")
        date(t.purchaseDateMs, "\(p()).purchaseDateMs")
        optionalDate(t.originalPurchaseDateMs, "\(p()).originalPurchaseDateMs")
        optionalDate(t.expiresDateMs, "\(p()).expiresDateMs")
        optionalDate(t.cancellationDateMs, "\(p()).cancellationDateMs")
        text(t.cancellationReason, "\(p()).cancellationReason")
        optionalId(t.promotionalOfferId, "\(p()).promotionalOfferId")
        optionalId(t.offerCodeRefName, "\(p()).offerCodeRefName")
        number(t.offerType, "\(p()).offerType", EventBounds.enumeration)
        optionalId(t.offerIdentifier, "\(p()).offerIdentifier")
        text(t.offerDiscountType, "\(p()).offerDiscountType")
        number(t.quantity, "\(p()).quantity", EventBounds.quantity, kind: "quantity_out_of_range")
        text(t.productType, "\(p()).productType")
        text(t.inAppOwnershipType, "\(p()).inAppOwnershipType")
        optionalId(t.subscriptionGroupIdentifier, "\(p()).subscriptionGroupIdentifier")
        optionalId(t.appAccountToken, "\(p()).appAccountToken")
        text(t.storefront, "\(p()).storefront")
        text(t.transactionReason, "\(p()).transactionReason")
        number(t.price, "\(p()).price", EventBounds.price)
        text(t.currency, "\(p()).currency")
        text(t.revocationType, "\(p()).revocationType")
        number(t.revocationPercentage, "\(p()).revocationPercentage", EventBounds.revocationPercentage)
        text(t.offerPeriod, "\(p()).offerPeriod")
        text(t.storefrontId, "\(p()).storefrontId")
        optionalId(t.appTransactionId, "\(p()).appTransactionId")
        text(t.billingPlanType, "\(p()).billingPlanType")
        if let c = t.commitmentInfo {
            number(c.billingPeriodNumber, "\(p()).commitmentInfo.billingPeriodNumber", EventBounds.billingPeriods)
            number(c.totalBillingPeriods, "\(p()).commitmentInfo.totalBillingPeriods", EventBounds.billingPeriods)
            optionalDate(c.commitmentExpiresDateMs, "\(p()).commitmentInfo.commitmentExpiresDateMs")
            number(c.commitmentPrice, "\(p()).commitmentInfo.commitmentPrice", EventBounds.price)
        }
    }

    mutating func renewal(_ r: RenewalFacts, _ p: @autoclosure () -> String) {
        id(r.originalTransactionId, "\(p()).originalTransactionId")
        optionalId(r.productId, "\(p()).productId")
        optionalId(r.autoRenewProductId, "\(p()).autoRenewProductId")
        text(r.expirationIntent, "\(p()).expirationIntent")
        optionalDate(r.gracePeriodExpiresDateMs, "\(p()).gracePeriodExpiresDateMs")
        text(r.priceIncreaseStatus, "\(p()).priceIncreaseStatus")
        optionalId(r.appAccountToken, "\(p()).appAccountToken")
        optionalDate(r.renewalDateMs, "\(p()).renewalDateMs")
        number(r.renewalPrice, "\(p()).renewalPrice", EventBounds.price)
        text(r.currency, "\(p()).currency")
        number(r.offerType, "\(p()).offerType", EventBounds.enumeration)
        optionalId(r.offerIdentifier, "\(p()).offerIdentifier")
    }

    mutating func grant(_ g: PurchaseGrant) {
        let p = "purchase"
        id(g.purchaseId, "\(p).purchaseId", maxBytes: EventBounds.maxDerivedIdBytes)
        id(g.transactionId, "\(p).transactionId")
        id(g.originalTransactionId, "\(p).originalTransactionId")
        id(g.productId, "\(p).productId")
        id(g.group, "\(p).group")
        date(g.startMs, "\(p).startMs", range: EventBounds.grantTimes)
        optionalDate(g.endMs, "\(p).endMs", range: EventBounds.grantTimes)
        if let cut = g.cut {
            date(cut.atMs, "\(p).cut.atMs")
            text(cut.appleReason, "\(p).cut.appleReason")
        }
        number(g.credit, "\(p).credit", 0...EventBounds.maxCredit)
        optionalId(g.finance.promotionalOfferId, "\(p).finance.promotionalOfferId")
        optionalId(g.finance.offerCodeRefName, "\(p).finance.offerCodeRefName")
        number(g.finance.offerType, "\(p).finance.offerType", EventBounds.enumeration)
        optionalId(g.finance.offerIdentifier, "\(p).finance.offerIdentifier")
        number(g.level, "\(p).level", EventBounds.level)
        number(g.durationDays, "\(p).durationDays", EventBounds.durationDays)
        text(g.environment, "\(p).environment")
    }

    mutating func renewal(_ r: RenewalState) {
        let p = "renewal"
        optionalId(r.productId, "\(p).productId")
        optionalId(r.autoRenewProductId, "\(p).autoRenewProductId")
        optionalDate(r.gracePeriodExpiresMs, "\(p).gracePeriodExpiresMs")
        date(r.asOfMs, "\(p).asOfMs")
        text(r.pendingChange, "\(p).pendingChange")
        text(r.expirationIntent, "\(p).expirationIntent")
        text(r.priceIncreaseStatus, "\(p).priceIncreaseStatus")
        number(r.asOfRank, "\(p).asOfRank", EventBounds.enumeration)
        if let source = r.sourceEventId { id(source, "\(p).sourceEventId", maxBytes: EventBounds.maxDerivedIdBytes) }
    }
}
