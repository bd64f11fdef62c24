import Domain
import Foundation
import Postgres
@testable import Stages
import Store
import TestSupport
import XCTest

/// What the consumption policy reads of the ledger, against a real PostgreSQL: a consumable grants
/// units, not time, so it is delivered when the ledger credited it (it has no granted interval).
final class ConsumptionFactsTests: PGTestCase {
    func testACreditedConsumableIsDeliveredAndAnUnknownTransactionIsNot() throws {
        let db = try migratedDatabase()
        defer { db.close() }
        let coins = MembershipCommand(
            commandId: "c1", subscriptionKey: "c-otid",
            action: .purchase(PurchaseGrant(purchaseId: "c-otid|p", transactionId: "c-tx", originalTransactionId: "c-otid",
                                            productId: "coins.100", productKind: .consumable, group: "coins",
                                            startMs: 1_735_689_600_000, endMs: nil, credit: 100)),
            reason: "test", cause: Cause(source: .notificationV2, eventId: "c1"))
        try db.transaction { db in _ = try MembershipWriter(db).apply([coins]) }
        let facts = try XCTUnwrap(try ServerAPIStore.purchaseFacts(subscriptionKey: "c-otid", transactionId: "c-tx", db: db))
        XCTAssertEqual(facts.productKind, "consumable")
        XCTAssertNil(facts.grantedStartMs, "units, not time")
        XCTAssertTrue(facts.credited)
        let policy = ConsumptionPolicy()
        XCTAssertEqual(policy.request(for: policy.assess(facts, requestedAtMs: 1_735_776_000_000), autoRenewable: false)?.deliveryStatus,
                       "DELIVERED")
        XCTAssertNil(try ServerAPIStore.purchaseFacts(subscriptionKey: "c-otid", transactionId: "other", db: db))
    }
}
