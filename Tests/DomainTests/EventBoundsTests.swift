@testable import AppleDecoding
@testable import Domain
import Foundation
import XCTest

/// docs/limits.md as tests: every identifier, text, date and number of a decoded event, a record
/// entering classify and a membership command is bounded by `EventBounds`, and the decoders refuse a
/// numeric field that is no Int64 instead of reading it as missing. The completeness tests walk the
/// records' fields by reflection, so a field added later without a bound fails here.
final class EventBoundsTests: XCTestCase {
    static let t: Int64 = 1_709_251_200_000   // 2024-03-01

    static var fullTransaction: TransactionFacts {
        TransactionFacts(
            transactionId: "2000000123", originalTransactionId: "2000000100", webOrderLineItemId: "2000000099",
            productId: "vip.a.1m", bundleId: "com.example.app", purchaseDateMs: t, originalPurchaseDateMs: t,
            expiresDateMs: t + month, cancellationDateMs: t + day, cancellationReason: "0", isUpgraded: false,
            isTrialPeriod: false, isInIntroOfferPeriod: false, promotionalOfferId: "promo", offerCodeRefName: "code",
            offerType: 2, offerIdentifier: "promo", offerDiscountType: "PAY_AS_YOU_GO", quantity: 1,
            productType: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED", subscriptionGroupIdentifier: "21000001",
            appAccountToken: "7e3fb20b-4cdb-47cc-936d-99d65f608138", storefront: "USA", transactionReason: "PURCHASE",
            price: 9_990, currency: "USD", revocationType: "REFUND_FULL", revocationPercentage: 100_000, offerPeriod: "P1M",
            storefrontId: "143441", appTransactionId: "704289572311258165", billingPlanType: "UP_FRONT",
            commitmentInfo: CommitmentInfo(billingPeriodNumber: 3, totalBillingPeriods: 12, commitmentExpiresDateMs: t + 1_000,
                                           commitmentPrice: 119_880))
    }

    static var fullRenewal: RenewalFacts {
        RenewalFacts(originalTransactionId: "2000000100", productId: "vip.a.1m", autoRenewProductId: "vip.b.1m",
                     autoRenewStatus: true, expirationIntent: "1", isInBillingRetryPeriod: false,
                     gracePeriodExpiresDateMs: t + month, priceIncreaseStatus: "0",
                     appAccountToken: "7e3fb20b-4cdb-47cc-936d-99d65f608138", renewalDateMs: t + month, renewalPrice: 9_990,
                     currency: "USD", offerType: 1, offerIdentifier: "intro")
    }

    static var fullEvent: AppleEvent {
        AppleEvent(eventId: "v2:0f1e2d3c", source: .notificationV2, environment: "Production", bundleId: "com.example.app",
                   subscriptionKey: "2000000100",
                   notification: NotificationMeta(type: "DID_RENEW", subtype: "BILLING_RECOVERY", uuid: "0f1e2d3c",
                                                  signedDateMs: t, autoRenewStatus: true, autoRenewProductId: "vip.b.1m",
                                                  autoRenewStatusChangeDateMs: t, status: 1, originalTransactionId: "2000000100",
                                                  webOrderLineItemId: "2000000099", cancellationDateMs: t + day,
                                                  cancellationReason: "0", expirationIntent: "1", aboutAnotherSubscription: false,
                                                  consumptionRequestReason: "UNINTENDED_PURCHASE"),
                   transactions: [fullTransaction], renewalInfo: fullRenewal, appUserId: "user-1", receivedAtMs: t,
                   rawPosition: RecordPosition(topic: Topic.notificationsRaw, partition: 0, offset: 1), statedAtMs: t,
                   provenance: "recovered")
    }

    // MARK: single values

    func testIdentifierRules() {
        XCTAssertNil(EventBounds.identifier("2000000123", field: "id"))
        XCTAssertNil(EventBounds.identifier(String(repeating: "é", count: 127), field: "id"), "254 bytes")
        XCTAssertEqual(EventBounds.identifier(String(repeating: "é", count: 128), field: "id")?.kind, "identifier_too_long")
        XCTAssertEqual(EventBounds.identifier(String(repeating: "u", count: 4096), field: "user_id")?.reason,
                       "user_id is 4096 bytes long, at most 255 allowed")
        XCTAssertEqual(EventBounds.identifier("", field: "id")?.kind, "empty_identifier")
        XCTAssertNil(EventBounds.identifier("", field: "id", required: false))
        for bad in ["a\u{0}b", "a\nb", "\u{7F}", "a\u{85}", "x\u{2028}", "offer\u{2063}id", "\t"] {
            XCTAssertEqual(EventBounds.identifier(bad, field: "id")?.kind, "forbidden_character", bad.debugDescription)
        }
        XCTAssertEqual(EventBounds.identifier("ab\u{0}", field: "product_id")?.reason, "product_id contains U+0000 at byte 2")
        XCTAssertNil(EventBounds.identifier("user 1 ü 名前", field: "id"), "spaces and any printable text are fine")
    }

