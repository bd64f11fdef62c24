@testable import Domain
import Foundation
import XCTest

/// An outbox row keeps an event's details and the relay rebuilds the event from them and the ledger
/// row: the rebuilt event must be the event, byte for byte, whatever it holds.
final class MembershipEventDetailsTests: XCTestCase {
    func testGeneratedEventsRebuildFromTheirEntryAndDetails() throws {
        var random = SeededRandom(seed: 61)
        for round in 0..<400 {
            random.optionalShare = round < 20 ? 1 : (round < 40 ? 0 : 0.5)
            var event = try JSONDecoder().decode(MembershipEvent.self,
                                                 from: try JSONSerialization.data(withJSONObject: MembershipEventJSONTests.object(&random)))
            // What the membership worker always writes (`init(_:entryId:recordedAtMs:)`), not random text.
            event.eventId = "ledger-\(event.ledgerEntryId)"
            event.schema = MembershipEvent.schemaId
            let details = try MembershipEventDetails(bytes: MembershipEventDetails(event).bytes)
            let rebuilt = MembershipEvent(type: event.type, entry: event.entry, details: details)
            XCTAssertEqual(rebuilt, event)
            XCTAssertEqual(rebuilt.json, event.json)
        }
    }

    /// Numbers at their extremes, including amounts and balances the ledger's integer columns clamp.
    func testExtremeNumbersSurvive() throws {
        var random = SeededRandom(seed: 62)
        random.optionalShare = 1
        var event = try JSONDecoder().decode(MembershipEvent.self,
                                             from: try JSONSerialization.data(withJSONObject: MembershipEventJSONTests.object(&random)))
        event.schema = MembershipEvent.schemaId
        for number in [Int64.min, -1, 0, 1, Int64(Int32.max) + 1, Int64.max] {
            event.amount = Int(number)
            event.balanceAfter = Int(number)
            event.recordedAtMs = number
            event.ledgerEntryId = number
            event.eventId = "ledger-\(number)"
            event.renewal?.gracePeriodExpiresMs = number
            event.offer?.offerType = Int(number)
            let details = try MembershipEventDetails(bytes: MembershipEventDetails(event).bytes)
            XCTAssertEqual(MembershipEvent(type: event.type, entry: event.entry, details: details), event, "\(number)")
        }
    }

