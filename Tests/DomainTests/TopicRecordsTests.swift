@testable import Domain
import Foundation
import TestSupport
import XCTest

/// The binary encoding of the stages' topic records: every field and enum case round-trips, the
/// legacy JSON records still decode, and corrupt bytes are errors, never traps.
final class TopicRecordsTests: XCTestCase {
    // MARK: round trips

    func testGeneratedEventsRoundTrip() throws {
        var random = SeededRandom(seed: 14)
        for _ in 0..<500 {
            let event = random.event()
            let bytes = TopicRecords.encode(event)
            XCTAssertEqual(TopicRecords.kind(of: bytes), .appleEvent)
            XCTAssertEqual(try TopicRecords.decodeAppleEvent(bytes), event)
        }
    }

    func testGeneratedUniqueEventsRoundTrip() throws {
        var random = SeededRandom(seed: 15)
        for _ in 0..<300 {
            let unique = random.unique()
            XCTAssertEqual(try TopicRecords.decodeUniqueEvent(TopicRecords.encode(unique)), unique)
        }
    }

    func testGeneratedCommandsRoundTripEveryAction() throws {
        var random = SeededRandom(seed: 16)
        var tags = Set<ActionTag>()
        for _ in 0..<600 {
            let command = random.command()
            tags.insert(ActionTag(command.action))
            XCTAssertEqual(try TopicRecords.decodeCommand(TopicRecords.encode(command)), command)
        }
        XCTAssertEqual(tags.count, 6, "every action case generated")
    }

    /// A value with every optional set and one with every optional nil: no field is left out of the
    /// encoding (a forgotten field would come back nil or as its default).
    func testEveryFieldSurvives() throws {
        var random = SeededRandom(seed: 17)
        random.optionalShare = 1
        let full = random.unique()
        XCTAssertNotNil(full.event.notification?.consumptionRequestReason)
        XCTAssertNotNil(full.event.transactions.first?.commitmentInfo?.commitmentPrice)
        XCTAssertEqual(try TopicRecords.decodeUniqueEvent(TopicRecords.encode(full)), full)
        for _ in 0..<20 {
            let command = random.command()
            XCTAssertEqual(try TopicRecords.decodeCommand(TopicRecords.encode(command)), command)
        }
        random.optionalShare = 0
        let bare = random.unique()
        XCTAssertNil(bare.event.notification)
        XCTAssertEqual(try TopicRecords.decodeUniqueEvent(TopicRecords.encode(bare)), bare)
    }

    func testEveryEnumCaseRoundTrips() throws {
        var random = SeededRandom(seed: 18)
        for source in EventSource.allCases {
            var event = random.event()
            event.source = source
            XCTAssertEqual(try TopicRecords.decodeAppleEvent(TopicRecords.encode(event)).source, source)
        }
        for kind in PurchaseChange.Kind.allCases {
            var unique = random.unique()
            unique.purchases = [PurchaseChange(purchaseId: "p", kind: kind, transaction: random.transaction(), aliases: ["a"])]
            XCTAssertEqual(try TopicRecords.decodeUniqueEvent(TopicRecords.encode(unique)).purchases.first?.kind, kind)
        }
        for productKind in ProductKind.allCases {
            for cutKind in Cut.Kind.allCases {
                var grant = random.grant()
                grant.productKind = productKind
                grant.cut = Cut(atMs: 1, kind: cutKind)
                let command = MembershipCommand(commandId: "c", subscriptionKey: "s", action: .purchase(grant), reason: "r",
                                                cause: Cause(source: .serverAPI, eventId: "e"))
                XCTAssertEqual(try TopicRecords.decodeCommand(TopicRecords.encode(command)), command)
            }
        }
        for transfer in AccountPolicy.TransferPolicy.allCases {
            let command = MembershipCommand(commandId: "c", subscriptionKey: "s",
                                            action: .linkUser(UserLink(userId: "u", via: UserLink.appAccountToken, transfer: transfer)),
                                            reason: "r", cause: Cause(source: .appReceipt, eventId: "e"))
            XCTAssertEqual(try TopicRecords.decodeCommand(TopicRecords.encode(command)), command)
        }
    }