    /// The word-at-a-time scan agrees with the byte-by-byte rule for every ASCII byte at every position of
    /// strings long enough to take whole words (and their tails).
    func testPrintableASCIIScanAgreesWithTheByteRuleAtEveryPosition() {
        for length in [1, 7, 8, 9, 16, 23, 24, 31] {
            for position in 0..<length {
                for byte in UInt8(0)...UInt8(0x7F) {
                    var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    bytes[position] = byte
                    let text = String(decoding: bytes, as: UTF8.self)
                    let printable = (0x20..<0x7F).contains(byte)
                    XCTAssertEqual(EventBounds.identifier(text, field: "id")?.kind, printable ? nil : "forbidden_character",
                                   "byte \(byte) at \(position) of \(length)")
                }
            }
        }
        XCTAssertEqual(EventBounds.identifier("abcdefghijk\u{85}", field: "id")?.reason, "id contains U+0085 at byte 11",
                       "beyond ASCII the scalars are still checked")
        XCTAssertNil(EventBounds.identifier("abcdefgh ü 名前 ijklmnop", field: "id"))
    }

    func testDateAndNumberRanges() {
        XCTAssertNil(EventBounds.date(EventBounds.earliestMs, field: "d"))
        XCTAssertNil(EventBounds.date(EventBounds.latestMs, field: "d"))
        XCTAssertEqual(EventBounds.date(EventBounds.earliestMs - 1, field: "d")?.kind, "date_out_of_range")
        XCTAssertEqual(EventBounds.date(EventBounds.latestMs + 1, field: "d")?.kind, "date_out_of_range")
        XCTAssertEqual(EventBounds.date(.min, field: "purchaseDateMs")?.reason,
                       "purchaseDateMs = -9223372036854775808 ms is outside 2008-01-01T00:00:00Z … 2100-01-01T00:00:00Z")
        XCTAssertEqual(TimeText.iso(EventBounds.earliestMs), "2008-01-01T00:00:00Z")
        XCTAssertLessThanOrEqual(EventBounds.maxCredit, Int(Int32.max), "a credit fits the ledger's integer column")
        XCTAssertLessThan(EventBounds.grantTimes.upperBound, Int64.max / 2)
    }

    // MARK: records

    func testAFullValidEventPasses() {
        XCTAssertNil(EventBounds.check(Self.fullEvent))
        let unique = UniqueEvent(event: Self.fullEvent, purchases: [
            PurchaseChange(purchaseId: "2000000100|com.example.app|vip.a.1m|1709251200", kind: .new,
                           transaction: Self.fullTransaction, aliases: ["2000000123"]),
        ])
        XCTAssertNil(EventBounds.check(unique))
        for command in classify(unique, catalog: TestCatalog.standard) {
            XCTAssertNil(EventBounds.check(command), "\(command.commandId)")
        }
    }

    func testHostileValuesInTheEventAreRefusedWithTheirField() {
        var event = Self.fullEvent
        event.appUserId = String(repeating: "x", count: 4096)
        XCTAssertEqual(EventBounds.check(event)?.kind, "identifier_too_long")
        XCTAssertTrue(EventBounds.check(event)?.reason.hasPrefix("event.appUserId") ?? false)

        event = Self.fullEvent
        event.transactions[0].purchaseDateMs = .min
        XCTAssertEqual(EventBounds.check(event)?.reason,
                       "event.transactions[0].purchaseDateMs = -9223372036854775808 ms is outside 2008-01-01T00:00:00Z … 2100-01-01T00:00:00Z")

        for quantity in [Int.min, -1, 0, 1_001, Int.max] {
            event = Self.fullEvent
            event.transactions[0].quantity = quantity
            XCTAssertEqual(EventBounds.check(event)?.kind, "quantity_out_of_range", "\(quantity)")
        }
        event = Self.fullEvent
        event.transactions[0].quantity = 1_000
        XCTAssertNil(EventBounds.check(event))

        event = Self.fullEvent
        event.transactions = Array(repeating: Self.fullTransaction, count: EventBounds.maxTransactions + 1)
        XCTAssertEqual(EventBounds.check(event)?.kind, "too_many_items")

        event = Self.fullEvent
        event.transactions[0].transactionId = ""
        XCTAssertEqual(EventBounds.check(event)?.kind, "empty_identifier")
    }

