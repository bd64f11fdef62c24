import Configuration
@testable import AppleDecoding
import Crypto
import Domain
import Foundation
import XCTest

/// V2 notification bodies → one normalized AppleEvent, nested JWS verified too.
final class NotificationV2Tests: XCTestCase {
    private func decoder(_ pki: TestPKI, environments: [AppStoreEnvironment] = [.sandbox]) throws -> NotificationV2Decoder {
        NotificationV2Decoder(verifier: try pki.verifier(environments: environments))
    }

    func testSubscribedNotificationBecomesOneEventWithTransactionAndRenewal() throws {
        let pki = try TestPKI.load()
        let payload = V2Payloads.notification(signedTransaction: try pki.sign(V2Payloads.transaction()),
                                              signedRenewal: try pki.sign(V2Payloads.renewal()))
        let body = V2Payloads.body(try pki.sign(payload))
        let position = RecordPosition(topic: Topic.notificationsRaw, partition: 3, offset: 42)
        let events = try decoder(pki).decode(body: body, receivedAtMs: 7, rawPosition: position).get()
        XCTAssertEqual(events.count, 1)
        let event = events[0]
        XCTAssertEqual(event.eventId, "v2:002e14d5-51f5-4503-b5a8-c3a1af68eb20")
        XCTAssertEqual(event.source, .notificationV2)
        XCTAssertEqual(event.environment, "Sandbox")
        XCTAssertEqual(event.bundleId, "com.example")
        XCTAssertEqual(event.subscriptionKey, "12345@Sandbox")
        XCTAssertEqual(event.rawPosition, position)
        XCTAssertEqual(event.receivedAtMs, 7)
        XCTAssertEqual(event.notification, NotificationMeta(type: "SUBSCRIBED", subtype: "INITIAL_BUY",
                                                            uuid: "002e14d5-51f5-4503-b5a8-c3a1af68eb20",
                                                            signedDateMs: V2Payloads.signedDate, autoRenewStatus: true,
                                                            autoRenewProductId: "com.example.product.2", status: 1))
        let transaction = try XCTUnwrap(event.transactions.first)
        XCTAssertEqual(transaction, TransactionFacts(
            transactionId: "23456", originalTransactionId: "12345", webOrderLineItemId: "34343",
            productId: "com.example.product", bundleId: "com.example", purchaseDateMs: 1_698_148_900_000,
            originalPurchaseDateMs: 1_698_148_800_000, expiresDateMs: 1_698_149_000_000,
            isTrialPeriod: true, isInIntroOfferPeriod: false, offerType: 1, offerDiscountType: "FREE_TRIAL",
            quantity: 1, productType: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED",
            subscriptionGroupIdentifier: "55555", appAccountToken: "7e3fb20b-4cdb-47cc-936d-99d65f608138",
            storefront: "USA", transactionReason: "PURCHASE", price: 10990, currency: "USD", storefrontId: "143441"))
        XCTAssertEqual(event.renewalInfo, RenewalFacts(originalTransactionId: "12345", productId: "com.example.product",
                                                       autoRenewProductId: "com.example.product.2", autoRenewStatus: true,
                                                       expirationIntent: "1", isInBillingRetryPeriod: false,
                                                       priceIncreaseStatus: "0"))
    }

