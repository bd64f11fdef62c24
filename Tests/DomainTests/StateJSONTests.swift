@testable import Domain
import Foundation
import XCTest

/// The documents stored in JSON columns (`KnownPurchase`, `SubscriptionState`, `Cause`, `GroupMembership`)
/// are written directly; these tests hold the writers to what `JSONEncoder` wrote: the same object once
/// parsed (key order aside), the same value decoded back, and every stored property written.
final class StateJSONTests: XCTestCase {
    func testFullPurchaseMatchesJSONEncoder() throws {
        let purchase = KnownPurchase(purchaseId: "p|1", facts: Self.facts(full: true), aliases: ["t-2", "t-1"], cancellationStatedAtMs: 9)
        try assertSameDocument(purchase.json, purchase)
        let object = try Self.object(purchase.json)
        XCTAssertEqual(Set(object.keys), Self.labels(purchase))
        let facts = try XCTUnwrap(object["facts"] as? [String: Any])
        XCTAssertEqual(Set(facts.keys), Self.labels(purchase.facts))
        XCTAssertEqual(Set(try XCTUnwrap(facts["commitmentInfo"] as? [String: Any]).keys), Self.labels(purchase.facts.commitmentInfo!))
    }

    func testSparsePurchaseMatchesJSONEncoder() throws {
        try assertSameDocument(KnownPurchase(purchaseId: "p", facts: Self.facts(full: false), aliases: []).json,
                               KnownPurchase(purchaseId: "p", facts: Self.facts(full: false), aliases: []))
    }

    func testFullStateMatchesJSONEncoder() throws {
        let state = Self.state(full: true)
        try assertSameDocument(state.json, state)
        let object = try Self.object(state.json)
        XCTAssertEqual(Set(object.keys), Self.labels(state))
        let grant = try XCTUnwrap((object["grants"] as? [String: Any])?["p2"] as? [String: Any])
        let full = try XCTUnwrap(state.grants["p2"])
        XCTAssertEqual(Set(grant.keys), Self.labels(full))
        XCTAssertEqual(Set(try XCTUnwrap(grant["cut"] as? [String: Any]).keys), Self.labels(full.cut!))
        let finance = try XCTUnwrap(grant["finance"] as? [String: Any])
        XCTAssertEqual(Set(finance.keys), Self.labels(full.finance))
        XCTAssertEqual(Set(try XCTUnwrap(object["renewal"] as? [String: Any]).keys), Self.labels(state.renewal!))
        let grace = try XCTUnwrap((object["graces"] as? [String: Any])?["grace|1"] as? [String: Any])
        XCTAssertEqual(Set(grace.keys), Self.labels(state.graces["grace|1"]!))
    }

    /// The finance row's `grant_facts`: the same document as the grant inside the state.
    func testGrantAloneMatchesJSONEncoderAndTheState() throws {
        let state = Self.state(full: true)
        for (id, grant) in state.grants {
            try assertSameDocument(grant.json, grant)
            let inState = try XCTUnwrap((try Self.object(state.json)["grants"] as? [String: Any])?[id] as? NSDictionary)
            XCTAssertEqual(try Self.object(grant.json) as NSDictionary, inState, id)
        }
        XCTAssertFalse(state.grants.isEmpty)
    }

    /// Empty `claims`, `graceEnds` and `factPositions` stay out, the other collections stay in.
    func testEmptyStateMatchesJSONEncoder() throws {
        let state = SubscriptionState(subscriptionKey: "s")
        try assertSameDocument(state.json, state)
        XCTAssertEqual(Set(try Self.object(state.json).keys), ["credited", "graces", "granted", "grants", "recordedCommands", "subscriptionKey"])
    }

    func testCausesMatchJSONEncoder() throws {
        let full = Cause(source: .notificationV2, eventId: "v2:e", notificationType: "DID_RENEW", notificationSubtype: "BILLING_RECOVERY",
                         notificationUUID: "u", transactionId: "t", purchaseId: "p",
                         rawPosition: RecordPosition(topic: "raw", partition: 3, offset: 44),
                         decodedPosition: RecordPosition(topic: "decoded", partition: 2, offset: Int64.max), environment: "Sandbox",
                         provenance: "recovered")
        try assertSameDocument(full.json, full)
        let object = try Self.object(full.json)
        XCTAssertEqual(Set(object.keys), Self.labels(full))
        XCTAssertEqual(Set(try XCTUnwrap(object["rawPosition"] as? [String: Any]).keys), Self.labels(full.rawPosition!))
        let sparse = Cause(source: .appReceipt, eventId: "r:1")
        try assertSameDocument(sparse.json, sparse)
    }

    /// The per-user view: every member when all are set, the optional ones left out when not.
    func testGroupMembershipViewsMatchJSONEncoder() throws {
        let full = GroupMembership(group: "vip", intervals: [Interval(startMs: 1, endMs: 5), Interval(startMs: 7, endMs: 9)],
                                   currentProduct: "vip.1m", currentSubscriptionKey: "s/1", autoRenewStatus: false,
                                   pendingProduct: "vip.1y", pendingChange: "crossgrade-at-renewal", isInBillingRetry: true,
                                   gracePeriodExpiresMs: -3, balance: 12, subscriptionKeys: ["s/1", "s\"2"], environments: ["Sandbox"])
        try assertSameDocument(full.json, full)
        XCTAssertEqual(Set(try Self.object(full.json).keys), Self.labels(full))
        let sparse = GroupMembership(group: "coins", intervals: [])
        try assertSameDocument(sparse.json, sparse)
        let open = GroupMembership(group: "life", intervals: [Interval(startMs: 2, endMs: nil)])
        try assertSameDocument(open.json, open)
        XCTAssertEqual(try Self.object(open.json)["openEnded"] as? Bool, true)
        XCTAssertEqual(Set(try Self.object(sparse.json).keys), ["group", "intervals", "openEnded", "subscriptionKeys"])
    }