    /// Every String, Int64 and Int field of the decoded records, one at a time: a NUL byte, 4 KB,
    /// Int64.min/max and Int.min/max are each refused naming that field. A field the full instances
    /// leave nil would escape this walk, so that fails too.
    func testEveryFieldOfADecodedEventIsBounded() throws {
        let full = try jsonObject(Self.fullEvent)
        assertNoNilFields(Self.fullEvent, "AppleEvent", except: [])
        assertNoNilFields(Self.fullEvent.notification!, "NotificationMeta", except: [])
        assertNoNilFields(Self.fullTransaction, "TransactionFacts", except: [])
        assertNoNilFields(Self.fullRenewal, "RenewalFacts", except: [])

        // Ours, never from Apple; and the flags, which have no range.
        let flags = [Self.fullEvent, Self.fullEvent.notification!, Self.fullTransaction, Self.fullRenewal].flatMap { value in
            Mirror(reflecting: value).children.compactMap { $0.value is Bool ? $0.label : nil }
        }
        let exempt = Set(["schema", "source", "rawPosition"] + flags)
        XCTAssertTrue(exempt.contains("isUpgraded"))
        var checked = 0
        func each(_ path: [String], _ value: Any) throws {
            if exempt.contains(path.last ?? "") { return }
            switch value {
            case let object as [String: Any]:
                for (key, inner) in object { try each(path + [key], inner) }
            case let array as [Any]:
                for (index, inner) in array.enumerated() { try each(path + ["\(index)"], inner) }
            case is String:
                for hostile in ["id\u{0}", String(repeating: "x", count: 4096)] {
                    let failure = try checkMutated(full, path, hostile)
                    XCTAssertNotNil(failure, "\(path.joined(separator: ".")) accepts \(hostile.prefix(8).debugDescription)")
                }
                checked += 1
            case is NSNumber:
                for hostile: Any in [NSNumber(value: Int64.min), NSNumber(value: Int64.max), NSNumber(value: -1)] {
                    let failure = try checkMutated(full, path, hostile)
                    XCTAssertNotNil(failure, "\(path.joined(separator: ".")) accepts \(hostile)")
                    if let failure { XCTAssertTrue(failure.kind.hasSuffix("out_of_range"), failure.description) }
                }
                checked += 1
            default:
                break
            }
        }
        try each([], full)
        XCTAssertGreaterThan(checked, 50, "the walk reached the fields")
    }

    func testCommandsAreBoundedWhereTheyEnterMembership() {
        let cause = Cause(source: .notificationV1, eventId: "e1")
        func command(_ action: MembershipCommand.Action, key: String = "s1", reason: String = "why") -> MembershipCommand {
            MembershipCommand(commandId: "e1#x", subscriptionKey: key, action: action, reason: reason, cause: cause)
        }
        let grant = PurchaseGrant(purchaseId: "s1|b|p|1709251200", transactionId: "1", originalTransactionId: "s1", productId: "p",
                                  productKind: .consumable, group: "coins", startMs: Self.t, endMs: nil, credit: 100)
        XCTAssertNil(EventBounds.check(command(.purchase(grant))))
        var bad = grant
        bad.credit = EventBounds.maxCredit + 1
        XCTAssertEqual(EventBounds.check(command(.purchase(bad)))?.kind, "number_out_of_range")
        bad = grant
        bad.startMs = .min
        XCTAssertEqual(EventBounds.check(command(.purchase(bad)))?.kind, "date_out_of_range")
        bad = grant
        bad.cut = Cut(atMs: .max, kind: .refund)
        XCTAssertEqual(EventBounds.check(command(.purchase(bad)))?.kind, "date_out_of_range")
        XCTAssertEqual(EventBounds.check(command(.linkUser(UserLink(userId: String(repeating: "u", count: 4096), via: "receipt-upload"))))?.kind,
                       "identifier_too_long")
        XCTAssertEqual(EventBounds.check(command(.linkUser(UserLink(userId: "u\u{0}", via: "receipt-upload"))))?.kind,
                       "forbidden_character")
        XCTAssertEqual(EventBounds.check(command(.record("x"), key: ""))?.kind, "empty_identifier")
        XCTAssertEqual(EventBounds.check(command(.record("x"), reason: "a\u{0}"))?.kind, "forbidden_character")
        XCTAssertEqual(EventBounds.check(command(.gracePeriod(GracePeriodGrant(productId: nil, group: nil, fromMs: nil, untilMs: .min))))?.kind,
                       "date_out_of_range")
        let renewal = RenewalState(autoRenewStatus: true, productId: "p", autoRenewProductId: "p", isInBillingRetry: nil,
                                   gracePeriodExpiresMs: nil, asOfMs: .max)
        XCTAssertEqual(EventBounds.check(command(.renewal(renewal)))?.kind, "date_out_of_range")
    }

