import AppStoreServerAPI
import AppleDecoding
import Configuration
import Domain
import Foundation
import Kafka
import Postgres
@testable import Simulator
@testable import Stages
import Synchronization
import Store
import XCTest

/// Pure pieces of refresh and consumption answers: the server-api record Apple's answers travel
/// in (chunked, verified item by item, one event per subscription, stated when Apple signed), and
/// the consumption policy's values and thresholds.
final class RefreshAndConsumptionLogicTests: XCTestCase {
    typealias H = ServerAPIHarness

    func testServerAPIRecordsAreVerifiedGroupedPerSubscriptionAndBounded() throws {
        let h = try ServerAPIHarness(pageSize: 20)
        let first = try h.subscriber("refresh-user", daysAgo: 70)
        _ = try h.store.mutate { try $0.renew(first.originalTransactionId) }
        let walk = try h.client().transactionHistory(transactionId: first.transactionId).value()
        let statuses = try h.client().subscriptionStatuses(transactionId: first.transactionId).value()
        let last = statuses.groups.flatMap(\.lastTransactions)
        let records = ServerAPIRecord.chunks(transactions: walk.signedTransactions + last.map(\.signedTransactionInfo),
                                             renewalInfos: last.compactMap(\.signedRenewalInfo))
        XCTAssertEqual(records.count, 1)
        let body = [UInt8](try JSONEncoder().encode(records[0]))
        let decoder = ServerAPIRecordDecoder(verifier: h.verifier)
        let events = try decoder.decode(body: body, receivedAtMs: 1, rawPosition: nil).get()
        XCTAssertEqual(events.count, 1, "one subscription, one event")
        let event = try XCTUnwrap(events.first)
        XCTAssertEqual(event.source, .serverAPI)
        XCTAssertEqual(event.provenance, "server-api")
        XCTAssertEqual(event.subscriptionKey, first.originalTransactionId)
        XCTAssertNil(event.notification, "facts only, like a receipt")
        XCTAssertEqual(Set(event.transactions.map(\.transactionId)).count, 2)
        XCTAssertEqual(event.renewalInfo?.originalTransactionId, first.originalTransactionId)
        XCTAssertGreaterThanOrEqual(try XCTUnwrap(event.statedAtMs), h.nowMs, "stated when Apple signed the answer")
        XCTAssertEqual(try decoder.decode(body: body, receivedAtMs: 1, rawPosition: nil).get().map(\.eventId), events.map(\.eventId),
                       "the same record decodes to the same ids")

        // One altered item refuses the record; so do too many items and a foreign shape.
        var tampered = records[0]
        let parts = tampered.signedTransactions[0].split(separator: ".")
        tampered.signedTransactions[0] = parts[0] + "." + Base64URLText.flip(String(parts[1])) + "." + parts[2]
        XCTAssertThrowsError(try decoder.decode(body: [UInt8](try JSONEncoder().encode(tampered)), receivedAtMs: 1, rawPosition: nil).get())
        let many = ServerAPIRecord(signedTransactions: Array(repeating: walk.signedTransactions[0], count: ServerAPIRecord.maxItems + 1),
                                   signedRenewalInfos: [])
        XCTAssertEqual(decoder.decode(body: [UInt8](try JSONEncoder().encode(many)), receivedAtMs: 1, rawPosition: nil).failureKind, "too_many_items")
        XCTAssertEqual(decoder.decode(body: Array(#"{"signedPayload":"x"}"#.utf8), receivedAtMs: 1, rawPosition: nil).failureKind, "invalid_json")

        let chunks = ServerAPIRecord.chunks(transactions: Array(repeating: "t", count: 450), renewalInfos: ["r"])
        XCTAssertEqual(chunks.map { $0.signedTransactions.count + $0.signedRenewalInfos.count }, [200, 200, 51])
        // Apple's items are ~5 KB (the x5c chain in each header): 200 of them would pass the broker's
        // limit, so records are cut by size too, each under it, nothing lost and the order kept.
        let appleSized = (0..<450).map { "t\($0)." + String(repeating: "x", count: 5_100) }
        let sized = ServerAPIRecord.chunks(transactions: appleSized, renewalInfos: ["r"])
        XCTAssertLessThan(sized[0].signedTransactions.count, ServerAPIRecord.maxItems, "cut by size before the count")
        XCTAssertLessThanOrEqual(ServerAPIRecord.maxRecordBytes, KafkaLimits.maxValueBytes)
        for record in sized {
            XCTAssertLessThanOrEqual(try JSONEncoder().encode(record).count, ServerAPIRecord.maxRecordBytes)
        }
        XCTAssertEqual(sized.flatMap(\.signedTransactions), appleSized)
        XCTAssertEqual(sized.flatMap(\.signedRenewalInfos), ["r"])
    }

    /// A CONSUMPTION_REQUEST that reached the decoded topic without passing decode's bounds (here a
    /// signed date of Int64.min, which trapped the policy's arithmetic) is dead-lettered before anything
    /// is looked up or sent; other events are not this stage's to refuse.
    func testConsumptionStageDeadLettersARequestOutOfBoundsBeforeAnsweringIt() throws {
        let sent = Mutex(0)
        let stage = ConsumptionStage(policy: ConsumptionPolicy()) { _, _, _ in
            sent.withLock { $0 += 1 }
            return .success(())
        }
        func record(_ type: String, signedDateMs: Int64) -> KafkaRecord {
            let transaction = TransactionFacts(transactionId: "t1", originalTransactionId: "o1", productId: "vip.a.1m",
                                               purchaseDateMs: 1_735_689_600_000)
            let event = AppleEvent(eventId: "v2:\(type)", source: .notificationV2, environment: "Sandbox", bundleId: "com.example",
                                   subscriptionKey: "o1@Sandbox",
                                   notification: NotificationMeta(type: type, uuid: "u-\(type)", signedDateMs: signedDateMs),
                                   transactions: [transaction], receivedAtMs: 1_735_689_600_000)
            return KafkaRecord(topic: Topic.decoded, partition: 0, offset: 0, key: Array("o1@Sandbox".utf8),
                               value: TopicRecords.encode(event), headers: [], timestamp: 0)
        }
        let result = try stage.process([record("CONSUMPTION_REQUEST", signedDateMs: .min), record("DID_RENEW", signedDateMs: .min)], database: nil)
        XCTAssertEqual(result.deadLetters.map(\.errorKind), ["date_out_of_range"])
        XCTAssertEqual(sent.withLock { $0 }, 0)
    }

    /// Apple or the signer out of reach is an outage the consumption stage waits out (Apple allows
    /// 12 hours), never a dead letter after a few retries; Apple's refusal of the request is final.
    func testAnAppleOutageIsWaitedOutAndARefusalIsNot() {
        func isOutage(_ failure: APIFailure) -> Bool {
            if case .infrastructure = StageFailure.classify(failure) { return true }
            return false
        }
        XCTAssertTrue(isOutage(APIFailure(.retryable, "App Store Server API failed", httpStatus: 503)))
        XCTAssertTrue(isOutage(APIFailure(.retryable, "bearer token refused", httpStatus: 401)))
        XCTAssertTrue(isOutage(APIFailure(.noToken, "the signer did not answer")))
        XCTAssertFalse(isOutage(APIFailure(.permanent, "refused", httpStatus: 400)))
        // A Retry-After longer than the client waits in-process: the loop's outage waits that long.
        var limited = APIFailure(.retryable, "rate limited", httpStatus: 429)
        limited.retryAfterSeconds = 600
        XCTAssertEqual(StageFailure.classify(limited), .throttled(limited.description, retryAfterMs: 600_000))
        limited.retryAfterSeconds = 0
        XCTAssertTrue(isOutage(limited))
        // A purchase the ledger does not know yet is waited for a little, then told undelivered.
        XCTAssertTrue(ConsumptionStage.awaitsLedger(factsFound: false, requestedAtMs: 1_000_000, nowMs: 1_000_000 + 2_000))
        XCTAssertFalse(ConsumptionStage.awaitsLedger(factsFound: false, requestedAtMs: 1_000_000, nowMs: 1_000_000 + ConsumptionStage.ledgerSettleMs))
        XCTAssertFalse(ConsumptionStage.awaitsLedger(factsFound: true, requestedAtMs: 1_000_000, nowMs: 1_000_000))
        XCTAssertFalse(ConsumptionStage.awaitsLedger(factsFound: false, requestedAtMs: .min, nowMs: .max), "saturates, never traps")
        if case .infrastructure = StageFailure.classify(ConsumptionStage.AwaitingLedger(transactionId: "1")) {} else {
            XCTFail("waiting for the ledger holds the batch, never dead-letters it")
        }
    }

    /// An admin's refresh that failed answers by why: an id Apple's API cannot take is 400, an id
    /// Apple does not know 404, Apple out of reach (or anything else) 502.
    func testAFailedRefreshAnswersByItsCause() {
        XCTAssertEqual(TransactionRefresh.status(of: APIFailure(.invalidRequest, "not a plain id")), 400)
        XCTAssertEqual(TransactionRefresh.status(of: APIFailure(.permanent, "Transaction id not found.", httpStatus: 404)), 404)
        XCTAssertEqual(TransactionRefresh.status(of: APIFailure(.permanent, "refused", httpStatus: 401)), 502)
        XCTAssertEqual(TransactionRefresh.status(of: APIFailure(.retryable, "unavailable", httpStatus: 503)), 502)
    }

    /// PostgreSQL's SQLSTATE decides the class: a value the server rejects is the record's fault; a
    /// server out of disk, memory or connections, failing I/O or read-only is an outage (wait, never
    /// dead-letter); a conflict (a unique key written meanwhile included) may pass on a retry.
    func testPostgreSQLFailuresAreClassedByTheirState() {
        func classOf(_ state: String, constraint: String? = nil) -> String {
            switch StageFailure.classify(PGError(kind: .server, sqlState: state, message: "m", constraint: constraint)) {
            case .permanent: "permanent"
            case .infrastructure: "infrastructure"
            case .retryable: "retryable"
            case .critical: "critical"
            default: "other"
            }
        }
        for state in ["22001", "22P02", "23502", "23514", "23505"] { XCTAssertEqual(classOf(state), "permanent", state) }
        for state in ["08006", "57P01", "57014", "53100", "53200", "53300", "58030", "25006"] {
            XCTAssertEqual(classOf(state), "infrastructure", state)
        }
        XCTAssertEqual(classOf("40001"), "retryable")
        // A key another transaction wrote since the batch read found none: the retry reads it. The ledger's
        // change identity written twice is refused for good.
        XCTAssertEqual(classOf("23505", constraint: "seen_events_pkey"), "retryable")
        XCTAssertEqual(classOf("23505", constraint: "grants_pkey"), "retryable")
        XCTAssertEqual(classOf("23505", constraint: "ledger_change"), "permanent")
        XCTAssertEqual(classOf("42P01"), "critical")
    }

    func testConsumptionPolicyValuesFollowTheLedgerAndTheThresholds() throws {
        let policy = ConsumptionPolicy()
        let day: Int64 = 86_400_000
        let facts = ServerAPIStore.PurchaseFacts(userId: "u", productKind: "non-renewing", grantedStartMs: 0, grantedEndMs: 30 * day,
                                                 lifetimePurchases: 3, lifetimeRefunds: 0, firstPurchaseMs: -60 * day, hadTrialOrIntro: true)
        func request(at ms: Int64, _ facts: ServerAPIStore.PurchaseFacts? = nil, _ policy: ConsumptionPolicy = ConsumptionPolicy(),
                     autoRenewable: Bool = false) -> ConsumptionRequest? {
            policy.request(for: policy.assess(facts, requestedAtMs: ms), autoRenewable: autoRenewable)
        }
        let assessment = policy.assess(facts, requestedAtMs: 10 * day)
        XCTAssertEqual(assessment.consumedMilliPercent, 33_333)
        XCTAssertEqual(assessment.accountTenureDays, 70)
        XCTAssertEqual(request(at: 10 * day, facts)?.refundPreference, "GRANT_PRORATED")
        XCTAssertEqual(request(at: 10 * day, facts)?.sampleContentProvided, true)
        XCTAssertEqual(request(at: 2 * day, facts)?.refundPreference, "GRANT_FULL", "under 10 %")
        XCTAssertEqual(request(at: 15 * day, facts)?.refundPreference, "DECLINE", "50 % and more")
        XCTAssertEqual(request(at: 90 * day, facts)?.consumptionPercentage, 100_000, "clamped to the period")
        XCTAssertEqual(request(at: -5 * day, facts)?.consumptionPercentage, 0)
        // Dates at the ends of Int64 (a record that skipped decode's bounds) saturate, never trap.
        XCTAssertEqual(policy.assess(facts, requestedAtMs: .min).accountTenureDays, 0)
        var ancient = facts
        ancient.firstPurchaseMs = .min
        XCTAssertEqual(policy.assess(ancient, requestedAtMs: .max).accountTenureDays, Int(Int64.max / day))
        var refunder = facts
        refunder.lifetimeRefunds = 2
        XCTAssertEqual(request(at: 1 * day, refunder)?.refundPreference, "DECLINE", "after two refunds")
        let undelivered = request(at: 1 * day, nil)
        XCTAssertEqual(undelivered?.deliveryStatus, "UNDELIVERED_OTHER")
        XCTAssertEqual(undelivered?.refundPreference, "GRANT_FULL")
        var oneTime = facts
        oneTime.grantedEndMs = nil
        XCTAssertNil(request(at: 1 * day, oneTime)?.consumptionPercentage, "no share for a purchase without a period")
        XCTAssertNil(request(at: 1 * day, oneTime)?.refundPreference)
        // A consumable grants units, not time: credited by the ledger is delivered; not credited is not.
        var coins = ServerAPIStore.PurchaseFacts(userId: "u", productKind: "consumable", lifetimePurchases: 1)
        XCTAssertEqual(request(at: 1 * day, coins)?.deliveryStatus, "UNDELIVERED_OTHER")
        coins.credited = true
        XCTAssertEqual(request(at: 1 * day, coins)?.deliveryStatus, "DELIVERED")
        XCTAssertNotEqual(request(at: 1 * day, coins)?.refundPreference, "GRANT_FULL")

        // Apple refuses a percentage for an auto-renewable subscription (it works the share out
        // itself); the preference still follows the ledger's share.
        let renewing = request(at: 10 * day, facts, autoRenewable: true)
        XCTAssertNil(renewing?.consumptionPercentage)
        XCTAssertEqual(renewing?.refundPreference, "GRANT_PRORATED")
        XCTAssertNil(request(at: 1 * day, nil, autoRenewable: true)?.consumptionPercentage, "undelivered subscription: no percentage either")
        XCTAssertEqual(undelivered?.consumptionPercentage, 0, "undelivered one-time or non-renewing purchase: 0, as Apple requires")
        // GRANT_PRORATED needs a share above 0 where a share is stated.
        var proratingFromZero = ConsumptionPolicy()
        proratingFromZero.grantFullBelowPercent = 0
        XCTAssertEqual(request(at: -5 * day, facts, proratingFromZero)?.refundPreference, "GRANT_FULL")
        XCTAssertEqual(request(at: -5 * day, facts, proratingFromZero, autoRenewable: true)?.refundPreference, "GRANT_PRORATED")

        var withoutConsent = ConsumptionPolicy()
        withoutConsent.customerConsented = false
        XCTAssertNil(request(at: 10 * day, facts, withoutConsent), "nothing is sent without consent")
        for case let sent? in [request(at: 10 * day, facts), undelivered] { XCTAssertNil(sent.problem) }

        let configured = try consumptionPolicy(["STORELEDGER_CONSUMPTION_DECLINE_FROM_PERCENT": "30",
                                                                "STORELEDGER_CONSUMPTION_CONSENT": "false"])
        XCTAssertEqual(configured.declineFromPercent, 30)
        XCTAssertFalse(configured.customerConsented)
        XCTAssertThrowsError(try consumptionPolicy(["STORELEDGER_CONSUMPTION_DECLINE_FROM_PERCENT": "101"]))
        XCTAssertThrowsError(try consumptionPolicy(["STORELEDGER_CONSUMPTION_GRANT_FULL_BELOW_PERCENT": "60"]),
                             "the grant-full threshold above the decline one")
    }
}

private extension Result where Failure == PermanentFailure {
    var failureKind: String? { if case .failure(let failure) = self { return failure.kind } else { return nil } }
}

/// Changes one character of a base64url text so its signature no longer matches.
enum Base64URLText {
    static func flip(_ text: String) -> String {
        var characters = Array(text)
        let index = characters.count / 2
        characters[index] = characters[index] == "A" ? "B" : "A"
        return String(characters)
    }
}

/// The consumption policy as `storeledger worker consumption` reads it from an environment.
private func consumptionPolicy(_ environment: [String: String]) throws -> ConsumptionPolicy {
    try ConsumptionPolicy(ConfigurationReader.read(environment, ConsumptionConfiguration.init))
}
