@testable import Domain
import Foundation
import TestSupport
import XCTest

/// Issue 17: what each ledger entry means to downstream services. The journeys of the scenarios
/// (S3–S9, R13, R14, R17) fed through dedupe, classify and membership; every membership-changing
/// entry gets exactly one event type, evidence records none, and every event fits the schema file.
final class MembershipEventTests: XCTestCase {
    /// Transcript with each entry described (meaning, purchase facts) as the membership stage does.
    struct EventTranscript {
        var t = Transcript()
        var described: [DescribedEntry] = []

        @discardableResult
        mutating func feed(_ event: AppleEvent) -> [DescribedEntry] {
            let key = "\(event.subscriptionKey)|\(seenKey(of: event))"
            guard t.seen.insert(key).inserted else { return [] }
            let outcome = dedupe(event: event, known: t.known[event.subscriptionKey] ?? [])
            t.known[event.subscriptionKey] = outcome.updated
            let unique = UniqueEvent(event: event, purchases: outcome.changes)
            var step: [DescribedEntry] = []
            for command in classify(unique, catalog: t.catalog) { step += t.book.applyDescribing(command) }
            described += step
            return step
        }

        mutating func types(_ event: AppleEvent) -> [MembershipEventType?] { feed(event).map { $0.meaning?.type } }
    }

    let switchAt = t0 + day

