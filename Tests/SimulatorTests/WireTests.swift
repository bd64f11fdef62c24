import AppleDecoding
import Crypto
import Domain
import Foundation
@testable import Simulator
import TestSupport
import XCTest

/// Contract: what the simulator puts on the wire is what StoreLedger's own decoders accept from
/// Apple, verified against the simulator's generated root exactly as the decode worker is
/// configured (`AppleDecodingConfiguration`): PKCS#7 receipts (ASN.1 layout, second-precision
/// dates, empty dates for absent values), V1 bodies in both shapes ("PROD", "true"/"false",
/// string numbers), V2 signedPayload with nested signed transaction and renewal info, and the
/// app's upload body. Every fact the simulator holds comes back out of the decoder.
final class WireTests: XCTestCase {
    static let pki = Result { try SimulatorPKI.generate() }
    let bundle = "com.storeledger.simulator"
    let t0: Int64 = 1_735_732_800_456   // 2025-01-01 12:00:00.456 UTC

    func world() throws -> (StoreState, WireEmitter) {
        let config = StoreConfig(bundleId: bundle, catalog: SimulatorCatalog.standard, runId: 7)
        return (StoreState(config: config), WireEmitter(pki: try Self.pki.get(), config: config))
    }

    func decoder() throws -> AppleInputDecoder {
        var config = AppleDecodingConfiguration()
        let root = try Self.pki.get().chain.root.certificate
        config.appleRoots = [root]
        config.receiptRoots = [root]
        config.bundleId = bundle
        config.appAppleId = 1_234_567_890
        config.v1SharedSecrets = ["simulator-shared-secret"]
        try config.validate()
        return try config.makeDecoder()
    }

    func decode(_ delivery: Delivery, file: StaticString = #filePath, line: UInt = #line) throws -> [AppleEvent] {
        let input = RawInput(source: delivery.channel == .receiptUpload ? .appReceipt : .appStoreNotification,
                             body: delivery.body, receivedAtMs: delivery.simMs, position: nil)
        switch try decoder().decode(input) {
        case .success(let events): return events
        case .failure(let failure):
            XCTFail("\(delivery.label) did not decode: \(failure)", file: file, line: line)
            return []
        }
    }

    func testAppleDatesMatchApplesSpelling() {
        // From notifications-v1/educreations/initial_buy.json: 1593216159000 is 2020-06-27 00:02:39 GMT, 17:02:39 PDT.
        XCTAssertEqual(AppleDates.gmt(1_593_216_159_000), "2020-06-27 00:02:39 Etc/GMT")
        XCTAssertEqual(AppleDates.pst(1_593_216_159_000), "2020-06-26 17:02:39 America/Los_Angeles")
        XCTAssertEqual(AppleDates.pst(1_606_293_002_000), "2020-11-25 00:30:02 America/Los_Angeles")  // PST, -8
        XCTAssertEqual(AppleDates.rfc3339(1_593_216_159_999), "2020-06-27T00:02:39Z")
        XCTAssertEqual(AppleDates.readable(t0), "2025-01-01 12:00:00.456")
    }