    func testExtremeNumbersRoundTrip() throws {
        for value in [Int64.min, Int64.min + 1, -1, 0, 1, 127, 128, Int64.max - 1, Int64.max] {
            var transaction = TransactionFacts(transactionId: "t", originalTransactionId: "o", productId: "p", purchaseDateMs: value,
                                               quantity: Int(value))
            transaction.price = value
            let event = AppleEvent(eventId: "e", source: .notificationV2, environment: "Sandbox", bundleId: nil,
                                   subscriptionKey: "o", transactions: [transaction], receivedAtMs: value,
                                   rawPosition: RecordPosition(topic: "t", partition: value < 0 ? Int32.min : Int32.max, offset: value))
            XCTAssertEqual(try TopicRecords.decodeAppleEvent(TopicRecords.encode(event)), event)
        }
    }

    /// Dedupe copies a binary decoded record's body into its output; a legacy JSON one is re-encoded.
    func testUniqueEventFromEitherDecodedRecord() throws {
        var random = SeededRandom(seed: 19)
        for _ in 0..<50 {
            let unique = random.unique()
            let expected = TopicRecords.encode(unique)
            let binary = TopicRecords.encode(unique.event)
            let json = [UInt8](try JSONEncoder().encode(unique.event))
            for decoded in [binary, json] {
                XCTAssertEqual(TopicRecords.encodeUnique(event: unique.event, decodedRecord: decoded, purchases: unique.purchases,
                                                         position: unique.decodedPosition), expected)
            }
        }
    }

    // MARK: legacy JSON

    func testLegacyJSONRecordsStillDecode() throws {
        var random = SeededRandom(seed: 20)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for _ in 0..<100 {
            let event = random.event(), unique = random.unique(), command = random.command()
            XCTAssertEqual(try TopicRecords.decodeAppleEvent([UInt8](try encoder.encode(event))), event)
            XCTAssertEqual(try TopicRecords.decodeUniqueEvent([UInt8](try encoder.encode(unique))), unique)
            XCTAssertEqual(try TopicRecords.decodeCommand([UInt8](try encoder.encode(command))), command)
        }
    }

    /// Records as the JSON-era stages wrote them, byte for byte (dedupe's spliced unique event).
    func testLegacyRecordTextDecodes() throws {
        let event = #"{"environment":"Sandbox","eventId":"v2:u1","notification":{"type":"SUBSCRIBED","uuid":"u1"},"receivedAtMs":5,"schema":1,"source":"notification-v2","subscriptionKey":"o1","transactions":[{"originalTransactionId":"o1","productId":"p","purchaseDateMs":1000,"quantity":1,"transactionId":"t1"}]}"#
        let unique = #"{"decodedPosition":{"offset":7,"partition":3,"topic":"storeledger.transactions.decoded"},"event":"# + event
            + #","purchases":[{"aliases":["t1"],"kind":"new","purchaseId":"o1|p","transaction":{"originalTransactionId":"o1","productId":"p","purchaseDateMs":1000,"quantity":1,"transactionId":"t1"}}]}"#
        let command = #"{"action":{"linkUser":{"_0":{"userId":"u","via":"receipt-upload"}}},"cause":{"eventId":"e","source":"app-receipt"},"commandId":"c","reason":"r","subscriptionKey":"o1"}"#
        let decoded = try TopicRecords.decodeAppleEvent(Array(event.utf8))
        XCTAssertEqual(decoded.notification?.type, "SUBSCRIBED")
        XCTAssertEqual(decoded.transactions.first?.purchaseDateMs, 1000)
        let decodedUnique = try TopicRecords.decodeUniqueEvent(Array(unique.utf8))
        XCTAssertEqual(decodedUnique.event, decoded)
        XCTAssertEqual(decodedUnique.decodedPosition, RecordPosition(topic: "storeledger.transactions.decoded", partition: 3, offset: 7))
        XCTAssertEqual(decodedUnique.purchases.first?.aliases, ["t1"])
        XCTAssertEqual(try TopicRecords.decodeCommand(Array(command.utf8)).action,
                       .linkUser(UserLink(userId: "u", via: "receipt-upload", transfer: .move)))
        XCTAssertEqual(TopicRecords.json(Array(event.utf8)), Array(event.utf8), "JSON is shown as it is")
    }

