@testable import AppleDecoding
import Domain
import Foundation
import TestSupport
import XCTest

/// V1 bodies: Apple's real ones of both shapes (from ../shared, one test) decode as SOURCES.md §5
/// says their origins expect; shared-secret checks and event ids on generated bodies.
final class NotificationV1Tests: XCTestCase {
    private func decode(_ relative: String, secrets: [String] = []) throws -> Result<[AppleEvent], PermanentFailure> {
        NotificationV1Decoder(sharedSecrets: secrets).decode(body: try Fixtures.bytes(relative), receivedAtMs: 1, rawPosition: nil)
    }

    private func decode(body: [String: Any], secrets: [String] = []) throws -> Result<[AppleEvent], PermanentFailure> {
        NotificationV1Decoder(sharedSecrets: secrets).decode(body: [UInt8](try V1Notification.data(body)), receivedAtMs: 1, rawPosition: nil)
    }

    /// Apple's own V1 bodies (one test: it needs ../shared).
    func testApplesOwnBodies() throws {
        try didChangeRenewalStatusWithUnifiedReceipt()
        try didRenewProdSharedSecretChecks()
        try pre2021ShapesInitialBuyFailToRenewAndRefund()
        let first = try decode("notifications-v1/aporat/serverNotificationRequest.json").get()
        let second = try decode("notifications-v1/aporat/serverNotificationRequest.json").get()
        XCTAssertEqual(first.map(\.eventId), second.map(\.eventId))
    }

    private func didChangeRenewalStatusWithUnifiedReceipt() throws {
        let events = try decode("notifications-v1/imdhemy-laravel/appstore-server-notification.json").get()
        let event = try XCTUnwrap(events.first { $0.subscriptionKey == "1000000723811158@Sandbox" })
        XCTAssertEqual(event.source, .notificationV1)
        XCTAssertEqual(event.environment, "Sandbox")
        XCTAssertEqual(event.bundleId, "com.twigano.fashion")
        XCTAssertEqual(event.notification?.type, "DID_CHANGE_RENEWAL_STATUS")
        XCTAssertEqual(event.notification?.autoRenewStatus, false)
        XCTAssertEqual(event.notification?.autoRenewStatusChangeDateMs, 1_606_293_002_000)
        XCTAssertNotNil(event.notification?.autoRenewProductId)
        XCTAssertEqual(events.reduce(0) { $0 + $1.transactions.count }, 54)
        XCTAssertTrue(event.transactions.contains { $0.transactionId == "1000000746095599" })
        XCTAssertEqual(event.renewalInfo?.autoRenewStatus, false)
        XCTAssertEqual(event.renewalInfo?.expirationIntent, "1")
    }

    private func didRenewProdSharedSecretChecks() throws {
        let events = try decode("notifications-v1/aporat/serverNotificationRequest.json", secrets: ["other", "dummy_shared_secret"]).get()
        XCTAssertEqual(events.count, 1)
        XCTAssertEqual(events[0].environment, "Production")  // "PROD"
        XCTAssertEqual(events[0].notification?.type, "DID_RENEW")
        XCTAssertEqual(events[0].notification?.autoRenewStatus, true)
        XCTAssertEqual(events[0].subscriptionKey, "100000000000000")
        XCTAssertEqual(events[0].transactions.first?.webOrderLineItemId, "100000000000002")
        XCTAssertEqual(events[0].transactions.first?.purchaseDateMs, 1_745_044_952_000)
        XCTAssertNotNil(events[0].renewalInfo)
        XCTAssertEqual(try decode("notifications-v1/aporat/serverNotificationRequest.json", secrets: ["wrong"]).failureValue?.kind,
                       "invalid_shared_secret")
    }

    private func pre2021ShapesInitialBuyFailToRenewAndRefund() throws {
        let initial = try decode("notifications-v1/educreations/initial_buy.json").get()
        XCTAssertEqual(initial.first?.notification?.type, "INITIAL_BUY")
        XCTAssertEqual(initial.first?.environment, "Production")
        XCTAssertEqual(initial.first?.renewalInfo?.autoRenewStatus, true)  // "1"
        let failed = try decode("notifications-v1/educreations/did_fail_to_renew.json").get()
        XCTAssertTrue(failed.contains { $0.subscriptionKey == "70000762954330" })
        let refund = try decode("notifications-v1/educreations/refund.json").get()
        let facts = try XCTUnwrap(refund.flatMap(\.transactions).first)
        XCTAssertEqual(facts.cancellationDateMs, 1_599_306_492_000)
        XCTAssertEqual(facts.cancellationReason, "0")
        XCTAssertEqual(facts.productId, "com.educreations.proteacher.1year")
    }

    func testGeneratedDidRenewDecodesWithSharedSecretChecks() throws {
        let body = V1Notification.body(type: "DID_RENEW", originalTransactionId: "100000000000000", password: "dummy_shared_secret")
        let events = try decode(body: body, secrets: ["other", "dummy_shared_secret"]).get()
        XCTAssertEqual(events.count, 1)
        XCTAssertEqual(events[0].environment, "Production")  // "PROD"
        XCTAssertEqual(events[0].notification?.type, "DID_RENEW")
        XCTAssertEqual(events[0].notification?.autoRenewStatus, true)
        XCTAssertEqual(events[0].subscriptionKey, "100000000000000")
        XCTAssertEqual(events[0].transactions.first?.webOrderLineItemId, "1000000000000001")
        XCTAssertEqual(events[0].transactions.first?.purchaseDateMs, 1_593_216_159_000)
        XCTAssertEqual(events[0].renewalInfo?.autoRenewStatus, true)  // "1"
        XCTAssertEqual(try decode(body: body, secrets: ["wrong"]).failureValue?.kind, "invalid_shared_secret")
        XCTAssertNoThrow(try decode(body: body).get(), "no secrets configured: not checked")
    }

