import AppStoreServerAPI
import AppleDecoding
import Crypto
import Foundation
import Signer
@testable import Simulator
import Synchronization
import XCTest

/// Contract: the App Store Server API client, talking real HTTP on loopback to the simulated App
/// Store with tokens minted by the signer's code, gets for every endpoint StoreLedger calls an
/// answer whose signed items all verified against the simulator's test chain and which matches
/// the store's ground truth; histories page through `revision` / `paginationToken` to the end and
/// resume from a stored revision; an id production does not know is found in the sandbox; 429s
/// are retried after exactly the `Retry-After` Apple asked for (or handed back when it is too
/// long); a token not made with the configured key is refused.
final class ServerAPIEndToEndTests: XCTestCase {
    typealias H = ServerAPIHarness

    func testTransactionInfoIsVerifiedAndASandboxIdIsFoundByFallingBackToTheSandbox() throws {
        let h = try ServerAPIHarness()
        let production = try h.subscriber("prod-user")
        let sandbox = try h.subscriber("sandbox-user", environment: .sandbox)
        let client = h.client()

        let info = try client.transactionInfo(transactionId: production.transactionId).value()
        XCTAssertEqual(info.environment, .production)
        XCTAssertEqual(H.string(info.transaction, "transactionId"), production.transactionId)
        XCTAssertEqual(H.string(info.transaction, "productId"), "vip.a.1m")
        XCTAssertEqual(H.int64(info.transaction, "expiresDate"), production.expiresMs)

        let fallback = try client.transactionInfo(transactionId: sandbox.transactionId).value()
        XCTAssertEqual(fallback.environment, .sandbox)
        XCTAssertEqual(H.string(fallback.transaction, "transactionId"), sandbox.transactionId)
        XCTAssertEqual(h.requests("GET Production v1/transactions/{id} 404"), 1, "production was asked first")
        XCTAssertEqual(h.requests("GET Sandbox v1/transactions/{id} 200"), 1)

        let pinned = try client.transactionInfo(transactionId: sandbox.transactionId, environment: .production).failure()
        XCTAssertEqual(pinned.errorCode, .transactionIdNotFound)
        XCTAssertEqual(pinned.kind, .permanent)
        let unknown = try client.transactionInfo(transactionId: "999999999999").failure()
        XCTAssertEqual(unknown.environment, .sandbox, "after the fallback the sandbox's answer is reported")
        XCTAssertEqual(unknown.errorCode, .transactionIdNotFound)
    }

    func testTransactionHistoryPagesThroughRevisionsAndResumesFromTheStoredOne() throws {
        let h = try ServerAPIHarness(pageSize: 3)
        let first = try h.subscriber("history-user", daysAgo: 200)
        var expected = [first.transactionId]
        for _ in 0..<6 { expected.append(try h.store.mutate { try $0.renew(first.originalTransactionId) }.transactionId) }
        let client = h.client()

        let walk = try client.transactionHistory(transactionId: first.transactionId).value()
        XCTAssertEqual(walk.pages, 3, "7 transactions at 3 per page")
        XCTAssertFalse(walk.truncated)
        XCTAssertEqual(walk.transactions.compactMap { H.string($0, "transactionId") }, expected)
        XCTAssertEqual(walk.signedTransactions.count, 7)
        let revision = try XCTUnwrap(walk.revision)

        let page = try client.transactionHistoryPage(transactionId: first.transactionId).value()
        XCTAssertTrue(page.hasMore)
        XCTAssertEqual(page.transactions.count, 3)

        let renewal = try h.store.mutate { try $0.renew(first.originalTransactionId) }
        let since = try client.transactionHistory(transactionId: expected[3], since: revision).value()
        XCTAssertEqual(since.transactions.compactMap { H.string($0, "transactionId") }, [renewal.transactionId],
                       "from the stored revision only what is new")

        let bounded = try h.client(maxPages: 2).transactionHistory(transactionId: first.transactionId).value()
        XCTAssertTrue(bounded.truncated, "the page limit ends the walk")
        XCTAssertEqual(bounded.transactions.count, 6)

        let bad = try client.transactionHistoryPage(transactionId: first.transactionId, revision: "not-a-revision").failure()
        XCTAssertEqual(bad.errorCode, .invalidRequestRevision)
    }