    func testInspectionJSONDecodesToTheSameValue() throws {
        var random = SeededRandom(seed: 21)
        let command = random.command(), unique = random.unique()
        let commandJSON = try XCTUnwrap(TopicRecords.json(TopicRecords.encode(command)))
        XCTAssertEqual(try JSONDecoder().decode(MembershipCommand.self, from: Data(commandJSON)), command)
        let uniqueJSON = try XCTUnwrap(TopicRecords.json(TopicRecords.encode(unique), prettyPrinted: true))
        XCTAssertEqual(try JSONDecoder().decode(UniqueEvent.self, from: Data(uniqueJSON)), unique)
        XCTAssertNil(TopicRecords.json([TopicRecords.marker, TopicRecords.version, 9]), "an unknown kind does not decode")
    }

    // MARK: corrupt input

    func testEveryTruncationIsAnError() throws {
        var random = SeededRandom(seed: 22)
        random.optionalShare = 1
        let records = [TopicRecords.encode(random.unique()), TopicRecords.encode(random.command()), TopicRecords.encode(random.event())]
        for record in records {
            for length in 1..<record.count {
                XCTAssertThrowsError(try decodeAny(Array(record.prefix(length))), "\(length) of \(record.count) bytes")
            }
        }
    }

    /// Any byte changed to any of a few values: an error or some value, never a trap.
    func testFlippedBytesNeverTrap() {
        var random = SeededRandom(seed: 23)
        random.optionalShare = 0.7
        let records = [TopicRecords.encode(random.unique()), TopicRecords.encode(random.command())]
        for record in records {
            for index in record.indices {
                for value: UInt8 in [0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, record[index] ^ 0x40] {
                    var corrupt = record
                    corrupt[index] = value
                    _ = try? decodeAny(corrupt)
                }
            }
        }
    }

    func testRandomBytesAfterAHeaderNeverTrap() {
        var random = SeededRandom(seed: 24)
        for _ in 0..<3_000 {
            let kind = TopicRecords.Kind.allCases[random.int(3)]
            var bytes = [TopicRecords.marker, TopicRecords.version, kind.rawValue]
            for _ in 0..<random.int(200) { bytes.append(UInt8(truncatingIfNeeded: random.next())) }
            _ = try? decodeAny(bytes)
        }
    }

    func testHostileLengthsAndCountsAreErrors() {
        let header = [TopicRecords.marker, TopicRecords.version, TopicRecords.Kind.appleEvent.rawValue]
        // schema 1, then an eventId claiming 2^62 bytes.
        expectError(header + [2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40], contains: "exceeds the record")
        // A varint of eleven bytes.
        expectError(header + [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], contains: "longer than 64 bits")
        // A unique event claiming a million purchases.
        let unique = [TopicRecords.marker, TopicRecords.version, TopicRecords.Kind.uniqueEvent.rawValue]
        expectError(unique + [0, 0xC0, 0x84, 0x3D], contains: "exceeds the record")
    }

    func testWrongHeadersAndTrailingBytesAreErrors() throws {
        var random = SeededRandom(seed: 25)
        let event = TopicRecords.encode(random.event())
        expectError(event + [0], contains: "trailing")
        var otherVersion = event
        otherVersion[1] = 2
        expectError(otherVersion, contains: "version")
        XCTAssertThrowsError(try TopicRecords.decodeCommand(event)) { XCTAssertTrue("\($0)".contains("expected 3")) }
        XCTAssertThrowsError(try TopicRecords.decodeAppleEvent([TopicRecords.marker]))
        XCTAssertThrowsError(try TopicRecords.decodeAppleEvent([]), "empty is neither binary nor JSON")
    }