    func testAViolationNamesItsWholePathInEveryNestedPart() {
        var event = Self.fullEvent
        event.notification?.uuid = "u\u{0}"
        XCTAssertEqual(EventBounds.check(event)?.reason, "event.notification.uuid contains U+0000 at byte 1")
        event = Self.fullEvent
        event.transactions = [Self.fullTransaction, Self.fullTransaction]
        event.transactions[1].productId = ""
        XCTAssertEqual(EventBounds.check(event)?.kind, "empty_identifier")
        XCTAssertTrue(EventBounds.check(event)?.reason.hasPrefix("event.transactions[1].productId") ?? false)
        event = Self.fullEvent
        event.renewalInfo?.autoRenewProductId = "p\u{0}"
        XCTAssertEqual(EventBounds.check(event)?.reason, "event.renewalInfo.autoRenewProductId contains U+0000 at byte 1")

        var transaction = Self.fullTransaction
        transaction.originalTransactionId = "1\u{0}"
        let changes = [PurchaseChange(purchaseId: "p0", kind: .new, transaction: Self.fullTransaction, aliases: []),
                       PurchaseChange(purchaseId: "p1", kind: .new, transaction: transaction, aliases: [])]
        XCTAssertEqual(EventBounds.check(UniqueEvent(event: Self.fullEvent, purchases: changes))?.reason,
                       "purchases[1].transaction.originalTransactionId contains U+0000 at byte 1")
        XCTAssertEqual(EventBounds.check(UniqueEvent(event: event, purchases: changes))?.reason,
                       "event.renewalInfo.autoRenewProductId contains U+0000 at byte 1", "the event's own fields come first")
    }

    func testAliasesAndPurchaseIdsAreBoundedWhereRecordsEnterClassify() {
        let change = PurchaseChange(purchaseId: "p1", kind: .new, transaction: Self.fullTransaction, aliases: ["1", "2\u{0}"])
        XCTAssertEqual(EventBounds.check(UniqueEvent(event: Self.fullEvent, purchases: [change]))?.reason,
                       "purchases[0].aliases[1] contains U+0000 at byte 1")
    }

