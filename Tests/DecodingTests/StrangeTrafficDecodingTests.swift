@testable import AppleDecoding
import Domain
import Foundation
import XCTest

/// What the decoders keep of real traffic's odd shapes: a V1 CANCEL's top-level facts (R15), one V1
/// body about one of several subscriptions (R16), environments in the subscription key (R18), and a
/// verifyReceipt 21006 answer (an expired subscription's receipt, data present).
final class StrangeTrafficDecodingTests: XCTestCase {
    private func v1(_ object: [String: Any]) throws -> [AppleEvent] {
        let body = [UInt8](try JSONSerialization.data(withJSONObject: object))
        return try NotificationV1Decoder().decode(body: body, receivedAtMs: 1, rawPosition: nil).get()
    }

    private func transaction(_ id: String, otid: String, product: String, web: String) -> [String: Any] {
        ["transaction_id": id, "original_transaction_id": otid, "product_id": product, "web_order_line_item_id": web,
         "purchase_date_ms": "1709251200000", "expires_date_ms": "1711843200000"]
    }

    func testR16TopLevelFactsGoOnlyToTheSubscriptionTheBodyIsAbout() throws {
        let events = try v1([
            "notification_type": "DID_FAIL_TO_RENEW", "environment": "PROD", "bid": "com.example",
            "auto_renew_status": "false", "auto_renew_product_id": "vip.1m", "expiration_intent": "2",
            "auto_renew_status_change_date_ms": "1709500000000",
            "unified_receipt": [
                "latest_receipt_info": [transaction("1", otid: "A", product: "vip.1m", web: "wa"),
                                        transaction("2", otid: "B", product: "music.1m", web: "wb")],
                "pending_renewal_info": [
                    ["original_transaction_id": "A", "product_id": "vip.1m", "auto_renew_product_id": "vip.1m", "auto_renew_status": "0"],
                    ["original_transaction_id": "B", "product_id": "music.1m", "auto_renew_product_id": "music.1m", "auto_renew_status": "1"],
                ],
            ],
        ])
        let a = try XCTUnwrap(events.first { $0.subscriptionKey == "A" })
        let b = try XCTUnwrap(events.first { $0.subscriptionKey == "B" })
        XCTAssertEqual(a.notification?.autoRenewStatus, false)
        XCTAssertEqual(a.notification?.expirationIntent, "2")
        XCTAssertNil(a.notification?.aboutAnotherSubscription)
        XCTAssertEqual(b.notification?.type, "DID_FAIL_TO_RENEW", "kept for the cause")
        XCTAssertEqual(b.notification?.aboutAnotherSubscription, true)
        XCTAssertNil(b.notification?.autoRenewStatus)
        XCTAssertNil(b.notification?.autoRenewStatusChangeDateMs)
        XCTAssertNil(b.notification?.expirationIntent)
        XCTAssertEqual(b.renewalInfo?.autoRenewStatus, true, "B keeps its own pending_renewal_info")
    }

    /// R14 with R16: a subscription listed by its pending_renewal_info alone is stated as of the latest
    /// date the body carries, never our receive time (which would outrank Apple's later statements).
    func testR16ASubscriptionWithRenewalInfoAloneIsStatedAsOfTheBody() throws {
        let events = try v1([
            "notification_type": "DID_CHANGE_RENEWAL_STATUS", "environment": "PROD", "original_transaction_id": "A",
            "auto_renew_status": "false", "auto_renew_status_change_date_ms": "1709500000000",
            "unified_receipt": [
                "latest_receipt_info": [transaction("1", otid: "A", product: "vip.1m", web: "wa")],
                "pending_renewal_info": [
                    ["original_transaction_id": "A", "product_id": "vip.1m", "auto_renew_product_id": "vip.1m", "auto_renew_status": "0"],
                    ["original_transaction_id": "B", "product_id": "music.1m", "auto_renew_product_id": "music.1m", "auto_renew_status": "1"],
                ],
            ],
        ])
        let a = try XCTUnwrap(events.first { $0.subscriptionKey == "A" })
        let b = try XCTUnwrap(events.first { $0.subscriptionKey == "B" })
        XCTAssertNil(a.statedAtMs, "the subject is stated by its own dates")
        XCTAssertEqual(b.statedAtMs, 1_709_500_000_000)
        XCTAssertEqual(b.appleStatedAtMs, 1_709_500_000_000)
    }

    func testR15CancelTopLevelFactsAreDecoded() throws {
        let events = try v1([
            "notification_type": "CANCEL", "environment": "PROD", "original_transaction_id": "A",
            "web_order_line_item_id": "wa", "cancellation_date_ms": "1709769600000", "cancellation_reason": "1",
            "unified_receipt": ["latest_receipt_info": [transaction("1", otid: "A", product: "vip.1m", web: "wa")]],
        ])
        XCTAssertEqual(events.count, 1)
        let meta = try XCTUnwrap(events[0].notification)
        XCTAssertEqual(meta.originalTransactionId, "A")
        XCTAssertEqual(meta.webOrderLineItemId, "wa")
        XCTAssertEqual(meta.cancellationDateMs, 1_709_769_600_000)
        XCTAssertEqual(meta.cancellationReason, "1")
        XCTAssertNil(events[0].transactions[0].cancellationDateMs, "the receipt info itself shows no cancellation")
        let named = withTopLevelCancellation(events[0], known: [])
        XCTAssertEqual(named.first?.cancellationDateMs, 1_709_769_600_000, "dedupe puts it on the purchase it names")
    }