    func testFirstPurchaseRenewalAndCancellation() {
        var e = EventTranscript()
        XCTAssertEqual(e.types(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)])), [.initialPurchase])
        XCTAssertEqual(e.types(Apple.v1("DID_RENEW", otid: "s", [Apple.period("A", otid: "s", start: t0),
                                                                 Apple.period("A2", otid: "s", start: t0 + month)])), [.renewal])
        XCTAssertEqual(e.types(Apple.v1("DID_CHANGE_RENEWAL_STATUS", otid: "s", [Apple.period("A2", otid: "s", start: t0 + month)],
                                        autoRenew: false, statusChange: t0 + month + day)), [.cancellation])
        XCTAssertEqual(e.types(Apple.v1("DID_CHANGE_RENEWAL_STATUS", otid: "s", [Apple.period("A2", otid: "s", start: t0 + month)],
                                        autoRenew: true, statusChange: t0 + month + 2 * day)), [.uncancellation])
    }

    func testS3CrossgradeIsAnImmediateProductChangeOnBothEntries() {
        var e = EventTranscript()
        e.feed(Apple.v1("INITIAL_BUY", otid: "s3", [Apple.period("A", otid: "s3", start: t0)]))
        var a = Apple.period("A", otid: "s3", start: t0)
        a.cancellationDateMs = switchAt
        a.isUpgraded = true
        let b = Apple.period("B", otid: "s3", product: "vip.b.1m", start: switchAt)
        let step = e.feed(Apple.v1("CANCEL", otid: "s3", [a, b], autoRenew: true, autoRenewProduct: "vip.b.1m"))
        XCTAssertEqual(step.map(\.entry.kind), [.cut, .grant, .renewal])
        for described in step.prefix(2) {
            XCTAssertEqual(described.meaning?.type, .productChange)
            XCTAssertEqual(described.meaning?.productChange, .immediate)
            XCTAssertEqual(described.meaning?.fromProductId, "vip.a.1m")
        }
        // The new purchase's own command comes second: only its entry knows where the change went.
        XCTAssertEqual(step[1].meaning?.toProductId, "vip.b.1m")
        XCTAssertNotNil(step[2].meaning, "the renewal-state change is an event too")
    }

    func testS7CrossgradeToAnotherDurationIsAProductChangeAtRenewal() {
        var e = EventTranscript()
        e.feed(Apple.v1("INITIAL_BUY", otid: "s7", [Apple.period("A1", otid: "s7", start: t0)]))
        let pref = e.feed(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "s7", [Apple.period("A1", otid: "s7", start: t0)],
                                   autoRenewProduct: "vip.a.3m", statusChange: t0 + 5 * day))
        XCTAssertEqual(pref.map { $0.meaning?.type }, [.productChange])
        XCTAssertEqual(pref.first?.meaning?.productChange, .atRenewal)
        XCTAssertEqual(pref.first?.meaning?.toProductId, "vip.a.3m")
        let renew = e.feed(Apple.v1("DID_RENEW", otid: "s7", [Apple.period("A1", otid: "s7", start: t0),
                                                              Apple.period("A3", otid: "s7", product: "vip.a.3m",
                                                                           start: t0 + month, length: 90 * day)],
                                    autoRenewProduct: "vip.a.3m"))
        XCTAssertEqual(renew.first?.meaning?.type, .productChange)
        XCTAssertEqual(renew.first?.meaning?.productChange, .atRenewal, "the new product starts when the old period ends")
    }

    func testRefundAndItsReversal() {
        var e = EventTranscript()
        var refunded = Apple.period("1", otid: "s", start: t0)
        refunded.cancellationDateMs = t0 + 10 * day
        e.feed(Apple.v2("SUBSCRIBED", uuid: "buy", otid: "s", [Apple.period("1", otid: "s", start: t0)], signed: t0))
        XCTAssertEqual(e.types(Apple.v2("REFUND", uuid: "r", otid: "s", [refunded], signed: t0 + 10 * day)), [.refund])
        XCTAssertEqual(e.types(Apple.v2("REFUND_REVERSED", uuid: "rr", otid: "s", [Apple.period("1", otid: "s", start: t0)],
                                        signed: t0 + 12 * day)), [.refundReversed])
    }

    func testConsumablesLifetimeAndNonRenewing() {
        var e = EventTranscript()
        let coins = Apple.tx("C1", otid: "C1", product: "coins.100", purchase: t0, quantity: 2)
        XCTAssertEqual(e.types(Apple.receipt(user: "u1", otid: "C1", [coins], id: "c1")), [nil, .consumableCredit],
                       "linking a subscription that grants nothing yet changes nothing")
        var refundedCoins = coins
        refundedCoins.cancellationDateMs = t0 + day
        XCTAssertEqual(e.types(Apple.v1("REFUND", otid: "C1", [refundedCoins], autoRenew: nil)), [.consumableDebit])
        XCTAssertEqual(e.types(Apple.receipt(user: nil, otid: "L", [Apple.tx("L", otid: "L", product: "lifetime", purchase: t0)], id: "l")),
                       [.nonRenewingPurchase])
        XCTAssertEqual(e.types(Apple.receipt(user: nil, otid: "N", [Apple.tx("N", otid: "N", product: "pass.7d", purchase: t0)], id: "n")),
                       [.nonRenewingPurchase])
    }

    func testEvidenceRecordsAreNoEvents() {
        var e = EventTranscript()
        e.feed(Apple.v1("INITIAL_BUY", otid: "s6", [Apple.period("A", otid: "s6", start: t0)]))
        var late = Apple.period("A", otid: "s6", start: t0)
        late.cancellationDateMs = t0 + 2 * month
        let step = e.feed(Apple.v1("CANCEL", otid: "s6", [late], autoRenew: nil))
        XCTAssertEqual(step.map(\.entry.kind), [.record])
        XCTAssertNil(step[0].meaning, "R11: nothing deducted, nothing to tell")
    }

    func testTransferMovesTheEntitlementBetweenUsers() {
        var e = EventTranscript()
        let period = Apple.period("A", otid: "s19", start: t0)
        e.feed(Apple.receipt(user: "alice", otid: "s19", [period], id: "a"))
        var restore = Apple.receipt(user: "bob", otid: "s19", [period], id: "b")
        restore.receivedAtMs = t0 + day
        restore.statedAtMs = t0 + day
        let moved = e.feed(restore).filter { $0.meaning?.type == .transfer }
        XCTAssertEqual(moved.map(\.entry.kind), [.unlink, .link])
        XCTAssertEqual(moved.map { $0.meaning?.fromUserId }, ["alice", "alice"])
        XCTAssertEqual(moved.map { $0.meaning?.toUserId }, ["bob", "bob"])
    }

    /// Every entry of every scenario: changing entries have exactly one type, and every event the
    /// writer would publish validates against schemas/membership-event.v1.json.
    func testEveryScenarioEventFitsTheSchemaFile() throws {
        let schema = try JSONSchemaSubset.membershipEvent()
        var e = EventTranscript()
        for event in ScenarioSet.events(prefix: "ev") { e.feed(event) }
        XCTAssertGreaterThan(e.described.count, 20)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var types: Set<MembershipEventType> = []
        for (index, described) in e.described.enumerated() {
            XCTAssertEqual(described.meaning != nil, described.entry.changesMembership)
            guard let event = MembershipEvent(described, entryId: Int64(index + 1), recordedAtMs: t0) else { continue }
            types.insert(event.type)
            let json = [UInt8](try encoder.encode(event))
            XCTAssertEqual(schema.violations(of: json), [], String(decoding: json, as: UTF8.self))
        }
        XCTAssertGreaterThanOrEqual(types.count, 6, "\(types)")
        // The validator is not a rubber stamp.
        XCTAssertFalse(schema.violations(of: Array(#"{"schema":"storeledger-membership-event/1","type":"NOPE"}"#.utf8)).isEmpty)
        XCTAssertFalse(schema.violations(of: Array(#"{"eventId":1}"#.utf8)).isEmpty)
    }

    /// Sources and cut kinds that no scenario makes (refresh's `server-api`, replay's correction) are
    /// values events carry too: the schema names every one the code has.
    func testTheSchemaNamesEverySourceAndCutKind() throws {
        let properties = try XCTUnwrap(JSONSchemaSubset.membershipEvent().root["properties"] as? [String: Any])
        func values(_ property: [String: Any]?) -> Set<String> { Set(property?["enum"] as? [String] ?? []) }
        let cause = (properties["cause"] as? [String: Any])?["properties"] as? [String: Any]
        XCTAssertEqual(values(cause?["source"] as? [String: Any]), Set(EventSource.allCases.map(\.rawValue)))
        XCTAssertEqual(values(properties["cutKind"] as? [String: Any]), Set(Cut.Kind.allCases.map(\.rawValue)))
    }

    func testKafkaDefaultPartitionerMatchesJavaClients() {
        // Vectors from Apache Kafka's UtilsTest.testMurmur2.
        XCTAssertEqual(KafkaMurmur2.hash(Array("21".utf8)), -973_932_308)
        XCTAssertEqual(KafkaMurmur2.hash(Array("foobar".utf8)), -790_332_482)
        XCTAssertEqual(KafkaMurmur2.hash(Array("a-little-bit-long-string".utf8)), -985_981_536)
        XCTAssertEqual(KafkaMurmur2.hash(Array("a-little-bit-longer-string".utf8)), -1_486_304_829)
        XCTAssertEqual(KafkaMurmur2.hash(Array("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8".utf8)), -58_897_971)
    }
}