    /// The events a real fold describes (a purchase, its renewal, an upgrade, a refund, a transfer, a
    /// renewal-state change and consumable credits), through the membership writer's path.
    func testFoldedEventsRebuild() throws {
        var book = MembershipBook()
        let day: Int64 = 86_400_000
        let start: Int64 = 1_700_000_000_000
        func grant(_ id: String, _ product: String, level: Int, at: Int64, days: Int64, cut: Cut? = nil,
                   kind: ProductKind = .autoRenewable, credit: Int? = nil) -> PurchaseGrant {
            PurchaseGrant(purchaseId: id, transactionId: "t-\(id)", originalTransactionId: "o-1", productId: product,
                          productKind: kind, group: "vip", startMs: at, endMs: kind == .consumable ? nil : at + days * day, cut: cut,
                          credit: credit, finance: FinanceFlags(isTrial: id == "p1", promotionalOfferId: "promo"), level: level)
        }
        func command(_ id: String, _ action: MembershipCommand.Action, key: String = "s-1") -> MembershipCommand {
            MembershipCommand(commandId: id, subscriptionKey: key, action: action, reason: "because \(id)",
                              cause: Cause(source: .notificationV2, eventId: "e-\(id)", notificationType: "DID_RENEW",
                                           notificationSubtype: "BILLING_RECOVERY", transactionId: "t-\(id)"))
        }
        let commands = [
            command("c1", .purchase(grant("p1", "vip.month", level: 2, at: start, days: 30))),
            command("c2", .linkUser(UserLink(userId: "u-1", via: UserLink.appAccountToken, claimedAtMs: start))),
            command("c3", .purchase(grant("p2", "vip.month", level: 2, at: start + 30 * day, days: 30))),
            command("c4", .purchase(grant("p3", "vip.year", level: 1, at: start + 40 * day, days: 365))),
            command("c5", .purchase(grant("p3", "vip.year", level: 1, at: start + 40 * day, days: 365,
                                          cut: Cut(atMs: start + 50 * day, kind: .refund, appleReason: "1")))),
            // The first renewal statement is no change; the second is.
            command("c5b", .renewal(RenewalState(autoRenewStatus: true, productId: "vip.year", autoRenewProductId: "vip.year",
                                                 isInBillingRetry: false, gracePeriodExpiresMs: nil, asOfMs: start + 45 * day))),
            command("c6", .renewal(RenewalState(autoRenewStatus: false, productId: "vip.year", autoRenewProductId: "vip.month",
                                                isInBillingRetry: true, gracePeriodExpiresMs: start + 60 * day, asOfMs: start + 55 * day,
                                                expirationIntent: "1"))),
            command("c7", .linkUser(UserLink(userId: "u-2", via: UserLink.receiptUpload, claimedAtMs: start + 70 * day))),
            command("c8", .purchase(grant("k1", "coins", level: 0, at: start, days: 0, kind: .consumable, credit: 3_000_000_000)),
                    key: "s-2"),
            command("c9", .purchase(grant("k1", "coins", level: 0, at: start, days: 0, cut: Cut(atMs: start + day, kind: .refund),
                                          kind: .consumable, credit: 3_000_000_000)), key: "s-2"),
        ]
        var events: [MembershipEvent] = []
        for command in commands {
            for (index, described) in book.applyDescribing(command).enumerated() {
                guard let event = MembershipEvent(described, entryId: Int64(events.count * 10 + index), recordedAtMs: start) else { continue }
                events.append(event)
            }
        }
        XCTAssertGreaterThanOrEqual(Set(events.map(\.type)).count, 5, "the fold made events of several types: \(events.map(\.type))")
        XCTAssertTrue(events.contains { $0.renewal != nil }, "a renewal-state change: \(events.map(\.type))")
        XCTAssertTrue(events.contains { $0.transfer != nil }, "a transfer: \(events.map(\.type))")
        XCTAssertTrue(events.contains { $0.offer != nil }, "a grant with its offer")
        XCTAssertTrue(events.contains { $0.productChange != nil }, "an upgrade: \(events.map(\.type))")
        XCTAssertTrue(events.contains { ($0.amount ?? 0) > Int(Int32.max) }, "a credit beyond the ledger's integer column: \(events.map(\.amount))")
        for event in events {
            let details = try MembershipEventDetails(bytes: MembershipEventDetails(event).bytes)
            XCTAssertEqual(MembershipEvent(type: event.type, entry: event.entry, details: details).json, event.json)
        }
    }

    func testDamagedDetailsAreRefused() throws {
        var random = SeededRandom(seed: 63)
        random.optionalShare = 1
        let event = try JSONDecoder().decode(MembershipEvent.self,
                                             from: try JSONSerialization.data(withJSONObject: MembershipEventJSONTests.object(&random)))
        let bytes = MembershipEventDetails(event).bytes
        XCTAssertThrowsError(try MembershipEventDetails(bytes: []))
        XCTAssertThrowsError(try MembershipEventDetails(bytes: [2] + bytes.dropFirst()), "another version")
        XCTAssertThrowsError(try MembershipEventDetails(bytes: bytes + [0]), "bytes after the details")
        for length in 0..<bytes.count {
            XCTAssertThrowsError(try MembershipEventDetails(bytes: Array(bytes.prefix(length))), "cut at \(length)")
        }
    }

    /// The ledger's interval lists as jsonb prints them and as our writer does, and nothing else.
    func testStoredIntervalLists() {
        let closed = Interval(startMs: 1_709_256_060_000, endMs: 1_711_848_060_000)
        let open = Interval(startMs: -5, endMs: nil)
        XCTAssertEqual(Interval.storedList("[]"), [])
        XCTAssertEqual(Interval.storedList(#"[{"endMs": 1711848060000, "startMs": 1709256060000}, {"startMs": -5}]"#), [closed, open])
        XCTAssertEqual(Interval.storedList(String(decoding: intervalsJSON([closed, open]), as: UTF8.self)), [closed, open])
        XCTAssertNil(Interval.storedList(#"[{"endMs": 1}]"#), "no start")
        XCTAssertNil(Interval.storedList(#"{"startMs": 1}"#), "not a list")
        XCTAssertNil(Interval.storedList("[] x"))
    }
}

extension MembershipEvent {
    /// The ledger row's part of this event, as the relay reads it from the row.
    var entry: MembershipEventEntry {
        MembershipEventEntry(entryId: ledgerEntryId, ledgerKind: ledgerKind, userId: userId, subscriptionKey: subscriptionKey,
                             environment: environment, group: group, productId: productId, purchaseId: purchaseId,
                             interval: interval, cutKind: cutKind, before: entitlement.before, after: entitlement.after,
                             reason: reason, cause: cause)
    }
}
