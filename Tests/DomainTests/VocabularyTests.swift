@testable import Domain
import XCTest

/// Apple's vocabulary typed per version (R19): every documented type and subtype is known, unknown
/// ones stay raw and are recorded, and V1 and V2 names are not confused.
final class VocabularyTests: XCTestCase {
    func testEveryDocumentedTypeIsTypedByItsVersion() {
        for type in NotificationTypeV1.allCases {
            XCTAssertEqual(NotificationType(raw: type.rawValue, source: .notificationV1), .v1(type))
        }
        for type in NotificationTypeV2.allCases {
            XCTAssertEqual(NotificationType(raw: type.rawValue, source: .notificationV2), .v2(type))
        }
        XCTAssertEqual(NotificationTypeV2.allCases.count, 23, "Apple's NotificationTypeV2 list (APPLE-REFERENCE §1)")
        XCTAssertEqual(NotificationSubtype.allCases.count, 19)
        // A V2 name in a V1 body (or the reverse) is not Apple's V1 vocabulary: kept raw as unknown.
        XCTAssertEqual(NotificationType(raw: "SUBSCRIBED", source: .notificationV1), .unknown("SUBSCRIBED"))
        XCTAssertEqual(NotificationType(raw: "INITIAL_BUY", source: .notificationV2), .unknown("INITIAL_BUY"))
        XCTAssertEqual(NotificationType(raw: "SOMETHING_NEW", source: .notificationV2), .unknown("SOMETHING_NEW"))
        let meta = NotificationMeta(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE")
        XCTAssertEqual(meta.rawNotificationType, "DID_CHANGE_RENEWAL_PREF")
        XCTAssertEqual(meta.typedSubtype, .upgrade)
        XCTAssertNil(NotificationMeta(type: "X", subtype: "NEVER_SEEN").typedSubtype)
        XCTAssertEqual(NotificationMeta(type: "X", subtype: "NEVER_SEEN").rawSubtype, "NEVER_SEEN")
    }

    func testEveryV2TypeIsHandledOrRecorded() {
        let otid = "v"
        let a = Apple.period("A", otid: otid, start: t0)
        for type in NotificationTypeV2.allCases {
            var t = Transcript()
            t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0))
            let step = t.feed(Apple.v2(type.rawValue, uuid: "n-\(type.rawValue)", otid: otid, [a], signed: t0 + day))
            let typed = NotificationType.v2(type)
            if typed.information != nil {
                XCTAssertTrue(step.entries.contains { $0.kind == .record }, "\(type) is recorded as evidence")
            }
            XCTAssertEqual(typed.endsGrace, type == .gracePeriodExpired, "\(type)")
            XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + month)], "\(type) alone changes nothing granted")
        }
        // An unknown type is recorded, never dropped.
        var t = Transcript()
        let step = t.feed(Apple.v2("SOMETHING_NEW", uuid: "new", otid: otid, [], signed: t0))
        XCTAssertEqual(step.entries.kinds, [.record])
        XCTAssertTrue(step.entries[0].reason.contains("unknown to this version"), step.entries[0].reason)
    }

    /// R4: an unknown subtype of a known type is recorded, and so is a known type that names no
    /// purchase and no renewal state at all (a refund whose transaction the body leaves out).
    func testUnknownSubtypesAndNotificationsAboutNothingAreRecorded() {
        let otid = "v"
        let a = Apple.period("A", otid: otid, start: t0)
        var t = Transcript()
        t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "buy", otid: otid, [a], signed: t0))
        let odd = t.feed(Apple.v2("DID_RENEW", subtype: "NEVER_SEEN", uuid: "odd", otid: otid, [a], signed: t0 + day))
        XCTAssertTrue(odd.entries.contains { $0.kind == .record && $0.reason.contains("subtype NEVER_SEEN unknown") }, "\(odd.entries.map(\.reason))")
        let bare = t.feed(Apple.v2("REFUND", uuid: "bare", otid: otid, [], signed: t0 + 2 * day))
        XCTAssertEqual(bare.entries.kinds, [.record])
        XCTAssertTrue(bare.entries[0].reason.contains("names no purchase"), bare.entries[0].reason)
        var v1 = Apple.v1("REFUND", otid: otid, [], autoRenew: nil)
        v1.renewalInfo = nil
        XCTAssertEqual(t.feed(v1).entries.kinds, [.record])
        XCTAssertEqual(t.entitlement(otid), [interval(t0, t0 + month)], "nothing cut")
        // A known subtype bringing nothing new stays silent (dedupe counted its delivery).
        XCTAssertEqual(t.feed(Apple.v2("DID_RENEW", subtype: "BILLING_RECOVERY", uuid: "again", otid: otid, [a], signed: t0 + 3 * day)).entries, [])
    }

    func testTransactionEnumsAreTypedBesideTheRawValue() {
        var t = Apple.period("A", otid: "s", start: t0)
        t.revocationType = "REFUND_PRORATED"
        t.offerDiscountType = "PAY_UP_FRONT"
        XCTAssertEqual(t.typedRevocationType, .refundProrated)
        XCTAssertEqual(t.typedOfferDiscountType, .payUpFront)
        t.revocationType = "SOMETHING_ELSE"
        XCTAssertNil(t.typedRevocationType)
        XCTAssertEqual(t.revocationType, "SOMETHING_ELSE", "the raw value is kept")
    }
}