    func testAllSubscriptionStatusesGroupTheCustomersSubscriptionsWithVerifiedRenewalInfo() throws {
        let h = try ServerAPIHarness()
        let vip = try h.subscriber("status-user")
        let music = try h.store.mutate { state in try state.purchase(user: "status-user", appleId: 0, productId: "music.1y", atMs: h.nowMs - 86_400_000) }
        try h.store.mutate { state in _ = try state.refund(music.originalTransactionId, transactionId: music.transactionId, atMs: h.nowMs - 3_600_000) }
        try h.store.mutate { state in try state.setAutoRenew(vip.originalTransactionId, on: false, atMs: h.nowMs - 1000) }
        let client = h.client()

        let all = try client.subscriptionStatuses(transactionId: vip.transactionId).value()
        XCTAssertEqual(all.groups.map(\.subscriptionGroupIdentifier), ["music", "vip"])
        let byGroup = Dictionary(uniqueKeysWithValues: all.groups.map { ($0.subscriptionGroupIdentifier ?? "", $0.lastTransactions) })
        XCTAssertEqual(byGroup["vip"]?.first?.status, .active)
        XCTAssertEqual(byGroup["vip"]?.first?.originalTransactionId, vip.originalTransactionId)
        XCTAssertEqual((byGroup["vip"]?.first?.renewalInfo?.payload["autoRenewStatus"] as? NSNumber)?.intValue, 0)
        XCTAssertEqual(byGroup["music"]?.first?.status, .revoked)
        XCTAssertNotNil(byGroup["music"]?.first?.transaction.payload["revocationDate"])

        let revoked = try client.subscriptionStatuses(transactionId: vip.transactionId, statuses: [.revoked]).value()
        XCTAssertEqual(revoked.groups.map(\.subscriptionGroupIdentifier), ["music"])
    }

    func testRefundHistoryListsExactlyTheRefundedTransactions() throws {
        let h = try ServerAPIHarness(pageSize: 2)
        let first = try h.subscriber("refund-user", daysAgo: 150)
        var all = [first]
        for _ in 0..<4 { all.append(try h.store.mutate { try $0.renew(first.originalTransactionId) }) }
        for t in [all[1], all[3], all[4]] {
            try h.store.mutate { state in _ = try state.refund(first.originalTransactionId, transactionId: t.transactionId, atMs: t.purchaseMs + 1000) }
        }
        let walk = try h.client().refundHistory(transactionId: first.transactionId).value()
        XCTAssertEqual(Set(walk.transactions.compactMap { H.string($0, "transactionId") }), Set([all[1], all[3], all[4]].map(\.transactionId)))
        XCTAssertEqual(walk.pages, 2)
        XCTAssertTrue(walk.transactions.allSatisfy { $0.payload["revocationDate"] != nil })
    }