    /// Every character below 0x80 and some beyond, in a key and in values: parsed back unchanged.
    func testEscapedStringsRoundTrip() throws {
        let text = String((0..<0x80).map { Character(Unicode.Scalar(UInt8($0))) }) + "é/日本🎉\u{2028}"
        var state = Self.state(full: true)
        state.userId = text
        state.credited[text] = -3
        state.recordedCommands.insert(text)
        try assertSameDocument(state.json, state)
        var purchase = KnownPurchase(purchaseId: text, facts: Self.facts(full: true), aliases: [text])
        purchase.facts.storefront = text
        try assertSameDocument(purchase.json, purchase)
    }

    // MARK: - Support

    private func assertSameDocument<T: Codable & Equatable>(_ written: [UInt8], _ value: T, file: StaticString = #filePath, line: UInt = #line) throws {
        let expected = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(value)) as? NSDictionary
        let actual = try JSONSerialization.jsonObject(with: Data(written)) as? NSDictionary
        XCTAssertNotNil(actual, file: file, line: line)
        XCTAssertEqual(actual, expected, file: file, line: line)
        XCTAssertEqual(try JSONDecoder().decode(T.self, from: Data(written)), value, file: file, line: line)
    }

    private static func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    private static func labels(_ value: Any) -> Set<String> { Set(Mirror(reflecting: value).children.compactMap(\.label)) }

    static func facts(full: Bool) -> TransactionFacts {
        guard full else { return TransactionFacts(transactionId: "t", originalTransactionId: "o", productId: "x", purchaseDateMs: -5) }
        return TransactionFacts(
            transactionId: "t\"1", originalTransactionId: "o/1", webOrderLineItemId: "w", productId: "vip.1m", bundleId: "b",
            purchaseDateMs: 1_709_251_200_000, originalPurchaseDateMs: 1, expiresDateMs: 2, cancellationDateMs: 3, cancellationReason: "0",
            isUpgraded: true, isTrialPeriod: false, isInIntroOfferPeriod: true, promotionalOfferId: "promo", offerCodeRefName: "code",
            offerType: 2, offerIdentifier: "oid", offerDiscountType: "PAY_AS_YOU_GO", quantity: 3, productType: "Consumable",
            inAppOwnershipType: "FAMILY_SHARED", subscriptionGroupIdentifier: "g", appAccountToken: "a", storefront: "USA",
            transactionReason: "RENEWAL", price: Int64.min, currency: "EUR", revocationType: "REFUND_PRORATED", revocationPercentage: 50_000,
            offerPeriod: "P1M", storefrontId: "143441", appTransactionId: "app", billingPlanType: "MONTHLY",
            commitmentInfo: CommitmentInfo(billingPeriodNumber: 2, totalBillingPeriods: 12, commitmentExpiresDateMs: 7, commitmentPrice: 99_000))
    }

    static func state(full: Bool) -> SubscriptionState {
        var state = SubscriptionState(subscriptionKey: "s-1", userId: "u-1")
        state.grants["p1"] = PurchaseGrant(purchaseId: "p1", transactionId: "t1", originalTransactionId: "o", productId: "x",
                                           productKind: .autoRenewable, group: "vip", startMs: 1, endMs: nil)
        state.grants["p2"] = PurchaseGrant(
            purchaseId: "p2", transactionId: "t2", originalTransactionId: "o", productId: "coins", productKind: .consumable, group: "coins",
            startMs: 5, endMs: 6, cut: Cut(atMs: 6, kind: .correction, appleReason: "1", refundedShare: 25_000), credit: 10,
            finance: FinanceFlags(isTrial: true, isIntro: true, promotionalOfferId: "pr", offerCodeRefName: "c", offerType: 3,
                                  offerIdentifier: "i", offerDiscountType: "FREE_TRIAL", offerPeriod: "P1W", billingPlanType: "b",
                                  commitment: CommitmentInfo(billingPeriodNumber: 1)),
            level: 2, durationDays: 30, inCatalog: false, environment: "Production")
        state.granted = ["p1": Interval(startMs: 1, endMs: nil), "p2": Interval(startMs: 5, endMs: 6)]
        state.credited = ["p2": 10]
        state.recordedCommands = ["c-2", "c-1"]
        state.graces["grace|1"] = SubscriptionState.GraceRecord(group: "vip", productId: "x", startMs: 1, endMs: 2)
        guard full else { return state }
        state.renewal = RenewalState(autoRenewStatus: false, productId: "x", autoRenewProductId: "y", isInBillingRetry: true,
                                     gracePeriodExpiresMs: 8, asOfMs: 9, pendingChange: "downgrade", expirationIntent: "1",
                                     priceIncreaseStatus: "0", asOfRank: 1, sourceEventId: "e")
        state.claims = ["app-account-token|u-1": 4, "receipt-upload|u-2": 5]
        state.environment = "Sandbox"
        state.graceEnds = ["vip": [3, 1], "coins": []]
        state.factPositions = ["p1": RecordPosition(topic: "decoded", partition: 0, offset: 12)]
        return state
    }
}