    /// Strings are read with an ASCII fast path: invalid UTF-8 is refused wherever it sits in a long
    /// string, and non-ASCII text reads back as written.
    func testLongStringsAreCheckedAsUTF8AtEveryPosition() throws {
        let id = "c-0123456789abcdefghij"
        let command = MembershipCommand(commandId: id, subscriptionKey: "s", action: .record("x"), reason: "r",
                                        cause: Cause(source: .appReceipt, eventId: "e"))
        let encoded = TopicRecords.encode(command)
        let start = try XCTUnwrap(encoded.firstIndex(of: UInt8(ascii: "c")))
        for offset in 0..<id.utf8.count {
            var bytes = encoded
            bytes[start + offset] = 0xC3   // a lead byte without its continuation
            expectError(bytes, contains: "UTF-8")
        }
        let text = "ré-abonné 名前 \u{1F600} long enough for words"
        let unicode = MembershipCommand(commandId: text, subscriptionKey: "s", action: .record("x"), reason: text,
                                        cause: Cause(source: .appReceipt, eventId: "e"))
        let decoded = try TopicRecords.decodeCommand(TopicRecords.encode(unicode))
        XCTAssertEqual(decoded.commandId, text)
        XCTAssertEqual(decoded.reason, text)
    }

    func testInvalidUTF8AndUnknownEnumsAreErrors() throws {
        let command = MembershipCommand(commandId: "cc", subscriptionKey: "s", action: .record("x"), reason: "r",
                                        cause: Cause(source: .appReceipt, eventId: "e"))
        var bytes = TopicRecords.encode(command)
        bytes[4] = 0xFF   // the commandId's first byte
        expectError(bytes, contains: "UTF-8")
        var unknownAction = TopicRecords.encode(command)
        unknownAction[3 + 3 + 2] = 42   // after "cc" and "s"
        expectError(unknownAction, contains: "unknown command action 42")
        let link = MembershipCommand(commandId: "c", subscriptionKey: "s", action: .linkUser(UserLink(userId: "u", via: "v")),
                                     reason: "r", cause: Cause(source: .appReceipt, eventId: "e"))
        let encoded = TopicRecords.encode(link)
        let transfer = Array("move".utf8)
        let at = try XCTUnwrap(encoded.firstRange(of: transfer)).lowerBound
        var unknownTransfer = encoded
        unknownTransfer[at] = UInt8(ascii: "n")
        expectError(unknownTransfer, contains: "unknown TransferPolicy")
    }

    private func decodeAny(_ bytes: [UInt8]) throws -> Any {
        switch TopicRecords.kind(of: bytes) {
        case .command: return try TopicRecords.decodeCommand(bytes)
        case .uniqueEvent: return try TopicRecords.decodeUniqueEvent(bytes)
        default: return try TopicRecords.decodeAppleEvent(bytes)
        }
    }

    private func expectError(_ bytes: [UInt8], contains text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try decodeAny(bytes), file: file, line: line) { error in
            XCTAssertTrue("\(error)".contains(text), "\(error)", file: file, line: line)
        }
    }
}

/// Generated values that are the same on every run (SplitMix64).
struct SeededRandom {
    private var source: SplitMix64
    /// How often an optional field is set.
    var optionalShare = 0.5

    init(seed: UInt64) { source = SplitMix64(seed: seed) }

    mutating func next() -> UInt64 { source.next() }