    func testR18TheSameOriginalTransactionIdInTwoEnvironmentsHasTwoKeys() throws {
        func body(_ environment: String) -> [String: Any] {
            ["notification_type": "INITIAL_BUY", "environment": environment,
             "unified_receipt": ["latest_receipt_info": [transaction("1", otid: "A", product: "vip.1m", web: "wa")]]]
        }
        XCTAssertEqual(try v1(body("PROD")).map(\.subscriptionKey), ["A"])
        XCTAssertEqual(try v1(body("Sandbox")).map(\.subscriptionKey), ["A@Sandbox"])
        XCTAssertEqual(SubscriptionKey.make(originalTransactionId: "A", environment: "Xcode"), "A@Xcode")
        XCTAssertEqual(SubscriptionKey.make(originalTransactionId: "A", environment: "LocalTesting"), "A@LocalTesting")
    }

    func test21006ExpiredSubscriptionReceiptIsDecodedNotRefused() throws {
        let expired = #"{"status":21006,"environment":"Production","receipt":{"bundle_id":"com.example","receipt_creation_date_ms":"1709600000000","in_app":[{"transaction_id":"1","original_transaction_id":"A","product_id":"vip.1m","purchase_date_ms":"1709251200000","expires_date_ms":"1711843200000","cancellation_date_ms":"1709769600000"}]}}"#
        let server = try ScriptedServer(responses: [(200, expired)])
        let client = VerifyReceiptClient(productionURL: server.url("/production"), sandboxURL: server.url("/sandbox"),
                                         maxAttempts: 1, timeout: 5)
        let upload = ReceiptUploadDecoder(validation: .verifyReceipt, verifier: nil, verifyReceipt: client)
        let request = [UInt8](try JSONSerialization.data(withJSONObject: ["user_id": "u", "receipt_data": "AAAA"]))
        let events = try upload.decode(body: request, receivedAtMs: 2, rawPosition: nil).get()
        XCTAssertEqual(events.map(\.subscriptionKey), ["A"])
        XCTAssertEqual(events[0].transactions.first?.cancellationDateMs, 1_709_769_600_000, "its refund is seen")
        XCTAssertEqual(events[0].statedAtMs, 1_709_600_000_000, "the receipt's creation date orders its facts (R14)")
        // A 21006 without any receipt data is still a refusal.
        let empty = try ScriptedServer(responses: [(200, #"{"status":21006}"#)])
        let bare = VerifyReceiptClient(productionURL: empty.url("/production"), sandboxURL: empty.url("/sandbox"), maxAttempts: 1, timeout: 5)
        guard case .rejected(let status, _) = bare.verify(receiptData: "AAAA") else { return XCTFail("expected a refusal") }
        XCTAssertEqual(status, 21006)
    }

    func testR19NewerV2FieldsAreKeptAndRescindConsentUsesAppData() throws {
        let pki = try TestPKI.load()
        let decoder = NotificationV2Decoder(verifier: try pki.verifier(environments: [.sandbox]))
        let transaction = V2Payloads.transaction(extra: [
            "revocationDate": 1_698_148_950_000, "revocationReason": 0, "revocationType": "REFUND_PRORATED",
            "revocationPercentage": 42_500, "offerPeriod": "P1M", "offerDiscountType": "PAY_UP_FRONT",
            "appTransactionId": "704289572311296512", "billingPlanType": "MONTHLY_COMMITMENT",
            "commitmentInfo": ["billingPeriodNumber": 3, "commitmentExpiresDate": 1_698_150_000_000, "commitmentPrice": 119_880,
                               "totalBillingPeriods": 12],
        ])
        let payload = V2Payloads.notification(type: "REFUND", subtype: nil, signedTransaction: try pki.sign(transaction), signedRenewal: nil)
        let event = try XCTUnwrap(try decoder.decode(body: V2Payloads.body(try pki.sign(payload)), receivedAtMs: 0, rawPosition: nil).get().first)
        let facts = try XCTUnwrap(event.transactions.first)
        XCTAssertEqual(facts.typedRevocationType, .refundProrated)
        XCTAssertEqual(facts.revocationPercentage, 42_500)
        XCTAssertEqual(facts.offerPeriod, "P1M")
        XCTAssertEqual(facts.typedOfferDiscountType, .payUpFront)
        XCTAssertEqual(facts.appTransactionId, "704289572311296512")
        XCTAssertEqual(facts.billingPlanType, "MONTHLY_COMMITMENT")
        XCTAssertEqual(facts.commitmentInfo, CommitmentInfo(billingPeriodNumber: 3, totalBillingPeriods: 12,
                                                            commitmentExpiresDateMs: 1_698_150_000_000, commitmentPrice: 119_880))
        XCTAssertEqual(event.notificationType, .v2(.refund))

        // RESCIND_CONSENT carries `appData` instead of `data`: an app-level event, kept and recorded.
        let rescind: [String: Any] = ["notificationType": "RESCIND_CONSENT", "notificationUUID": "0b1c2d3e-0000-4000-8000-000000000001",
                                      "version": "2.0", "signedDate": V2Payloads.signedDate,
                                      "appData": ["appAppleId": 1234, "bundleId": "com.example", "environment": "Sandbox"]]
        let app = try XCTUnwrap(try decoder.decode(body: V2Payloads.body(try pki.sign(rescind)), receivedAtMs: 0, rawPosition: nil).get().first)
        XCTAssertEqual(app.notificationType, .v2(.rescindConsent))
        XCTAssertEqual(app.bundleId, "com.example")
        XCTAssertEqual(app.subscriptionKey, "app:com.example@Sandbox")
    }
}
