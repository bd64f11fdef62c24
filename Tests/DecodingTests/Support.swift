@testable import AppleDecoding
import Crypto
import Domain
import Foundation
import Simulator
import TestSupport
import XCTest

/// Apple's own bytes from ../shared/fixtures (see TestSupport.SharedFixtures); skips when absent.
enum Fixtures {
    static func path(_ relative: String) throws -> String { try SharedFixtures.path(relative) }

    static func bytes(_ relative: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: try path(relative))))
    }

    static func text(_ relative: String) throws -> String {
        String(decoding: try bytes(relative), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func certificate(_ relative: String) throws -> X509Certificate {
        try AppleDecodingConfiguration.loadCertificate(try path(relative))
    }

    // Reads happen before XCTUnwrap: a skip thrown inside its autoclosure counts as a failure.
    static func jsonString(_ relative: String, field: String) throws -> String {
        let object = try JSONSerialization.jsonObject(with: Data(try bytes(relative))) as? [String: Any]
        return try XCTUnwrap(object?[field] as? String, "\(relative) has no string field \(field)")
    }

    static func jsonObject(_ relative: String) throws -> [String: Any] {
        let bytes = try bytes(relative)
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    static func testCA() throws -> X509Certificate { try certificate("apple-lib/certs/testCA.der") }
    static func appleRootG3() throws -> X509Certificate { try certificate("certs/apple-real/AppleRootCA-G3.cer") }
    static func appleIncRoot() throws -> X509Certificate { try certificate("certs/apple-real/AppleIncRootCertificate.cer") }
    static func storeKitRoot() throws -> X509Certificate { try certificate("certs/xcode/StoreKitTestCertificate.cer") }
}

/// Signs V2 payloads with StoreLedger's generated Apple-shaped chain (TestSupport.GeneratedPKI).
/// It is strict-valid X.509, so verifiers run with strict checks on, as in production.
struct TestPKI {
    let leafKey: P256PrivateKey
    let x5c: [String]
    let root: X509Certificate
    /// root.pem, for configurations that name a file.
    let rootPath: String

    static func load() throws -> TestPKI {
        let pki = try GeneratedPKI.shared()
        return TestPKI(leafKey: pki.chain.leaf.key, x5c: pki.chain.x5c, root: pki.chain.root.certificate, rootPath: pki.rootPath)
    }

    func sign(_ payload: [String: Any], header: [String: Any]? = nil) throws -> String {
        try JWSSigner.signES256(header: header ?? ["x5c": x5c], payload: payload, key: leafKey)
    }

    func verifier(bundleId: String = "com.example", appAppleId: Int64? = 1234,
                  environments: [AppStoreEnvironment] = [.sandbox], now: Date = Date()) throws -> SignedDataVerifier {
        try SignedDataVerifier(roots: [root], bundleId: bundleId, appAppleId: appAppleId, environments: environments,
                               strictChecks: true, now: { now })
    }
}

/// Realistic V2 payloads (field names as in Apple's models, values as in apple-lib/models).
enum V2Payloads {
    static let signedDate: Int64 = 1_698_148_900_000

    static func transaction(originalTransactionId: String = "12345", transactionId: String = "23456",
                            environment: String = "Sandbox", bundleId: String = "com.example",
                            extra: [String: Any] = [:]) -> [String: Any] {
        var payload: [String: Any] = [
            "originalTransactionId": originalTransactionId, "transactionId": transactionId,
            "webOrderLineItemId": "34343", "bundleId": bundleId, "productId": "com.example.product",
            "subscriptionGroupIdentifier": "55555", "purchaseDate": 1_698_148_900_000,
            "originalPurchaseDate": 1_698_148_800_000, "expiresDate": 1_698_149_000_000, "quantity": 1,
            "type": "Auto-Renewable Subscription", "appAccountToken": "7e3fb20b-4cdb-47cc-936d-99d65f608138",
            "inAppOwnershipType": "PURCHASED", "signedDate": signedDate, "environment": environment,
            "transactionReason": "PURCHASE", "storefront": "USA", "storefrontId": "143441",
            "price": 10990, "currency": "USD", "offerType": 1, "offerDiscountType": "FREE_TRIAL",
        ]
        payload.merge(extra) { $1 }
        return payload
    }

    static func renewal(originalTransactionId: String = "12345", environment: String = "Sandbox") -> [String: Any] {
        ["originalTransactionId": originalTransactionId, "autoRenewProductId": "com.example.product.2",
         "productId": "com.example.product", "autoRenewStatus": 1, "isInBillingRetryPeriod": false,
         "signedDate": signedDate, "environment": environment, "expirationIntent": 1, "priceIncreaseStatus": 0]
    }

    static func notification(type: String = "SUBSCRIBED", subtype: String? = "INITIAL_BUY",
                             uuid: String = "002e14d5-51f5-4503-b5a8-c3a1af68eb20", environment: String = "Sandbox",
                             bundleId: String = "com.example", appAppleId: Int64 = 1234,
                             signedTransaction: String?, signedRenewal: String?) -> [String: Any] {
        var data: [String: Any] = ["environment": environment, "appAppleId": appAppleId, "bundleId": bundleId,
                                   "bundleVersion": "1.2.3", "status": 1]
        if let signedTransaction { data["signedTransactionInfo"] = signedTransaction }
        if let signedRenewal { data["signedRenewalInfo"] = signedRenewal }
        var payload: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data,
                                      "version": "2.0", "signedDate": signedDate]
        if let subtype { payload["subtype"] = subtype }
        return payload
    }

    static func body(_ signedPayload: String) -> [UInt8] {
        Array(#"{"signedPayload":"\#(signedPayload)"}"#.utf8)
    }
}

extension Result {
    var failureValue: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}

/// App receipts in Apple's ASN.1 shape from the simulated App Store (Simulator.WireEmitter),
/// signed by the generated chain: a sandbox Apple ID that bought a monthly subscription, renewed
/// it once, and bought one consumable.
struct GeneratedReceipt {
    static let bundleId = SimulatorCatalog.bundleId
    static let atMs: Int64 = 1_735_732_800_000  // 2025-01-01T12:00:00Z

    /// Base64, as apps upload it.
    let base64: String
    let der: [UInt8]
    let subscriptionTransactionIds: [String]
    let originalTransactionId: String
    let consumableTransactionId: String

    static func make() throws -> GeneratedReceipt {
        let config = StoreConfig(bundleId: bundleId, catalog: SimulatorCatalog.standard, runId: 18)
        let emitter = WireEmitter(pki: try SimulatorPKI(chain: try GeneratedPKI.shared().chain), config: config)
        var state = StoreState(config: config)
        state.addUser("u")
        try state.addAppleID(user: "u", environment: .sandbox)
        let first = try state.purchase(user: "u", appleId: 0, productId: "vip.a.1m", atMs: atMs - 40 * 86_400_000)
        let renewal = try state.renew(first.originalTransactionId)
        let coins = try state.purchase(user: "u", appleId: 0, productId: "coins.100", atMs: atMs - 86_400_000)
        let base64 = try emitter.receipt(state, user: "u", appleId: 0, atMs: atMs)
        return GeneratedReceipt(base64: base64, der: try XCTUnwrap(Base64.decode(base64)),
                                subscriptionTransactionIds: [first.transactionId, renewal.transactionId],
                                originalTransactionId: first.originalTransactionId, consumableTransactionId: coins.transactionId)
    }

    /// A verifier trusting the generated root, strict X.509, for `bundleIds` (empty: any app).
    static func verifier(bundleIds: Set<String> = [], fastPath: Bool = true) throws -> AppReceiptVerifier {
        try AppReceiptVerifier(roots: [try GeneratedPKI.shared().chain.root.certificate], bundleIds: bundleIds, strictChecks: true,
                               fastPath: fastPath, now: { Date() })
    }
}
