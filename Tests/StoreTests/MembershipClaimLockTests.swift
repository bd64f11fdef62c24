import Domain
import Foundation
import Postgres
@testable import Stages
import Store
import TestSupport
import XCTest

/// Contract (R6, R17): when a claim hands a subscription back to an earlier claimant, that user is
/// locked and loaded like the others, so their per-user membership is rewritten from all their
/// subscriptions, not from this one alone. Against a real PostgreSQL.
final class MembershipClaimLockTests: PGTestCase {
    func testAClaimThatReturnsTheSubscriptionToAnEarlierClaimantKeepsTheirOtherEntitlements() throws {
        let db = try migratedDatabase()
        defer { db.close() }
        let day: Int64 = 86_400_000, t0: Int64 = 1_735_689_600_000
        func command(_ id: String, _ key: String, _ action: MembershipCommand.Action) -> MembershipCommand {
            MembershipCommand(commandId: id, subscriptionKey: key, action: action, reason: "test",
                              cause: Cause(source: .notificationV2, eventId: id))
        }
        func grant(_ key: String, group: String) -> MembershipCommand {
            command("\(key)-grant", key, .purchase(PurchaseGrant(purchaseId: "\(key)|p", transactionId: "\(key)-t", originalTransactionId: key,
                                                                 productId: "\(group).1m", productKind: .autoRenewable, group: group,
                                                                 startMs: t0, endMs: t0 + 30 * day)))
        }
        func link(_ id: String, _ key: String, _ user: String, via: String, at: Int64) -> MembershipCommand {
            command(id, key, .linkUser(UserLink(userId: user, via: via, claimedAtMs: at)))
        }
        func batch(_ commands: [MembershipCommand]) throws {
            try db.transaction { db in _ = try MembershipWriter(db).apply(commands) }
        }
        func groups(_ user: String) throws -> [String] {
            try db.query("SELECT group_id FROM user_membership WHERE user_id = \(user) ORDER BY group_id").map { try $0.string("group_id") }
        }
        // X uploaded receipts holding both subscriptions: "coins" on s2, "vip" on s1.
        try batch([grant("s1", group: "vip"), link("x-s1", "s1", "x", via: UserLink.receiptUpload, at: t0 + 50),
                   grant("s2", group: "pro"), link("x-s2", "s2", "x", via: UserLink.receiptUpload, at: t0 + 50)])
        XCTAssertEqual(try groups("x"), ["pro", "vip"])
        // Y's token claims s1 as of t0 + 100: the latest claim, Y owns it.
        try batch([link("y-1", "s1", "y", via: UserLink.appAccountToken, at: t0 + 100)])
        XCTAssertEqual(try groups("x"), ["pro"])
        XCTAssertEqual(try groups("y"), ["vip"])
        // Y's original purchase arrives late: its token claims as of t0 + 10, so X's upload is the latest.
        try batch([link("y-2", "s1", "y", via: UserLink.appAccountToken, at: t0 + 10)])
        XCTAssertEqual(try groups("y"), [])
        XCTAssertEqual(try groups("x"), ["pro", "vip"], "x's other subscription is still in x's membership")
    }
}