    mutating func int(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    mutating func bool() -> Bool { next() & 1 == 1 }
    mutating func chance() -> Bool { Double(next() % 1_000_000) / 1_000_000 < optionalShare }
    mutating func maybe<T>(_ make: (inout SeededRandom) -> T) -> T? { chance() ? make(&self) : nil }

    mutating func int64() -> Int64 {
        switch int(5) {
        case 0: return [Int64.min, Int64.max, 0, -1][int(4)]
        case 1: return Int64(int(300)) - 150
        default: return Int64(bitPattern: next())
        }
    }

    mutating func string() -> String {
        let pieces = ["a", "Z", "0", "é", "日本", "🎉", " ", "\"", "\\", "\n", "\u{0}", "x.y", "sub_", "-"]
        return (0..<int(12)).map { _ in pieces[int(pieces.count)] }.joined()
    }

    mutating func optionalString() -> String? { maybe { $0.string() } }
    mutating func optionalInt64() -> Int64? { maybe { $0.int64() } }
    mutating func optionalInt() -> Int? { maybe { Int($0.int64()) } }
    mutating func optionalBool() -> Bool? { maybe { $0.bool() } }
    mutating func position() -> RecordPosition {
        RecordPosition(topic: string(), partition: Int32(truncatingIfNeeded: int64()), offset: int64())
    }

    mutating func commitment() -> CommitmentInfo {
        CommitmentInfo(billingPeriodNumber: optionalInt(), totalBillingPeriods: optionalInt(),
                       commitmentExpiresDateMs: optionalInt64(), commitmentPrice: optionalInt64())
    }

    mutating func transaction() -> TransactionFacts {
        TransactionFacts(
            transactionId: string(), originalTransactionId: string(), webOrderLineItemId: optionalString(), productId: string(),
            bundleId: optionalString(), purchaseDateMs: int64(), originalPurchaseDateMs: optionalInt64(),
            expiresDateMs: optionalInt64(), cancellationDateMs: optionalInt64(), cancellationReason: optionalString(),
            isUpgraded: optionalBool(), isTrialPeriod: optionalBool(), isInIntroOfferPeriod: optionalBool(),
            promotionalOfferId: optionalString(), offerCodeRefName: optionalString(), offerType: optionalInt(),
            offerIdentifier: optionalString(), offerDiscountType: optionalString(), quantity: Int(int64()),
            productType: optionalString(), inAppOwnershipType: optionalString(), subscriptionGroupIdentifier: optionalString(),
            appAccountToken: optionalString(), storefront: optionalString(), transactionReason: optionalString(),
            price: optionalInt64(), currency: optionalString(), revocationType: optionalString(), revocationPercentage: optionalInt(),
            offerPeriod: optionalString(), storefrontId: optionalString(), appTransactionId: optionalString(),
            billingPlanType: optionalString(), commitmentInfo: maybe { $0.commitment() })
    }

    mutating func event() -> AppleEvent {
        let notification = maybe { random in
            NotificationMeta(
                type: random.string(), subtype: random.optionalString(), uuid: random.optionalString(),
                signedDateMs: random.optionalInt64(), autoRenewStatus: random.optionalBool(),
                autoRenewProductId: random.optionalString(), autoRenewStatusChangeDateMs: random.optionalInt64(),
                status: random.optionalInt(), originalTransactionId: random.optionalString(),
                webOrderLineItemId: random.optionalString(), cancellationDateMs: random.optionalInt64(),
                cancellationReason: random.optionalString(), expirationIntent: random.optionalString(),
                aboutAnotherSubscription: random.optionalBool(), consumptionRequestReason: random.optionalString())
        }
        let renewal = maybe { random in
            RenewalFacts(
                originalTransactionId: random.string(), productId: random.optionalString(), autoRenewProductId: random.optionalString(),
                autoRenewStatus: random.optionalBool(), expirationIntent: random.optionalString(),
                isInBillingRetryPeriod: random.optionalBool(), gracePeriodExpiresDateMs: random.optionalInt64(),
                priceIncreaseStatus: random.optionalString(), appAccountToken: random.optionalString(),
                renewalDateMs: random.optionalInt64(), renewalPrice: random.optionalInt64(), currency: random.optionalString(),
                offerType: random.optionalInt(), offerIdentifier: random.optionalString())
        }
        let count = optionalShare == 1 ? 1 + int(3) : int(4)
        var event = AppleEvent(
            eventId: string(), source: EventSource.allCases[int(EventSource.allCases.count)], environment: string(),
            bundleId: optionalString(), subscriptionKey: string(), notification: notification,
            transactions: (0..<count).map { _ in transaction() }, renewalInfo: renewal, appUserId: optionalString(),
            receivedAtMs: int64(), rawPosition: maybe { $0.position() }, statedAtMs: optionalInt64(), provenance: optionalString())
        event.schema = int(3)
        return event
    }

    mutating func unique() -> UniqueEvent {
        let purchases = (0..<int(3)).map { _ in
            PurchaseChange(purchaseId: string(), kind: bool() ? .new : .changed, transaction: transaction(),
                           aliases: (0..<int(4)).map { _ in string() })
        }
        return UniqueEvent(event: event(), purchases: purchases, decodedPosition: maybe { $0.position() })
    }

    mutating func grant() -> PurchaseGrant {
        PurchaseGrant(
            purchaseId: string(), transactionId: string(), originalTransactionId: string(), productId: string(),
            productKind: ProductKind.allCases[int(ProductKind.allCases.count)], group: string(), startMs: int64(),
            endMs: optionalInt64(),
            cut: maybe { random in
                Cut(atMs: random.int64(), kind: Cut.Kind.allCases[random.int(Cut.Kind.allCases.count)],
                    appleReason: random.optionalString(), refundedShare: random.optionalInt())
            },
            credit: optionalInt(),
            finance: FinanceFlags(isTrial: bool(), isIntro: bool(), promotionalOfferId: optionalString(),
                                  offerCodeRefName: optionalString(), offerType: optionalInt(), offerIdentifier: optionalString(),
                                  offerDiscountType: optionalString(), offerPeriod: optionalString(),
                                  billingPlanType: optionalString(), commitment: maybe { $0.commitment() }),
            level: optionalInt(), durationDays: optionalInt(), inCatalog: optionalBool(), environment: optionalString())
    }

    mutating func command() -> MembershipCommand {
        let action: MembershipCommand.Action
        switch ActionTag(rawValue: UInt8(1 + int(6)))! {
        case .purchase: action = .purchase(grant())
        case .renewal:
            action = .renewal(RenewalState(
                autoRenewStatus: optionalBool(), productId: optionalString(), autoRenewProductId: optionalString(),
                isInBillingRetry: optionalBool(), gracePeriodExpiresMs: optionalInt64(), asOfMs: int64(),
                pendingChange: optionalString(), expirationIntent: optionalString(), priceIncreaseStatus: optionalString(),
                asOfRank: optionalInt(), sourceEventId: optionalString()))
        case .linkUser:
            action = .linkUser(UserLink(userId: string(), via: string(),
                                        transfer: AccountPolicy.TransferPolicy.allCases[int(AccountPolicy.TransferPolicy.allCases.count)],
                                        claimedAtMs: optionalInt64()))
        case .record: action = .record(string())
        case .gracePeriod:
            action = .gracePeriod(GracePeriodGrant(productId: optionalString(), group: optionalString(), fromMs: optionalInt64(),
                                                   untilMs: int64()))
        case .endGrace: action = .endGrace(GraceEnd(productId: optionalString(), group: optionalString(), atMs: int64()))
        }
        return MembershipCommand(
            commandId: string(), subscriptionKey: string(), action: action, reason: string(),
            cause: Cause(source: EventSource.allCases[int(EventSource.allCases.count)], eventId: string(),
                         notificationType: optionalString(), notificationSubtype: optionalString(),
                         notificationUUID: optionalString(), transactionId: optionalString(), purchaseId: optionalString(),
                         rawPosition: maybe { $0.position() }, decodedPosition: maybe { $0.position() },
                         environment: optionalString(), provenance: optionalString()))
    }
}