    func testRefundCarriesRevocationAndOfferFacts() throws {
        let pki = try TestPKI.load()
        let transaction = V2Payloads.transaction(extra: ["revocationDate": 1_698_148_950_000, "revocationReason": 1,
                                                         "revocationType": "REFUND_PRORATED", "revocationPercentage": 50000,
                                                         "offerPeriod": "P1M", "isUpgraded": true,
                                                         "offerType": 2, "offerIdentifier": "abc.123",
                                                         "offerDiscountType": "PAY_AS_YOU_GO"])
        let payload = V2Payloads.notification(type: "REFUND", subtype: nil, signedTransaction: try pki.sign(transaction), signedRenewal: nil)
        let event = try XCTUnwrap(try decoder(pki).decode(body: V2Payloads.body(try pki.sign(payload)), receivedAtMs: 0, rawPosition: nil).get().first)
        let facts = try XCTUnwrap(event.transactions.first)
        XCTAssertEqual(facts.cancellationDateMs, 1_698_148_950_000)
        XCTAssertEqual(facts.cancellationReason, "1")
        XCTAssertEqual(facts.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(facts.revocationPercentage, 50000)
        XCTAssertEqual(facts.offerPeriod, "P1M")
        XCTAssertEqual(facts.isUpgraded, true)
        XCTAssertEqual(facts.promotionalOfferId, "abc.123")
        XCTAssertEqual(facts.isTrialPeriod, false)
        XCTAssertNil(event.renewalInfo)
        XCTAssertEqual(event.notification?.type, "REFUND")
        XCTAssertNil(event.notification?.subtype)
    }

    /// R10 for payloads from before `offerDiscountType`: an introductory offer at price 0 is a free
    /// trial, at a price an introductory price; with neither field, an intro period of unknown kind.
    func testIntroOfferWithoutDiscountTypeIsToldByItsPrice() throws {
        let pki = try TestPKI.load()
        func facts(_ price: Int?) throws -> TransactionFacts {
            var transaction = V2Payloads.transaction()
            transaction["offerDiscountType"] = nil
            transaction["price"] = price
            let payload = V2Payloads.notification(type: "SUBSCRIBED", subtype: "INITIAL_BUY", signedTransaction: try pki.sign(transaction),
                                                  signedRenewal: nil)
            let event = try XCTUnwrap(try decoder(pki).decode(body: V2Payloads.body(try pki.sign(payload)), receivedAtMs: 0, rawPosition: nil).get().first)
            return try XCTUnwrap(event.transactions.first)
        }
        let trial = try facts(0)
        XCTAssertEqual(trial.isTrialPeriod, true)
        XCTAssertEqual(trial.isInIntroOfferPeriod, false)
        let priced = try facts(4990)
        XCTAssertEqual(priced.isTrialPeriod, false)
        XCTAssertEqual(priced.isInIntroOfferPeriod, true)
        let unknown = try facts(nil)
        XCTAssertNil(unknown.isTrialPeriod)
        XCTAssertEqual(unknown.isInIntroOfferPeriod, true)
    }

    func testUnknownTypesAndAppLevelNotificationsAreKeptNotRefused() throws {
        let pki = try TestPKI.load()
        let future = V2Payloads.notification(type: "SOMETHING_NEW", subtype: "NEVER_SEEN", signedTransaction: nil, signedRenewal: nil)
        let event = try XCTUnwrap(try decoder(pki).decode(body: V2Payloads.body(try pki.sign(future)), receivedAtMs: 0, rawPosition: nil).get().first)
        XCTAssertEqual(event.notification?.type, "SOMETHING_NEW")
        XCTAssertEqual(event.notification?.subtype, "NEVER_SEEN")
        XCTAssertEqual(event.subscriptionKey, "app:com.example@Sandbox")
        XCTAssertTrue(event.transactions.isEmpty)

        // RENEWAL_EXTENSION summary: the app is identified from `summary` (Apple's rule).
        let summary: [String: Any] = ["notificationType": "RENEWAL_EXTENSION", "subtype": "SUMMARY",
                                      "notificationUUID": "u-1", "signedDate": V2Payloads.signedDate,
                                      "summary": ["environment": "Sandbox", "appAppleId": 1234, "bundleId": "com.example",
                                                  "productId": "com.example.product", "succeededCount": 5, "failedCount": 2]]
        let summaryEvent = try decoder(pki).decode(body: V2Payloads.body(try pki.sign(summary)), receivedAtMs: 0, rawPosition: nil).get()
        XCTAssertEqual(summaryEvent.first?.notification?.subtype, "SUMMARY")
    }

    func testNestedFailuresAreDeadLetteredWithApplesStatus() throws {
        let pki = try TestPKI.load()
        let wrongBundle = try pki.sign(V2Payloads.transaction(bundleId: "com.other"))
        let payload = V2Payloads.notification(signedTransaction: wrongBundle, signedRenewal: nil)
        let failure = try decoder(pki).decode(body: V2Payloads.body(try pki.sign(payload)), receivedAtMs: 0, rawPosition: nil).failureValue
        XCTAssertEqual(failure?.kind, "INVALID_APP_IDENTIFIER")
        XCTAssertTrue(failure?.reason.hasPrefix("signedTransactionInfo:") ?? false)

        let productionRenewal = try pki.sign(V2Payloads.renewal(environment: "Production"))
        let mixed = V2Payloads.notification(signedTransaction: nil, signedRenewal: productionRenewal)
        XCTAssertEqual(try decoder(pki).decode(body: V2Payloads.body(try pki.sign(mixed)), receivedAtMs: 0, rawPosition: nil).failureValue?.kind,
                       "INVALID_ENVIRONMENT")

        let forged = V2Payloads.notification(signedTransaction: "a.b.c", signedRenewal: nil)
        XCTAssertEqual(try decoder(pki).decode(body: V2Payloads.body(try pki.sign(forged)), receivedAtMs: 0, rawPosition: nil).failureValue?.kind,
                       "VERIFICATION_FAILURE")
    }

    func testBodyShapeFailures() throws {
        let pki = try TestPKI.load()
        let decoder = try decoder(pki)
        XCTAssertEqual(decoder.decode(body: Array("not json".utf8), receivedAtMs: 0, rawPosition: nil).failureValue?.kind, "invalid_json")
        XCTAssertEqual(decoder.decode(body: Array(#"{"signedPayload": 5}"#.utf8), receivedAtMs: 0, rawPosition: nil).failureValue?.kind, "missing_field")
        XCTAssertEqual(decoder.decode(body: Array(#"{"signedPayload": "x.y.z"}"#.utf8), receivedAtMs: 0, rawPosition: nil).failureValue?.kind,
                       "VERIFICATION_FAILURE")
    }

    func testRouterAndConfiguration() throws {
        let pki = try TestPKI.load()
        let roots = pki.rootPath
        var env = ["STORELEDGER_APPLE_ROOTS": roots, "STORELEDGER_BUNDLE_ID": "com.example",
                   "STORELEDGER_ENVIRONMENT": "Sandbox", "STORELEDGER_X509_STRICT": "false"]
        let decoder = try decoding(env).makeDecoder()
        let payload = V2Payloads.notification(signedTransaction: try pki.sign(V2Payloads.transaction()), signedRenewal: nil)
        let input = RawInput(source: .appStoreNotification, body: V2Payloads.body(try pki.sign(payload)), receivedAtMs: 1, position: nil)
        XCTAssertEqual(try decoder.decode(input).get().first?.subscriptionKey, "12345@Sandbox", "R18: the environment is part of the key")

        // Unconfigured: V2 refused with a clear reason, V1 still decodes.
        let bare = try decoding([:]).makeDecoder()
        XCTAssertEqual(bare.decode(input).failureValue, .permanent(PermanentFailure("v2_not_configured",
            "V2 notifications need STORELEDGER_APPLE_ROOTS and STORELEDGER_BUNDLE_ID")))

        // A production configuration refuses non-strict chains; Production needs the app's Apple id.
        env["STORELEDGER_ENVIRONMENT"] = "Production,Sandbox"
        env["STORELEDGER_APP_APPLE_ID"] = "1234"
        XCTAssertThrowsError(try decoding(env))
        env["STORELEDGER_X509_STRICT"] = "true"
        env.removeValue(forKey: "STORELEDGER_APP_APPLE_ID")
        XCTAssertThrowsError(try decoding(env))
        env["STORELEDGER_APP_APPLE_ID"] = "1234"
        XCTAssertNoThrow(try decoding(env))
        XCTAssertThrowsError(try decoding(["STORELEDGER_APPLE_ROOTS": "/nonexistent.der"]))
        XCTAssertThrowsError(try decoding(["STORELEDGER_ENVIRONMENT": "Staging"]))
        // Apple signs every app's receipts alike: receipt validation needs the app's bundle id.
        let receiptsOnly = ["STORELEDGER_RECEIPT_ROOTS": roots, "STORELEDGER_ENVIRONMENT": "Sandbox", "STORELEDGER_X509_STRICT": "false"]
        XCTAssertThrowsError(try decoding(receiptsOnly)) { XCTAssertTrue("\($0)".contains("STORELEDGER_BUNDLE_ID"), "\($0)") }
        XCTAssertThrowsError(try decoding(["STORELEDGER_VERIFY_RECEIPT_URLS": "https://buy.itunes.apple.com/verifyReceipt"]))
        XCTAssertNoThrow(try decoding(receiptsOnly.merging(["STORELEDGER_BUNDLE_ID": "com.example"]) { $1 }))
    }
}

/// The decode worker's configuration as `storeledger worker decode` reads it from an environment.
private func decoding(_ environment: [String: String]) throws -> AppleDecodingConfiguration {
    try AppleDecodingConfiguration(ConfigurationReader.read(environment, DecodingConfiguration.init))
}

/// A StoreKit 2 app uploads `Transaction.jwsRepresentation` as `receipt_data`: verified with the V2
/// trust, it is the uploading account's claim like a receipt; a forged one is refused.
final class SignedTransactionUploadTests: XCTestCase {
    func testASignedTransactionUploadIsTheUploadersPurchase() throws {
        let pki = try TestPKI.load()
        let decoder = AppleInputDecoder(v2: NotificationV2Decoder(verifier: try pki.verifier(environments: [.sandbox])))
        let signed = try pki.sign(V2Payloads.transaction())
        XCTAssertTrue(SignedTransactionUpload.looksLikeOne(signed))
        XCTAssertFalse(SignedTransactionUpload.looksLikeOne("MIIT0gYJKoZIhvcNAQcCoIITwzCCE78CAQExCzAJBgUrDgMCGgUAMIIDcwYJKoZIhvcNAQcB"))
        let body = Array(#"{"user_id":"account-7","receipt_data":"\#(signed)"}"#.utf8)
        let events = try decoder.decode(RawInput(source: .appReceipt, body: body, receivedAtMs: 9, position: nil)).get()
        XCTAssertEqual(events.count, 1)
        XCTAssertEqual(events[0].source, .appReceipt)
        XCTAssertEqual(events[0].appUserId, "account-7")
        XCTAssertEqual(events[0].subscriptionKey, "12345@Sandbox")
        XCTAssertEqual(events[0].transactions.map(\.transactionId), ["23456"])
        XCTAssertEqual(events[0].statedAtMs, V2Payloads.signedDate)

        // Tampered payload: refused, never granted.
        let parts = signed.split(separator: ".").map(String.init)
        let other = try pki.sign(V2Payloads.transaction(transactionId: "99999")).split(separator: ".").map(String.init)
        let forged = Array(#"{"user_id":"account-7","receipt_data":"\#(parts[0]).\#(other[1]).\#(parts[2])"}"#.utf8)
        guard case .failure(.permanent) = decoder.decode(RawInput(source: .appReceipt, body: forged, receivedAtMs: 9, position: nil)) else {
            return XCTFail("a forged signed transaction was accepted")
        }
        // Without the V2 trust configured it is refused with the reason.
        let unconfigured = AppleInputDecoder().decode(RawInput(source: .appReceipt, body: body, receivedAtMs: 9, position: nil))
        guard case .failure(.permanent(let failure)) = unconfigured else { return XCTFail("\(unconfigured)") }
        XCTAssertEqual(failure.kind, "v2_not_configured")
    }
}

/// Decode refuses a body that is not UTF-8 (a redriven dead letter, a record from elsewhere): its
/// nesting would hide from the byte-level depth check.
final class NonUTF8BodyTests: XCTestCase {
    func testAUTF16BodyIsDeadLetteredAsNotUTF8() {
        let json = #"{"notification_type":"DID_RENEW","original_transaction_id":"1"}"#
        let utf16 = json.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        let result = AppleInputDecoder().decode(RawInput(source: .appStoreNotification, body: utf16, receivedAtMs: 0, position: nil))
        guard case .failure(.permanent(let failure)) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(failure.kind, "not_utf8")
    }
}