    func testReceiptUploadDecodesWithEveryFactAndSecondPrecision() throws {
        var (state, emitter) = try world()
        state.addUser("u1")
        try state.addAppleID(user: "u1")
        let first = try state.purchase(user: "u1", appleId: 0, productId: "vip.a.1m.intro", atMs: t0, offer: .freeTrial)
        let renewal = try state.renew(first.originalTransactionId)
        try state.refund(first.originalTransactionId, transactionId: renewal.transactionId, atMs: renewal.purchaseMs + 86_400_000, reason: "1")
        let lifetime = try state.purchase(user: "u1", appleId: 0, productId: "lifetime.pro", atMs: t0 + 1000)
        let upload = try emitter.receiptUpload(state, user: "u1", appleId: 0, atMs: renewal.purchaseMs + 2 * 86_400_000, focus: renewal)
        let events = try decode(upload)
        XCTAssertEqual(Set(events.map(\.subscriptionKey)), [first.originalTransactionId, lifetime.transactionId])
        XCTAssertTrue(events.allSatisfy { $0.appUserId == "u1" && $0.bundleId == bundle && $0.environment == "Production" })
        let subscription = try XCTUnwrap(events.first { $0.subscriptionKey == first.originalTransactionId })
        XCTAssertEqual(subscription.transactions.map(\.transactionId), [first.transactionId, renewal.transactionId])
        let decodedFirst = subscription.transactions[0]
        XCTAssertEqual(decodedFirst.purchaseDateMs, t0 - 456, "receipts carry seconds only")
        XCTAssertEqual(decodedFirst.expiresDateMs, first.expiresMs.map { $0 - 456 })
        XCTAssertEqual(decodedFirst.webOrderLineItemId, first.webOrderLineItemId)
        XCTAssertEqual(decodedFirst.isTrialPeriod, true)
        XCTAssertEqual(decodedFirst.productId, "vip.a.1m.intro")
        XCTAssertNil(decodedFirst.cancellationDateMs, "an empty 1712 date is absent")
        XCTAssertEqual(subscription.transactions[1].cancellationDateMs.map { $0 / 1000 }, (renewal.purchaseMs + 86_400_000) / 1000)
        let lifetimeEvent = try XCTUnwrap(events.first { $0.subscriptionKey == lifetime.transactionId })
        XCTAssertEqual(lifetimeEvent.transactions.first?.productId, "lifetime.pro")
        XCTAssertNil(lifetimeEvent.transactions.first?.expiresDateMs)
        // The upload carries the client's optional fields unless they are missing (R7).
        let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(upload.body)) as? [String: Any])
        XCTAssertEqual(body["transaction_id"] as? String, renewal.transactionId)
        let bare = try emitter.receiptUpload(state, user: "u1", appleId: 0, atMs: t0 + 5000, focus: first,
                                             options: .init(omitOptionalFields: true))
        let bareBody = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bare.body)) as? [String: Any])
        XCTAssertEqual(Set(bareBody.keys), ["user_id", "receipt_data"])
        XCTAssertEqual(try decode(bare).count, 2)
    }

    func testReceiptIsVerifiedOnlyAgainstTheSimulatorRootAndReadsBackIndependently() throws {
        var (state, emitter) = try world()
        state.addUser("u2")
        try state.addAppleID(user: "u2", environment: .sandbox)
        let t = try state.purchase(user: "u2", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let der = try XCTUnwrap(Base64.decode(try emitter.receipt(state, user: "u2", appleId: 0, atMs: t0 + 10)))
        let other = try SimulatorPKI.generate()
        XCTAssertFalse(try PKCS7SignedData.parse(der: der).verify(roots: [other.chain.root.certificate], at: Date(timeIntervalSince1970: 1_735_732_900)).isValid)
        let verified = try AppReceiptVerifier(roots: [try Self.pki.get().chain.root.certificate], bundleIds: [bundle]).verify(der)
        let receipt = try verified.get().receipt
        XCTAssertEqual(receipt.receiptType, "ProductionSandbox")
        XCTAssertEqual(receipt.inApp.map(\.transactionId), [t.transactionId])
        let summary = try XCTUnwrap(ReceiptEncoder.summary(try PKCS7SignedData.parse(der: der).content))
        XCTAssertEqual(summary.receiptType, "ProductionSandbox")
        XCTAssertEqual(summary.bundleId, bundle)
        XCTAssertEqual(summary.purchases.map(\.originalTransactionId), [t.originalTransactionId])
        XCTAssertTrue(AppReceiptVerifier.matchesDevice(receipt, deviceIdentifier: Array(SHA256.hash(Array("device:u2.apple1/1".utf8)).prefix(16))))
    }

    func testRestoredDeviceReceiptShowsNewTransactionIdsOfTheSamePurchase() throws {
        var (state, emitter) = try world()
        state.addUser("u3")
        try state.addAppleID(user: "u3")
        let t = try state.purchase(user: "u3", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let mapping = try state.restore(user: "u3", appleId: 0, atMs: t0 + 3_600_000)
        let restored = try XCTUnwrap(mapping[t.transactionId])
        XCTAssertNotEqual(restored, t.transactionId)
        let events = try decode(try emitter.receiptUpload(state, user: "u3", appleId: 0, atMs: t0 + 3_600_000, options: .init(restoredIds: true)))
        let copy = try XCTUnwrap(events.first?.transactions.first)
        XCTAssertEqual(copy.transactionId, restored)
        XCTAssertEqual(copy.originalTransactionId, t.originalTransactionId)
        XCTAssertEqual(copy.webOrderLineItemId, t.webOrderLineItemId)
        XCTAssertEqual(copy.purchaseDateMs / 1000, t.purchaseMs / 1000)
    }

    func testV1BodiesInBothShapesDecodeWithStringFields() throws {
        var (state, emitter) = try world()
        state.addUser("u4")
        try state.addAppleID(user: "u4")
        let a = try state.purchase(user: "u4", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let (old, new) = try state.switchNow(a.originalTransactionId, to: "vip.b.1m", atMs: t0 + 3_600_000)
        let cancel = try emitter.v1(state, otid: a.originalTransactionId, type: "CANCEL", atMs: t0 + 3_600_000, options: .init(focus: old))
        let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(cancel.body)) as? [String: Any])
        XCTAssertEqual(body["environment"] as? String, "PROD")
        XCTAssertEqual(body["auto_renew_status"] as? String, "true")
        XCTAssertEqual(body["cancellation_date_ms"] as? String, String(t0 + 3_600_000))
        XCTAssertEqual(body["password"] as? String, "simulator-shared-secret")
        let event = try XCTUnwrap(try decode(cancel).first)
        XCTAssertEqual(event.notification?.type, "CANCEL")
        XCTAssertEqual(event.notification?.autoRenewStatus, true)
        XCTAssertEqual(event.environment, "Production")
        let decodedOld = try XCTUnwrap(event.transactions.first { $0.transactionId == old.transactionId })
        XCTAssertEqual(decodedOld.cancellationDateMs, t0 + 3_600_000)
        XCTAssertEqual(decodedOld.isUpgraded, true)
        XCTAssertEqual(decodedOld.purchaseDateMs, t0, "V1 JSON keeps the milliseconds")
        XCTAssertTrue(event.transactions.contains { $0.transactionId == new.transactionId })
        XCTAssertEqual(event.renewalInfo?.autoRenewProductId, "vip.b.1m")
        XCTAssertEqual(event.renewalInfo?.autoRenewStatus, true)

        let legacy = try emitter.v1(state, otid: a.originalTransactionId, type: "INTERACTIVE_RENEWAL", atMs: t0 + 3_600_000,
                                    options: .init(focus: new, legacyShape: true))
        let legacyBody = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(legacy.body)) as? [String: Any])
        let top = try XCTUnwrap(legacyBody["latest_receipt_info"] as? [String: Any])
        XCTAssertEqual(top["expires_date"] as? String, new.expiresMs.map(String.init), "pre-2021: milliseconds in expires_date")
        XCTAssertNotNil(legacyBody["latest_receipt"] as? String)
        let legacyEvent = try XCTUnwrap(try decode(legacy).first)
        XCTAssertEqual(legacyEvent.transactions.filter { $0.transactionId == new.transactionId }.first?.expiresDateMs, new.expiresMs)
    }

    func testSandboxV1AndV2SayTheirEnvironment() throws {
        var (state, emitter) = try world()
        state.addUser("u5")
        try state.addAppleID(user: "u5", environment: .sandbox)
        let t = try state.purchase(user: "u5", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let v1 = try emitter.v1(state, otid: t.originalTransactionId, type: "INITIAL_BUY", atMs: t0)
        XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(v1.body)) as? [String: Any])?["environment"] as? String, "Sandbox")
        XCTAssertEqual(try decode(v1).first?.environment, "Sandbox")
        XCTAssertEqual(try decode(try emitter.v2(state, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: t0)).first?.environment, "Sandbox")
        XCTAssertEqual(v1.retryDelaysHours, [], "the sandbox sends once")
    }

    func testV2NotificationsVerifyAndCarryTransactionAndRenewalFacts() throws {
        var (state, emitter) = try world()
        state.addUser("u6")
        try state.addAppleID(user: "u6")
        let t = try state.purchase(user: "u6", appleId: 0, productId: "vip.a.1m", atMs: t0, offer: .promotional("vip.winback"))
        try state.setRenewalProduct(t.originalTransactionId, productId: "vip.lite.1m", atMs: t0 + 1000)
        let pref = try emitter.v2(state, otid: t.originalTransactionId, type: "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", atMs: t0 + 1000)
        let event = try XCTUnwrap(try decode(pref).first)
        XCTAssertEqual(event.source, .notificationV2)
        XCTAssertEqual(event.notification?.type, "DID_CHANGE_RENEWAL_PREF")
        XCTAssertEqual(event.notification?.subtype, "DOWNGRADE")
        XCTAssertNotNil(event.notification?.uuid)
        XCTAssertEqual(event.subscriptionKey, t.originalTransactionId)
        let facts = try XCTUnwrap(event.transactions.first)
        XCTAssertEqual(facts.purchaseDateMs, t0)
        XCTAssertEqual(facts.expiresDateMs, t.expiresMs)
        XCTAssertEqual(facts.promotionalOfferId, "vip.winback")
        XCTAssertEqual(facts.appAccountToken, StoreState.accountToken("u6"))
        XCTAssertEqual(event.renewalInfo?.autoRenewProductId, "vip.lite.1m")
        XCTAssertEqual(event.renewalInfo?.productId, "vip.a.1m")

        let refunded = try state.refund(t.originalTransactionId, transactionId: t.transactionId, atMs: t0 + 86_400_000, reason: "1")
        let refund = try XCTUnwrap(try decode(try emitter.v2(state, otid: t.originalTransactionId, type: "REFUND", transaction: refunded, atMs: t0 + 86_400_000)).first)
        XCTAssertEqual(refund.transactions.first?.cancellationDateMs, t0 + 86_400_000)
        XCTAssertEqual(refund.transactions.first?.cancellationReason, "1")
        XCTAssertEqual(refund.notification?.status, 5)
        XCTAssertEqual(refund.renewalInfo?.autoRenewStatus, false)
        XCTAssertNotEqual(refund.eventId, event.eventId, "every notification has its own UUID")

        // The header's x5c is leaf, intermediate, root, as Apple sends it.
        let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(pref.body)) as? [String: Any])
        let jws = try XCTUnwrap(body["signedPayload"] as? String)
        let header = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(Base64URL.decode(String(jws.split(separator: ".")[0]))!)) as? [String: Any])
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual((header["x5c"] as? [String])?.count, 3)
    }

    func testV2FromAnotherChainIsRefused() throws {
        var (state, _) = try world()
        state.addUser("u7")
        try state.addAppleID(user: "u7")
        let t = try state.purchase(user: "u7", appleId: 0, productId: "vip.a.1m", atMs: t0)
        let stranger = WireEmitter(pki: try SimulatorPKI.generate(), config: state.config)
        let delivery = try stranger.v2(state, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: t0)
        let input = RawInput(source: .appStoreNotification, body: delivery.body, receivedAtMs: t0, position: nil)
        guard case .failure = try decoder().decode(input) else { return XCTFail("a chain to another root must not verify") }
    }

    func testPKIPersistsAndReloads() throws {
        let directory = NSTemporaryDirectory() + "sim-pki-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try SimulatorPKI.loadOrCreate(directory: directory)
        let loaded = try SimulatorPKI.loadOrCreate(directory: directory)
        XCTAssertEqual(created.chain.certificates, loaded.chain.certificates)
        XCTAssertEqual(loaded.chain.leaf.key.publicKey, created.chain.leaf.certificate.publicKey)
        let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/leaf.key")
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
    }
}

