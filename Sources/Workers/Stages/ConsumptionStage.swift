import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
import Synchronization

/// Consumption answers: reads the decoded topic (its own consumer group) for CONSUMPTION_REQUEST
/// notifications, computes the answer from the ledger with `ConsumptionPolicy`, sends it to Apple
/// (Send Consumption Information) and records it in `consumption_answers` at once, on a connection
/// of its own: a batch held for a later request (an outage, a purchase not in the ledger yet) is
/// rolled back and tried again, and must not send the answers it already sent a second time. One
/// answer per notificationUUID: Apple's retries and redeliveries answer nothing new. Apple
/// unreachable, rate limiting, a refused token or no token from the signer is an outage the loop
/// waits out with the batch held (StageFailure); Apple's refusal of the answer itself is recorded as
/// `failed` with Apple's reason; a request older than Apple's 12 hours is recorded `expired`, unsent.
public struct ConsumptionStage: StageLogic {
    /// How long after Apple asked a purchase the ledger does not know may still be on its way
    /// (dedupe, classify and membership run behind this stage; a recovery pass feeds a lost purchase
    /// and Apple's request together; under load the path takes tens of seconds). Only after it is
    /// "undelivered" told: Apple allows 12 hours, and the first answer is the one Apple keeps.
    static let ledgerSettleMs: Int64 = 60_000

    /// The purchase is not in the ledger yet and may still arrive: the batch waits (an outage for
    /// the consumer loop, so nothing is dead-lettered) and is tried again.
    struct AwaitingLedger: Error, CustomStringConvertible {
        let transactionId: String
        var description: String { "transaction \(transactionId) is not in the ledger yet; answering Apple once it is, or once it cannot be" }
    }

    static func awaitsLedger(factsFound: Bool, requestedAtMs: Int64, nowMs: Int64) -> Bool {
        !factsFound && nowMs.saturatingSubtracting(requestedAtMs) < ledgerSettleMs
    }

    /// Apple takes consumption information for 12 hours after it asked.
    static let answerWindowMs: Int64 = 12 * 3_600_000

    static func tooLate(requestedAtMs: Int64, nowMs: Int64) -> Bool {
        nowMs.saturatingSubtracting(requestedAtMs) > answerWindowMs
    }

    public typealias Send = @Sendable (_ transactionId: String, _ request: ConsumptionRequest, _ environment: AppStoreEnvironment)
        -> Result<Void, APIFailure>

    public let name = "consumption"
    public let inputTopics = [Topic.decoded]
    public let usesDatabase = true
    let policy: ConsumptionPolicy
    let send: Send
    /// Where answers are recorded the moment they are sent (nil: in the batch's transaction, tests).
    private let answers: AnswerLog?

    public init(policy: ConsumptionPolicy, databaseURL: String? = nil, send: @escaping Send) {
        self.policy = policy
        self.send = send
        answers = databaseURL.map(AnswerLog.init)
    }

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        var result = StageBatchResult()
        for record in records {
            guard let event = try? TopicRecords.decodeAppleEvent(record.value) else {
                result.deadLetters.append(DeadLetter(stage: name, record: record, failure: PermanentFailure("invalid_event", "not an AppleEvent")))
                continue
            }
            guard event.notification?.type == NotificationTypeV2.consumptionRequest.rawValue, let uuid = event.notification?.uuid,
                  let transaction = event.transactions.last else { continue }
            // Checked again here, as dedupe does: a record can reach the decoded topic without passing
            // decode. Only the requests this stage acts on: dedupe dead-letters every other event.
            if let failure = EventBounds.check(event) {
                result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                continue
            }
            guard let database else { throw ConsumptionPolicyError("the consumption stage needs PostgreSQL") }
            try answer(event, uuid: uuid, transaction: transaction, database)
        }
        return result
    }

    private func answer(_ event: AppleEvent, uuid: String, transaction: TransactionFacts, _ db: PGConnection) throws {
        let key = event.subscriptionKey
        guard try !ServerAPIStore.isAnswered(key, notificationUUID: uuid, db: db) else { return }
        let requestedAt = event.notification?.signedDateMs ?? event.receivedAtMs
        let now = currentTimeMs()
        let facts = try ServerAPIStore.purchaseFacts(subscriptionKey: key, transactionId: transaction.transactionId, db: db)
        // The purchase may be on its way behind this stage since the request reached us: a recovery
        // pass feeds a lost purchase and Apple's hours-old request together.
        if Self.awaitsLedger(factsFound: facts != nil, requestedAtMs: max(requestedAt, event.receivedAtMs), nowMs: now) {
            throw AwaitingLedger(transactionId: transaction.transactionId)
        }
        let assessment = policy.assess(facts, requestedAtMs: requestedAt)
        let kind = facts?.productKind.flatMap(ProductKind.init(rawValue:)) ?? inferredKind(transaction)
        let request = policy.request(for: assessment, autoRenewable: kind == .autoRenewable)
        var outcome = "not-sent", detail: String? = "the policy records no customer consent"
        if request != nil, Self.tooLate(requestedAtMs: requestedAt, nowMs: now) {
            outcome = "expired"
            detail = "Apple asked at \(TimeText.iso(requestedAt)); it takes answers for 12 hours"
            Metrics.shared.increment("storeledger_consumption_answers_total", ["outcome": "expired"])
        } else if let request {
            guard let environment = AppStoreEnvironment(lenient: event.environment) else {
                throw ConsumptionPolicyError("unknown environment \(event.environment)")
            }
            switch send(transaction.transactionId, request, environment) {
            case .success:
                outcome = "sent"
                detail = nil
                Metrics.shared.increment("storeledger_consumption_answers_total", ["outcome": "sent"])
            case .failure(let failure) where failure.kind == .retryable || failure.kind == .noToken:
                Metrics.shared.increment("storeledger_consumption_answers_total", ["outcome": "retry"])
                throw failure
            case .failure(let failure):
                outcome = "failed"
                detail = failure.description
                Metrics.shared.increment("storeledger_consumption_answers_total", ["outcome": "failed"])
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let row = ServerAPIStore.ConsumptionAnswerRow(
            subscriptionKey: key, notificationUUID: uuid, transactionId: transaction.transactionId, userId: facts?.userId,
            environment: event.environment, requestReason: event.notification?.consumptionRequestReason, policy: policy.name,
            facts: String(decoding: try encoder.encode(assessment), as: UTF8.self),
            request: try request.map { String(decoding: try encoder.encode($0), as: UTF8.self) },
            outcome: outcome, detail: detail, requestedMs: requestedAt)
        if let answers { try answers.record(row) } else { try ServerAPIStore.record(row, db: db) }
    }
}

/// The consumption stage's own connection, outside the batch's transaction: an answer Apple has is
/// committed the moment it was sent.
// @unchecked: the connection is touched only inside `lock`.
private final class AnswerLog: @unchecked Sendable {
    let url: String
    private var db: PGConnection?
    private let lock = Mutex(())

    init(_ url: String) { self.url = url }

    func record(_ row: ServerAPIStore.ConsumptionAnswerRow) throws {
        try lock.withLock { _ in
            if db == nil || db?.isBroken == true { db = try PGConnection(url: url) }
            do {
                try ServerAPIStore.record(row, db: db!)
            } catch {
                if db?.isBroken == true { db = nil }
                throw error
            }
        }
    }
}