    func testOrderLookupFindsThePurchaseAndAnswersInvalidForAnUnknownOrder() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("order-user")
        let client = h.client()
        let found = try client.lookUpOrderId(ServerAPIServer.orderId(of: purchase)).value()
        XCTAssertEqual(found.status, .valid)
        XCTAssertEqual(found.transactions.compactMap { H.string($0, "transactionId") }, [purchase.transactionId])
        let missing = try client.lookUpOrderId("SIM424242").value()
        XCTAssertEqual(missing.status, .invalid)
        XCTAssertTrue(missing.transactions.isEmpty)
        XCTAssertEqual(try client.lookUpOrderId("../v1/transactions").failure().kind, .invalidRequest)
    }

    func testConsumptionInformationArrivesWithThePolicyValuesAndAnUnconsentedAnswerIsNeverSent() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("consumption-user", productId: "coins.100")
        let client = h.client()
        let answer = ConsumptionRequest(customerConsented: true, consumptionPercentage: 25_000, deliveryStatus: .delivered,
                                        refundPreference: .grantProrated, sampleContentProvided: false)
        try client.sendConsumptionInformation(transactionId: purchase.transactionId, answer).value()
        let received = h.server.state.consumptionAnswers
        XCTAssertEqual(received.count, 1)
        XCTAssertEqual(received.first?.transactionId, purchase.transactionId)
        XCTAssertEqual(received.first?.body["deliveryStatus"] as? String, "DELIVERED")
        XCTAssertEqual(received.first?.body["refundPreference"] as? String, "GRANT_PRORATED")
        XCTAssertEqual((received.first?.body["consumptionPercentage"] as? NSNumber)?.intValue, 25_000)

        let before = h.requests("PUT")
        let unconsented = ConsumptionRequest(customerConsented: false, deliveryStatus: .delivered, sampleContentProvided: false)
        XCTAssertEqual(try client.sendConsumptionInformation(transactionId: purchase.transactionId, unconsented).failure().kind, .invalidRequest)
        let tooMuch = ConsumptionRequest(customerConsented: true, consumptionPercentage: 100_001, deliveryStatus: .delivered, sampleContentProvided: false)
        XCTAssertEqual(try client.sendConsumptionInformation(transactionId: purchase.transactionId, tooMuch).failure().kind, .invalidRequest)
        XCTAssertEqual(h.requests("PUT"), before, "refused before anything was sent")

        // The simulated Apple holds the rules between the fields as Apple states them.
        let subscription = try h.subscriber("consumption-subscriber")
        let share = ConsumptionRequest(customerConsented: true, consumptionPercentage: 25_000, deliveryStatus: .delivered, sampleContentProvided: false)
        XCTAssertEqual(try client.sendConsumptionInformation(transactionId: subscription.transactionId, share).failure().kind, .permanent,
                       "no percentage for an auto-renewable subscription")
        let undelivered = ConsumptionRequest(customerConsented: true, consumptionPercentage: 5_000, deliveryStatus: .undeliveredOther,
                                             sampleContentProvided: false)
        XCTAssertEqual(try client.sendConsumptionInformation(transactionId: purchase.transactionId, undelivered).failure().kind, .permanent,
                       "undelivered means a percentage of 0")
        let proratedNothing = ConsumptionRequest(customerConsented: true, consumptionPercentage: 0, deliveryStatus: .delivered,
                                                 refundPreference: .grantProrated, sampleContentProvided: false)
        XCTAssertEqual(try client.sendConsumptionInformation(transactionId: purchase.transactionId, proratedNothing).failure().kind, .permanent)
        XCTAssertEqual(h.server.state.consumptionAnswers.count, 1, "none of them was taken")
    }

    func testExtendingARenewalDateMovesTheTruthOnceAndARetriedRequestIsNotAppliedTwice() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("extend-user")
        let client = h.client()
        let request = ExtendRenewalDateRequest(extendByDays: 7, extendReasonCode: .serviceIssueOrOutage, requestIdentifier: "outage-2026-12-01")
        let extended = try client.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, request).value()
        let expected = purchase.expiresMs! + 7 * 86_400_000
        XCTAssertEqual(extended.success, true)
        XCTAssertEqual(extended.effectiveDate, expected)
        XCTAssertEqual(try h.store.read { try $0.subscription(purchase.originalTransactionId).latest?.expiresMs }, expected)

        let again = try client.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, request).value()
        XCTAssertEqual(again.effectiveDate, expected, "same request identifier, same answer, applied once")
        XCTAssertEqual(try h.store.read { try $0.subscription(purchase.originalTransactionId).latest?.expiresMs }, expected)

        let tooLong = ExtendRenewalDateRequest(extendByDays: 91, extendReasonCode: .other, requestIdentifier: "x")
        XCTAssertEqual(try client.extendRenewalDate(originalTransactionId: purchase.originalTransactionId, tooLong).failure().kind, .invalidRequest)
    }

    func testMassExtensionReachesEveryActiveSubscriberOfTheProductAndReportsItsStatus() throws {
        let h = try ServerAPIHarness()
        let active = try (0..<3).map { try h.subscriber("mass-\($0)") }
        let other = try h.subscriber("mass-other", productId: "music.1w")
        _ = try h.subscriber("mass-lapsed", daysAgo: 90)
        let client = h.client()
        let request = MassExtendRenewalDateRequest(extendByDays: 3, extendReasonCode: .customerSatisfaction,
                                                   requestIdentifier: "apology-1", productId: "vip.a.1m")
        XCTAssertEqual(try client.extendRenewalDateForAllActiveSubscribers(request).value(), "apology-1")
        let status = try client.massExtensionStatus(productId: "vip.a.1m", requestIdentifier: "apology-1").value()
        XCTAssertEqual(status.complete, true)
        XCTAssertEqual(status.succeededCount, 3)
        XCTAssertEqual(status.failedCount, 1, "the lapsed subscriber is not eligible")
        for t in active {
            XCTAssertEqual(try h.store.read { try $0.subscription(t.originalTransactionId).latest?.expiresMs }, t.expiresMs! + 3 * 86_400_000)
        }
        XCTAssertEqual(try h.store.read { try $0.subscription(other.originalTransactionId).latest?.expiresMs }, other.expiresMs)
        XCTAssertEqual(try client.massExtensionStatus(productId: "vip.a.1m", requestIdentifier: "nope").failure().errorCode, .statusRequestNotFound)
    }

    func testSetAppAccountTokenChangesWhatApplesTransactionsSay() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("token-user")
        let renewal = try h.store.mutate { try $0.renew(purchase.originalTransactionId) }
        let client = h.client()
        let token = UUID()
        try client.setAppAccountToken(originalTransactionId: purchase.originalTransactionId, appAccountToken: token).value()
        let info = try client.transactionInfo(transactionId: renewal.transactionId).value()
        XCTAssertEqual(H.string(info.transaction, "appAccountToken"), token.uuidString.lowercased())
        let notOriginal = try client.setAppAccountToken(originalTransactionId: renewal.transactionId, appAccountToken: token).failure()
        XCTAssertEqual(notOriginal.errorCode, .transactionIdNotOriginalTransactionId)
    }

    func testNotificationHistoryPagesAndOnlyFailuresReturnsExactlyTheLostNotifications() throws {
        let h = try ServerAPIHarness(pageSize: 3)
        let purchase = try h.subscriber("history-n-user", daysAgo: 40)
        var lost: [String] = []
        var all: [String] = []
        for index in 0..<8 {
            let renewal = try h.store.mutate { try $0.renew(purchase.originalTransactionId, chargeMs: h.nowMs - Int64(30 - index) * 86_400_000) }
            let delivery = try h.store.read { try h.emitter.v2($0, otid: purchase.originalTransactionId, type: "DID_RENEW", transaction: renewal, atMs: renewal.purchaseMs) }
            let delivered = index % 3 != 1
            h.server.state.record(delivery, delivered: delivered)
            let signed = try XCTUnwrap(ServerAPIState.facts(delivery.body)?.signedPayload)
            all.append(signed)
            if !delivered { lost.append(signed) }
        }
        let client = h.client()
        let window = NotificationHistoryRequest(startDate: h.nowMs - 60 * 86_400_000, endDate: h.nowMs)

        let everything = try client.notificationHistory(window).value()
        XCTAssertEqual(everything.entries.map(\.signedPayload), all)
        XCTAssertEqual(everything.pages, 3)
        XCTAssertFalse(everything.truncated)
        XCTAssertTrue(everything.entries.allSatisfy { ($0.notification.payload["notificationType"] as? String) == "DID_RENEW" })

        var failures = window
        failures.onlyFailures = true
        let missed = try client.notificationHistory(failures).value()
        XCTAssertEqual(missed.entries.map(\.signedPayload), lost)
        XCTAssertTrue(missed.entries.allSatisfy(\.neverDelivered))
        XCTAssertEqual(missed.entries.first?.sendAttempts.count, 6, "the first try and Apple's 5 retries")

        var byTransaction = window
        byTransaction.transactionId = purchase.originalTransactionId
        XCTAssertEqual(try client.notificationHistory(byTransaction).value().entries.count, 8)

        XCTAssertEqual(try client.notificationHistoryPage(window, paginationToken: "garbage").failure().errorCode, .invalidPaginationToken)
        let tooOld = NotificationHistoryRequest(startDate: h.nowMs - 181 * 86_400_000, endDate: h.nowMs)
        XCTAssertEqual(try client.notificationHistory(tooOld).failure().kind, .invalidRequest)
        XCTAssertEqual(try client.notificationHistory(window, environment: .sandbox).value().entries.count, 0)
    }

    func testTestNotificationIsSentVerifiedAndItsArrivalIsConfirmed() throws {
        let received = ReceivedDeliveries()
        let h = try ServerAPIHarness { delivery in received.add(delivery); return true }
        let client = h.client()
        let token = try client.requestTestNotification().value()
        let status = try client.testNotificationStatus(token: token).value()
        XCTAssertEqual(status.notification.payload["notificationType"] as? String, "TEST")
        XCTAssertEqual(status.sendAttempts.map(\.sendAttemptResult), [.success])
        XCTAssertEqual(received.all.count, 1)
        XCTAssertEqual(received.all.first.flatMap { ServerAPIState.facts($0.body)?.signedPayload }, status.signedPayload)
        XCTAssertEqual(try client.testNotificationStatus(token: "unknown-token").failure().errorCode, .testNotificationNotFound)
    }

    func testRateLimitIsRetriedAfterExactlyTheRetryAfterAskedAndALongOneIsHandedBack() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("limited-user")
        let client = h.client()
        h.server.state.rateLimit(next: 2, retryAfterSeconds: 3)
        let info = try client.transactionInfo(transactionId: purchase.transactionId).value()
        XCTAssertEqual(H.string(info.transaction, "transactionId"), purchase.transactionId)
        XCTAssertEqual(h.slept.all, [.seconds(3), .seconds(3)])
        XCTAssertEqual(h.requests("GET Production v1/transactions/{id} 429"), 2)

        h.server.state.rateLimit(next: 5, retryAfterSeconds: 600)
        let limited = try client.transactionInfo(transactionId: purchase.transactionId).failure()
        XCTAssertEqual(limited.kind, .retryable)
        XCTAssertEqual(limited.httpStatus, 429)
        XCTAssertEqual(limited.errorCode, .rateLimitExceeded)
        XCTAssertEqual(limited.retryAfterSeconds, 600, "handed back for the caller to schedule")
        XCTAssertEqual(h.slept.all.count, 2, "no in-process wait for ten minutes")

        h.server.state.rateLimit(next: 50, retryAfterSeconds: 0)
        let persistent = try h.client(retry: RetryPolicy(maxAttempts: 3, initialBackoff: .milliseconds(1))).transactionInfo(transactionId: purchase.transactionId).failure()
        XCTAssertEqual(persistent.kind, .retryable)
        XCTAssertTrue(persistent.reason.contains("3 attempts"), persistent.reason)
    }

    func testATokenNotMadeWithTheConfiguredKeyIsRefusedAndNeverShowsInTheFailure() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("auth-user")
        let stranger = APITokenIssuer(keys: try SigningKeyRing(keys: [H.keyId: try P256PrivateKey.generate()]), issuerId: H.issuerId)
        let minted = try stranger.mint(bundleId: h.store.config.bundleId)
        let fixed = FixedToken(APIToken(value: minted.token, expiresAt: minted.expiresAt))
        let refused = try h.client(tokens: fixed).transactionInfo(transactionId: purchase.transactionId).failure()
        XCTAssertEqual(refused.httpStatus, 401)
        XCTAssertEqual(refused.kind, .retryable, "retried, and handed back retryable: a consumption answer waits rather than being dropped")
        XCTAssertEqual(h.server.state.lastAuthProblem, "signature does not verify with the configured key")
        XCTAssertFalse(refused.description.contains(minted.token))
        XCTAssertFalse(refused.description.contains(minted.token.split(separator: ".")[2]))

        let expired = APITokenIssuer(keys: try SigningKeyRing(keys: [H.keyId: h.key]), issuerId: H.issuerId,
                                     clock: { Int64(Date().timeIntervalSince1970) - 3600 })
        let old = try expired.mint(bundleId: h.store.config.bundleId)
        XCTAssertEqual(try h.client(tokens: FixedToken(APIToken(value: old.token, expiresAt: old.expiresAt)))
            .transactionInfo(transactionId: purchase.transactionId).failure().httpStatus, 401)
        XCTAssertEqual(h.server.state.lastAuthProblem, "token expired")

        let otherApp = try h.issuer.mint(bundleId: "com.example.other")
        XCTAssertEqual(try h.client(tokens: FixedToken(APIToken(value: otherApp.token, expiresAt: otherApp.expiresAt)))
            .transactionInfo(transactionId: purchase.transactionId).failure().httpStatus, 401)
        XCTAssertEqual(h.server.state.lastAuthProblem, "bid is not \(h.store.config.bundleId)")
    }

    /// A token Apple refuses is not offered again: the cache drops it and the retry asks for a new
    /// one (a key rotated or an issuer id corrected in the signer takes effect at once).
    func testARefusedTokenIsDroppedFromTheCacheAndTheRetryUsesAFreshOne() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("token-refresh-user")
        let stranger = APITokenIssuer(keys: try SigningKeyRing(keys: [H.keyId: try P256PrivateKey.generate()]), issuerId: H.issuerId)
        let bad = try stranger.mint(bundleId: h.store.config.bundleId)
        let fetched = Mutex<[String]>([])
        let issuer = h.issuer, bundleId = h.store.config.bundleId
        let tokens = CachingTokenProvider { () -> Result<APIToken, APIFailure> in
            let first = fetched.withLock { list in
                list.append(list.isEmpty ? "bad" : "good")
                return list.count == 1
            }
            if first { return .success(APIToken(value: bad.token, expiresAt: bad.expiresAt)) }
            guard let good = try? issuer.mint(bundleId: bundleId) else { return .failure(APIFailure(.noToken, "mint failed")) }
            return .success(APIToken(value: good.token, expiresAt: good.expiresAt))
        }
        let info = try h.client(tokens: tokens).transactionInfo(transactionId: purchase.transactionId).value()
        XCTAssertEqual(H.string(info.transaction, "transactionId"), purchase.transactionId)
        XCTAssertEqual(fetched.withLock { $0 }, ["bad", "good"], "one refusal, one fresh token, then the cached good one")
        _ = try h.client(tokens: tokens).transactionInfo(transactionId: purchase.transactionId).value()
        XCTAssertEqual(fetched.withLock { $0.count }, 2, "the good token stays cached")
    }

    func testAnswersSignedByAnotherChainAreRefusedAsInvalid() throws {
        let h = try ServerAPIHarness()
        let purchase = try h.subscriber("chain-user")
        let foreign = try SimulatorPKI.generate()
        let suspicious = try SignedDataVerifier(roots: [foreign.chain.root.certificate], bundleId: h.store.config.bundleId,
                                                appAppleId: h.store.config.appAppleId, environments: [.production, .sandbox])
        let refused = try h.client(verifier: suspicious).transactionInfo(transactionId: purchase.transactionId).failure()
        XCTAssertEqual(refused.kind, .invalidResponse)
        XCTAssertTrue(refused.reason.contains("does not verify"), refused.reason)
    }

    func testAnAnswerOverTheTransportsByteLimitIsCutOff() throws {
        let h = try ServerAPIHarness(pageSize: 3)
        let first = try h.subscriber("big-user", daysAgo: 100)
        for _ in 0..<3 { _ = try h.store.mutate { try $0.renew(first.originalTransactionId) } }
        let small = h.client(retry: RetryPolicy(maxAttempts: 1), transport: URLSessionAPITransport(maxResponseBytes: 2_000))
        let failure = try small.transactionHistoryPage(transactionId: first.transactionId).failure()
        XCTAssertTrue(failure.reason.contains("limit"), failure.reason)
    }
}

final class FixedToken: APITokenProvider {
    let fixed: APIToken
    init(_ token: APIToken) { fixed = token }
    func token() -> Result<APIToken, APIFailure> { .success(fixed) }
}

final class ReceivedDeliveries: Sendable {
    private let deliveries = Mutex<[Delivery]>([])
    func add(_ delivery: Delivery) { deliveries.withLock { $0.append(delivery) } }
    var all: [Delivery] { deliveries.withLock { $0 } }
}