/// Contract: the simulator can also sign with Apple's published test PKI (fixtures apple-lib/certs),
/// and StoreLedger's decoder accepts that only as Apple's own tests do: trusting testCA, with
/// strict X.509 checks off (the test certificates lack key identifiers), sandbox data only.
final class AppleTestChainTests: XCTestCase {
    func testV2AndReceiptsSignedWithApplesTestChainDecodeWithStrictChecksOff() throws {
        let leafKey = try SharedFixtures.path("apple-lib/certs/testLeaf.key")
        let pki = try SimulatorPKI.appleTestChain(directory: URL(fileURLWithPath: leafKey).deletingLastPathComponent().path)
        let config = StoreConfig(bundleId: SimulatorCatalog.bundleId, catalog: SimulatorCatalog.standard, runId: 9)
        let emitter = WireEmitter(pki: pki, config: config)
        var state = StoreState(config: config)
        state.addUser("t")
        try state.addAppleID(user: "t", environment: .sandbox)
        let t0: Int64 = 1_735_732_800_000
        let t = try state.purchase(user: "t", appleId: 0, productId: "vip.a.1m", atMs: t0)
        var decoding = AppleDecodingConfiguration()
        decoding.appleRoots = [pki.chain.root.certificate]
        decoding.receiptRoots = [pki.chain.root.certificate]
        decoding.bundleId = config.bundleId
        decoding.environments = [.sandbox]
        decoding.strictX509 = false
        try decoding.validate()
        let decoder = try decoding.makeDecoder()
        for delivery in [try emitter.v2(state, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: t0),
                         try emitter.receiptUpload(state, user: "t", appleId: 0, atMs: t0 + 1000)] {
            let input = RawInput(source: delivery.channel == .receiptUpload ? .appReceipt : .appStoreNotification,
                                 body: delivery.body, receivedAtMs: t0, position: nil)
            guard case .success(let events) = decoder.decode(input) else { return XCTFail("\(delivery.label) refused") }
            XCTAssertEqual(events.first?.transactions.first?.transactionId, t.transactionId)
        }
        // Strict mode refuses Apple's test chain, as Apple's own libraries would.
        decoding.strictX509 = true
        let strict = try decoding.makeDecoder()
        let v2 = try emitter.v2(state, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: t0)
        guard case .failure = strict.decode(RawInput(source: .appStoreNotification, body: v2.body, receivedAtMs: t0, position: nil)) else {
            return XCTFail("strict checks must refuse the test chain")
        }
    }
}