    /// A consumable's V1 CONSUMPTION_REQUEST as Apple sends it: no original_transaction_id anywhere
    /// (finished consumables leave latest_receipt_info) and "" for the facts it leaves out. It is an
    /// app-level event, its empty fields absent, never a dead letter.
    func testABodyAboutNoSubscriptionIsAnAppLevelEventAndEmptyFieldsAreAbsent() throws {
        let body = #"{"notification_type":"CONSUMPTION_REQUEST","environment":"PROD","bid":"com.example.app","bvrs":"7","auto_renew_status":"","auto_renew_product_id":"","expiration_intent":"","original_transaction_id":"","unified_receipt":{"status":0,"environment":"Production","latest_receipt_info":[],"pending_renewal_info":[]}}"#
        let result = NotificationV1Decoder().decode(body: Array(body.utf8), receivedAtMs: 0, rawPosition: nil)
        guard case .success(let events) = result else { return XCTFail("not decoded: \(result)") }
        XCTAssertEqual(events.map(\.subscriptionKey), ["app:com.example.app"])
        XCTAssertNil(events.first?.notification?.autoRenewProductId)
        XCTAssertNil(events.first?.notification?.expirationIntent)
        XCTAssertNil(events.first?.notification?.originalTransactionId)
        // With "" as the top-level id beside a real subscription, the real one is the body's subject.
        let cancel = #"{"notification_type":"DID_FAIL_TO_RENEW","environment":"Sandbox","bid":"com.example.app","original_transaction_id":"","auto_renew_product_id":"","unified_receipt":{"latest_receipt_info":[{"product_id":"p","transaction_id":"2","original_transaction_id":"1","purchase_date_ms":"1000","expires_date_ms":"2000"}],"pending_renewal_info":[{"original_transaction_id":"1","product_id":"p","auto_renew_product_id":"p","auto_renew_status":"1","is_in_billing_retry_period":"1"}]}}"#
        guard case .success(let subjects) = NotificationV1Decoder().decode(body: Array(cancel.utf8), receivedAtMs: 0, rawPosition: nil) else {
            return XCTFail("not decoded")
        }
        XCTAssertEqual(subjects.map(\.subscriptionKey), ["1@Sandbox"])
        XCTAssertEqual(subjects.first?.notification?.aboutAnotherSubscription, nil, "the subject keeps the body's type and facts")
    }

    /// verifyReceipt's endpoints from one configured URL.
    func testOneVerifyReceiptURLPairsWithItsSandbox() {
        // One URL naming Apple's production endpoint pairs with Apple's sandbox one; another serves both.
        XCTAssertEqual(AppleDecodingConfiguration.sandboxURL(pairedWith: "https://buy.itunes.apple.com/verifyReceipt"),
                       "https://sandbox.itunes.apple.com/verifyReceipt")
        XCTAssertEqual(AppleDecodingConfiguration.sandboxURL(pairedWith: "http://127.0.0.1:9/verifyReceipt"), "http://127.0.0.1:9/verifyReceipt")
    }

    func testSameBodyTwiceHasTheSameEventId() throws {
        let body = V1Notification.body(originalTransactionId: "200000000000000")
        XCTAssertEqual(try decode(body: body).get().map(\.eventId), try decode(body: body).get().map(\.eventId))
        var other = body
        other["notification_type"] = "DID_RENEW"
        XCTAssertNotEqual(try decode(body: other).get().map(\.eventId), try decode(body: body).get().map(\.eventId))
    }

    func testConstantTimeComparison() {
        XCTAssertTrue(constantTimeEquals("secret", "secret"))
        XCTAssertFalse(constantTimeEquals("secret", "secreT"))
        XCTAssertFalse(constantTimeEquals("secret", "secret2"))
        XCTAssertFalse(constantTimeEquals("", "x"))
    }
}

/// Inputs the fuzzers found (scripts/fuzz.sh): each once crashed a decoder and must now be a value.
final class HostileInputRegressionTests: XCTestCase {
    /// FuzzNotification, 2026-11-30: a 28-digit `purchase_date_ms` trapped converting Double → Int64.
    /// Since issue 9 such a value refuses the input (dead letter) instead of dropping the transaction.
    func testOverlongMillisecondsAreRefusedNotTraps() throws {
        let body = #"{"notification_type":"DID_RENEW","environment":"PROD","original_transaction_id":"1","unified_receipt":{"latest_receipt_info":[{"product_id":"p","transaction_id":"2","original_transaction_id":"1","purchase_date_ms":"1745044952000100000000000000","expires_date_ms":1e300}]}}"#
        let result = NotificationV1Decoder().decode(body: Array(body.utf8), receivedAtMs: 0, rawPosition: nil)
        guard case .failure(let failure) = result else { return XCTFail("decoded \(result)") }
        XCTAssertEqual(failure.kind, "invalid_number")
        XCTAssertNil(JSONFields(["x": "9.3e18"]).int64("x"))
        XCTAssertNil(JSONFields(["x": NSNumber(value: UInt64.max)]).int64("x"))
        XCTAssertEqual(JSONFields(["x": NSNumber(value: 1_697_679_936_049.7297)]).int64("x"), 1_697_679_936_049)
    }
}