    func testJSONDepth() {
        func nested(_ depth: Int) -> [UInt8] { Array((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8) }
        XCTAssertFalse(JSONDepth.exceeds(nested(32)))
        XCTAssertTrue(JSONDepth.exceeds(nested(33)))
        XCTAssertTrue(JSONDepth.exceeds(nested(100_000)))
        XCTAssertEqual(EventBounds.jsonDepth(nested(33))?.kind, "json_too_deep")
        // Brackets inside strings, escaped quotes included, do not count.
        let text = #"{"a":"[[[[\"[[[[","b":[{"c":"\\"}]}"#
        XCTAssertFalse(JSONDepth.exceeds(Array(text.utf8), limit: 3))
        XCTAssertTrue(JSONDepth.exceeds(Array(text.utf8), limit: 2))
    }

    /// The string-skipping scan agrees with a byte-at-a-time reference on random texts made of the
    /// bytes that matter (brackets, quotes, backslashes) and filler, at every limit.
    func testJSONDepthAgreesWithByteAtATimeScan() {
        func reference(_ bytes: [UInt8], limit: Int) -> Bool {
            var depth = 0, inString = false, escaped = false
            for byte in bytes {
                if inString {
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                    continue
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    if depth > limit { return true }
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth = max(0, depth - 1)
                default: break
                }
            }
            return false
        }
        let alphabet = Array(#"[]{}"\\a"#.utf8)
        var generator = SystemRandomNumberGenerator()
        var disagreements: [String] = []
        for _ in 0..<20_000 {
            let text = (0..<Int.random(in: 0...40, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            for limit in 0...4 where JSONDepth.exceeds(text, limit: limit) != reference(text, limit: limit) {
                disagreements.append("limit \(limit): \(String(decoding: text, as: UTF8.self))")
            }
        }
        XCTAssertEqual(disagreements.prefix(5), [])
    }

    func testCatalogNumbersAreBounded() {
        var catalog = TestCatalog.standard
        XCTAssertEqual(catalog.validate(), [])
        catalog.products[0].durationDays = EventBounds.durationDays.upperBound + 1
        catalog.products[6].credits = Int.max
        catalog.products[1].level = Int.max
        catalog.products[2].id = "vip\u{0}b"
        let paths = catalog.validate().map(\.path)
        XCTAssertTrue(paths.contains("products[0].durationDays"), "\(paths)")
        XCTAssertTrue(paths.contains("products[6].credits"), "\(paths)")
        XCTAssertTrue(paths.contains("products[1].level"), "\(paths)")
        XCTAssertTrue(paths.contains("products[2].id"), "\(paths)")
    }

    // MARK: decoders

    /// A V1 body whose numeric fields hold 28-digit values, Int64 extremes and wrong types: the first
    /// class is refused by the decoder (`invalid_number`), the second by the bounds after decode.
    func testV1NumericFieldsOutsideInt64AreRefusedNotDropped() throws {
        let numeric = ReceiptFields.transactionNumbers
        for key in numeric {
            for hostile: Any in ["1745044952000100000000000000", 1e30, "12abc", [1], ["a": 1]] {
                var transaction = Self.v1Transaction
                transaction[key] = hostile
                let failure = try decodeV1Failure(transactions: [transaction])
                XCTAssertEqual(failure?.kind, "invalid_number", "\(key) = \(hostile)")
                XCTAssertTrue(failure?.reason.contains(key) ?? false)
            }
            for extreme in ["-9223372036854775808", "9223372036854775807"] {
                var transaction = Self.v1Transaction
                transaction[key] = extreme
                let events = try NotificationV1Decoder().decode(body: v1Body([transaction]), receivedAtMs: Self.t, rawPosition: nil).get()
                let failure = events.lazy.compactMap(EventBounds.check).first
                XCTAssertNotNil(failure, "\(key) = \(extreme)")
                XCTAssertTrue(failure.map { $0.kind.hasSuffix("out_of_range") } ?? false, "\(failure?.description ?? "")")
            }
        }
        for key in ReceiptFields.transactionIds {
            for hostile: Any in [["x"], ["a": "b"]] {
                var transaction = Self.v1Transaction
                transaction[key] = hostile
                XCTAssertEqual(try decodeV1Failure(transactions: [transaction])?.kind, "invalid_type", "\(key) = \(hostile)")
            }
        }
        var renewal: [String: Any] = ["original_transaction_id": "1", "grace_period_expires_date_ms": "99999999999999999999999999"]
        XCTAssertEqual(try decodeV1Failure(transactions: [Self.v1Transaction], renewals: [renewal])?.kind, "invalid_number")
        renewal["grace_period_expires_date_ms"] = ""
        XCTAssertNil(try decodeV1Failure(transactions: [Self.v1Transaction], renewals: [renewal]), "empty means absent")
    }

    func testVerifyReceiptNumericFieldsOutsideInt64AreRefused() {
        var transaction = Self.v1Transaction
        transaction["quantity"] = "100000000000000000000000000000"
        let context = ReceiptUploadDecoder.EventContext(digest: "d", userId: "u1", receivedAtMs: Self.t, rawPosition: nil)
        let result = VerifyReceiptResponse.events(JSONFields(["status": 0, "latest_receipt_info": [transaction]]),
                                                  endpoint: .sandbox, context)
        XCTAssertEqual(result.failure?.kind, "invalid_number")
    }

    func testDeepBodiesAreRefusedBeforeParsing() {
        let deep = Array((#"{"a":"# + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)
        let result = AppleInputDecoder().decode(RawInput(source: .appStoreNotification, body: deep, receivedAtMs: Self.t, position: nil))
        XCTAssertEqual(result.failure, .permanent(PermanentFailure("json_too_deep", "body nests objects and arrays deeper than 32 levels")))
    }

    /// No false positives: every V1 notification and verifyReceipt response fixture decodes and passes
    /// the bounds, as Apple's own values must.
    func testEveryV1AndVerifyReceiptFixturePassesTheBounds() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/fixtures")
        func files(_ folder: String) -> [URL] {
            let base = root.appendingPathComponent(folder)
            let all = FileManager.default.enumerator(atPath: base.path)?.compactMap { $0 as? String } ?? []
            return all.filter { $0.hasSuffix(".json") }.sorted().map { base.appendingPathComponent($0) }
        }
        let notifications = files("notifications-v1"), responses = files("verify-receipt")
        guard !notifications.isEmpty else { throw XCTSkip("fixtures not found under \(root.path) (../shared is absent)") }
        for url in notifications {
            let bytes = [UInt8](FileManager.default.contents(atPath: url.path) ?? Data())
            let events = NotificationV1Decoder().decode(body: bytes, receivedAtMs: Self.t, rawPosition: nil)
            XCTAssertNil(events.failure, url.lastPathComponent)
            for event in (try? events.get()) ?? [] { XCTAssertNil(EventBounds.check(event), url.lastPathComponent) }
        }
        var accepted = 0
        for url in responses {
            guard let object = try? JSONSerialization.jsonObject(with: FileManager.default.contents(atPath: url.path) ?? Data()),
                  let fields = JSONFields(object), fields.int64("status") == 0 else { continue }
            let context = ReceiptUploadDecoder.EventContext(digest: "d", userId: "u1", receivedAtMs: Self.t, rawPosition: nil)
            let events = VerifyReceiptResponse.events(fields, endpoint: .sandbox, context)
            XCTAssertNil(events.failure, url.path)
            let failure = ((try? events.get()) ?? []).lazy.compactMap(EventBounds.check).first
            if url.lastPathComponent == "response_legacy2.json" {
                // A hand-typed community fixture: purchase_date_ms "134820000000" (1974) next to a
                // purchase_date of 2013-01-01, one digit short. Exactly what the bounds are for.
                XCTAssertEqual(failure?.kind, "date_out_of_range")
                continue
            }
            XCTAssertNil(failure, url.path)
            accepted += 1
        }
        XCTAssertGreaterThan(accepted, 3)
    }

    // MARK: helpers

    static var v1Transaction: [String: Any] { [
        "transaction_id": "2", "original_transaction_id": "1", "product_id": "vip.a.1m", "quantity": "1",
        "purchase_date_ms": String(t), "original_purchase_date_ms": String(t), "expires_date_ms": String(t + month),
    ] }

    private func v1Body(_ transactions: [[String: Any]], renewals: [[String: Any]] = []) throws -> [UInt8] {
        let body: [String: Any] = ["notification_type": "DID_RENEW", "environment": "PROD", "original_transaction_id": "1",
                                   "unified_receipt": ["latest_receipt_info": transactions, "pending_renewal_info": renewals]]
        return [UInt8](try JSONSerialization.data(withJSONObject: body))
    }

    private func decodeV1Failure(transactions: [[String: Any]], renewals: [[String: Any]] = []) throws -> PermanentFailure? {
        NotificationV1Decoder().decode(body: try v1Body(transactions, renewals: renewals), receivedAtMs: Self.t, rawPosition: nil).failure
    }

    private func jsonObject(_ event: AppleEvent) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: try JSONEncoder().encode(event)) as! [String: Any]
    }

    /// The check's verdict on the full event with the value at `path` replaced.
    private func checkMutated(_ root: [String: Any], _ path: [String], _ value: Any) throws -> PermanentFailure? {
        func replace(_ node: Any, _ rest: ArraySlice<String>) -> Any {
            guard let key = rest.first else { return value }
            if var object = node as? [String: Any] {
                object[key] = replace(object[key]!, rest.dropFirst())
                return object
            }
            var array = node as! [Any]
            array[Int(key)!] = replace(array[Int(key)!], rest.dropFirst())
            return array
        }
        let data = try JSONSerialization.data(withJSONObject: replace(root, path[...]))
        return EventBounds.check(try JSONDecoder().decode(AppleEvent.self, from: data))
    }

    private func assertNoNilFields(_ value: Any, _ type: String, except: Set<String>, file: StaticString = #filePath, line: UInt = #line) {
        for child in Mirror(reflecting: value).children {
            guard let label = child.label, !except.contains(label) else { continue }
            let mirror = Mirror(reflecting: child.value)
            if mirror.displayStyle == .optional, mirror.children.isEmpty {
                XCTFail("\(type).\(label) is nil in the full instance: give it a value here and a bound in EventBounds", file: file, line: line)
            }
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
