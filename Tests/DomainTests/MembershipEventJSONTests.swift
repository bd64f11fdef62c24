@testable import Domain
import Foundation
import XCTest

/// `MembershipEvent.json` writes what `JSONEncoder` with sorted keys writes, byte for byte: the
/// published events did not change when the encoder was replaced.
final class MembershipEventJSONTests: XCTestCase {
    func testGeneratedEventsMatchJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var random = SeededRandom(seed: 40)
        for round in 0..<400 {
            random.optionalShare = round < 20 ? 1 : (round < 40 ? 0 : 0.5)
            let event = try JSONDecoder().decode(MembershipEvent.self, from: try JSONSerialization.data(withJSONObject: Self.object(&random)))
            XCTAssertEqual(String(decoding: event.json, as: UTF8.self), String(decoding: try encoder.encode(event), as: UTF8.self))
            if round < 20 {
                // Every optional set: a field added to the event but not to its writer (or to this test) shows here.
                let keys = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(event.json)) as? [String: Any]).keys
                XCTAssertEqual(Set(keys), Set(Mirror(reflecting: event).children.compactMap(\.label)))
            }
        }
    }

    /// Every character below 0x80 in a string field: the escapes are JSONEncoder's.
    func testEscapesMatchJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var random = SeededRandom(seed: 41)
        var object = Self.object(&random)
        object["reason"] = String((0..<0x80).map { Character(Unicode.Scalar(UInt8($0))) }) + "é/日本🎉\u{2028}"
        let event = try JSONDecoder().decode(MembershipEvent.self, from: try JSONSerialization.data(withJSONObject: object))
        XCTAssertEqual(String(decoding: event.json, as: UTF8.self), String(decoding: try encoder.encode(event), as: UTF8.self))
    }

    /// The writer skips plain words eight bytes at a time: each character that needs an escape (and a few
    /// that do not) at every position of a string longer than a few words, and numbers at their extremes.
    func testEscapesAtEveryPositionAndExtremeNumbersMatchJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var random = SeededRandom(seed: 42)
        var object = Self.object(&random)
        let specials = (0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) } + ["\"", "\\", "/", "\u{7F}", "é", "日", " ", "~"]
        for length in [8, 17, 26] {
            for position in 0..<length {
                for special in specials {
                    var characters = Array(repeating: Character("a"), count: length)
                    characters[position] = special
                    object["reason"] = String(characters)
                    let event = try JSONDecoder().decode(MembershipEvent.self, from: try JSONSerialization.data(withJSONObject: object))
                    XCTAssertEqual(String(decoding: event.json, as: UTF8.self), String(decoding: try encoder.encode(event), as: UTF8.self),
                                   "\(special.debugDescription) at \(position) of \(length)")
                }
            }
        }
        for number in [Int64.min, Int64.min + 1, -1_000_000_007, -1, 0, 9, 10, 1_712_000_000_000, Int64.max] {
            var event = try JSONDecoder().decode(MembershipEvent.self, from: try JSONSerialization.data(withJSONObject: object))
            event.ledgerEntryId = number
            event.recordedAtMs = number
            event.interval = Interval(startMs: number, endMs: number)
            XCTAssertEqual(String(decoding: event.json, as: UTF8.self), String(decoding: try encoder.encode(event), as: UTF8.self), "\(number)")
        }
    }

    /// A membership event as its JSON object, every optional field present or not.
    static func object(_ random: inout SeededRandom) -> [String: Any] {
        func interval(_ random: inout SeededRandom) -> [String: Any] {
            var value: [String: Any] = ["startMs": random.int64()]
            if let end = random.optionalInt64() { value["endMs"] = end }
            return value
        }
        var object: [String: Any] = [
            "schema": MembershipEvent.schemaId, "eventId": random.string(),
            "type": MembershipEventType.allCases[random.int(MembershipEventType.allCases.count)].rawValue,
            "ledgerEntryId": random.int64(), "ledgerKind": random.string(), "subscriptionKey": random.string(),
            "entitlement": ["before": (0..<random.int(3)).map { _ in interval(&random) },
                            "after": (0..<random.int(3)).map { _ in interval(&random) }],
            "correction": random.bool(), "reason": random.string(), "recordedAtMs": random.int64(),
            "cause": ["source": random.string(), "eventId": random.string()].merging(
                ["notificationType", "notificationSubtype", "transactionId"].compactMap { key in random.optionalString().map { (key, $0) } },
                uniquingKeysWith: { $1 }),
        ]
        for key in ["userId", "environment", "group", "productId", "purchaseId", "transactionId", "originalTransactionId", "cutKind"] {
            if let value = random.optionalString() { object[key] = value }
        }
        for key in ["amount", "balanceAfter"] { if let value = random.optionalInt() { object[key] = value } }
        if random.chance() { object["interval"] = interval(&random) }
        if random.chance() {
            var change: [String: Any] = ["mode": random.bool() ? "immediate" : "at_renewal"]
            for key in ["fromProductId", "toProductId"] { if let value = random.optionalString() { change[key] = value } }
            object["productChange"] = change
        }
        if random.chance() {
            var transfer: [String: Any] = [:]
            for key in ["fromUserId", "toUserId"] { if let value = random.optionalString() { transfer[key] = value } }
            object["transfer"] = transfer
        }
        if random.chance() {
            var renewal: [String: Any] = [:]
            for key in ["autoRenewProductId", "expirationIntent"] { if let value = random.optionalString() { renewal[key] = value } }
            for key in ["autoRenewStatus", "isInBillingRetry"] { if let value = random.optionalBool() { renewal[key] = value } }
            if let grace = random.optionalInt64() { renewal["gracePeriodExpiresMs"] = grace }
            object["renewal"] = renewal
        }
        if random.chance() {
            var offer: [String: Any] = ["isTrial": random.bool(), "isIntro": random.bool()]
            for key in ["promotionalOfferId", "offerCodeRefName", "offerDiscountType"] { if let value = random.optionalString() { offer[key] = value } }
            if let type = random.optionalInt() { offer["offerType"] = type }
            object["offer"] = offer
        }
        return object
    }
}
