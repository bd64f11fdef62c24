import Domain
import Foundation
import Postgres

/// The SQL of StoreLedger's conversations with Apple (migration 5): refresh revisions, consumption
/// answers and support actions. Append-only where it is evidence (answers, actions).
public enum ServerAPIStore {
    // MARK: refresh revisions

    /// The Get Transaction History revision a refresh last read for the subscription.
    public static func revision(_ subscriptionKey: String, db: PGConnection) throws -> String? {
        try db.query("SELECT revision FROM api_revisions WHERE subscription_key = \(subscriptionKey)").first.map { try $0.string("revision") }
    }

    public static func saveRevision(_ subscriptionKey: String, _ revision: String, db: PGConnection) throws {
        _ = try db.execute("""
            INSERT INTO api_revisions (subscription_key, revision) VALUES (\(subscriptionKey), \(revision))
            ON CONFLICT (subscription_key) DO UPDATE SET revision = EXCLUDED.revision, updated_at = now()
            """)
    }

    // MARK: consumption answers

    public struct ConsumptionAnswerRow: Sendable, Equatable, Codable {
        public var subscriptionKey: String
        public var notificationUUID: String
        public var transactionId: String
        public var userId: String?
        public var environment: String?
        public var requestReason: String?
        public var policy: String
        /// JSON: what the policy read from the ledger.
        public var facts: String
        /// JSON: the body sent to Apple; nil when none was sent.
        public var request: String?
        /// sent | not-sent | failed | expired (older than Apple's 12 hours, nothing sent)
        public var outcome: String
        public var detail: String?
        public var requestedMs: Int64?

        public init(subscriptionKey: String, notificationUUID: String, transactionId: String, userId: String?, environment: String?,
                    requestReason: String?, policy: String, facts: String, request: String?, outcome: String, detail: String?,
                    requestedMs: Int64?) {
            self.subscriptionKey = subscriptionKey
            self.notificationUUID = notificationUUID
            self.transactionId = transactionId
            self.userId = userId
            self.environment = environment
            self.requestReason = requestReason
            self.policy = policy
            self.facts = facts
            self.request = request
            self.outcome = outcome
            self.detail = detail
            self.requestedMs = requestedMs
        }
    }

    public static func isAnswered(_ subscriptionKey: String, notificationUUID: String, db: PGConnection) throws -> Bool {
        try !db.query("""
            SELECT 1 AS one FROM consumption_answers WHERE subscription_key = \(subscriptionKey) AND notification_uuid = \(notificationUUID)
            """).isEmpty
    }

    /// Keeps the first answer to a request (a redelivered notification answers nothing new).
    public static func record(_ row: ConsumptionAnswerRow, db: PGConnection) throws {
        _ = try db.execute("""
            INSERT INTO consumption_answers (subscription_key, notification_uuid, transaction_id, user_id, environment, request_reason,
                                             policy, facts, request, outcome, detail, requested_ms)
            VALUES (\(row.subscriptionKey), \(row.notificationUUID), \(row.transactionId), \(row.userId), \(row.environment),
                    \(row.requestReason), \(row.policy), \(PGJSON(row.facts)), \(row.request.map(PGJSON.init)), \(row.outcome), \(row.detail),
                    \(row.requestedMs))
            ON CONFLICT (subscription_key, notification_uuid) DO NOTHING
            """)
    }

    /// A user's consumption answers, newest first (for support and the read API).
    public static func consumptionAnswers(user userId: String, limit: Int, db: PGConnection) throws -> [ConsumptionAnswerRow] {
        try db.query("""
            SELECT subscription_key, notification_uuid, transaction_id, user_id, environment, request_reason, policy, facts::text AS facts,
                   request::text AS request, outcome, detail, requested_ms
            FROM consumption_answers WHERE user_id = \(userId) ORDER BY answered_at DESC LIMIT \(max(1, min(limit, 500)))
            """).map { row in
            ConsumptionAnswerRow(subscriptionKey: try row.string("subscription_key"), notificationUUID: try row.string("notification_uuid"),
                                 transactionId: try row.string("transaction_id"), userId: try row.decode("user_id"),
                                 environment: try row.decode("environment"), requestReason: try row.decode("request_reason"),
                                 policy: try row.string("policy"), facts: try row.string("facts"), request: try row.decode("request"),
                                 outcome: try row.string("outcome"), detail: try row.decode("detail"), requestedMs: try row.decode("requested_ms"))
        }
    }

    // MARK: what the consumption policy reads

    /// The ledger's facts about one purchase and its owner, as the consumption policy needs them.
    public struct PurchaseFacts: Sendable, Equatable, Codable {
        public var userId: String?
        public var productKind: String?
        public var grantedStartMs: Int64?
        public var grantedEndMs: Int64?
        public var cancellationMs: Int64?
        /// The owner's purchases (every subscription period, one-time product, consumable) and refunded ones.
        public var lifetimePurchases: Int
        public var lifetimeRefunds: Int
        public var firstPurchaseMs: Int64?
        /// A free trial or introductory offer was granted in this group before (sample content).
        public var hadTrialOrIntro: Bool
        /// A consumable the ledger credited (it grants units, not time: no granted interval).
        public var credited: Bool = false

        public init(userId: String? = nil, productKind: String? = nil, grantedStartMs: Int64? = nil, grantedEndMs: Int64? = nil,
                    cancellationMs: Int64? = nil, lifetimePurchases: Int = 0, lifetimeRefunds: Int = 0, firstPurchaseMs: Int64? = nil,
                    hadTrialOrIntro: Bool = false) {
            self.userId = userId
            self.productKind = productKind
            self.grantedStartMs = grantedStartMs
            self.grantedEndMs = grantedEndMs
            self.cancellationMs = cancellationMs
            self.lifetimePurchases = lifetimePurchases
            self.lifetimeRefunds = lifetimeRefunds
            self.firstPurchaseMs = firstPurchaseMs
            self.hadTrialOrIntro = hadTrialOrIntro
        }
    }

    /// nil when the ledger has no grant for the transaction (nothing was delivered).
    public static func purchaseFacts(subscriptionKey: String, transactionId: String, db: PGConnection) throws -> PurchaseFacts? {
        let grant = try db.query("""
            SELECT g.user_id, g.group_id, g.product_kind, g.granted_start_ms, g.granted_end_ms, g.cancellation_ms
            FROM grants g
            WHERE g.subscription_key = \(subscriptionKey)
              AND (g.transaction_id = \(transactionId)
                   OR g.purchase_id IN (SELECT purchase_id FROM transaction_aliases
                                        WHERE subscription_key = \(subscriptionKey) AND transaction_id = \(transactionId)))
            LIMIT 1
            """).first
        guard let grant else { return nil }
        var facts = PurchaseFacts(userId: try grant.decode("user_id"), productKind: try grant.decode("product_kind"),
                                  grantedStartMs: try grant.decode("granted_start_ms"), grantedEndMs: try grant.decode("granted_end_ms"),
                                  cancellationMs: try grant.decode("cancellation_ms"))
        let group: String = try grant.string("group_id")
        if facts.productKind == ProductKind.consumable.rawValue {
            facts.credited = try db.query("""
                SELECT 1 FROM ledger l JOIN grants g ON g.subscription_key = l.subscription_key AND g.purchase_id = l.purchase_id
                WHERE l.subscription_key = \(subscriptionKey) AND l.kind = \(LedgerEntry.Kind.credit.rawValue)
                  AND (g.transaction_id = \(transactionId)
                       OR g.purchase_id IN (SELECT purchase_id FROM transaction_aliases
                                            WHERE subscription_key = \(subscriptionKey) AND transaction_id = \(transactionId)))
                LIMIT 1
                """).first != nil
        }
        // The owner's history when the subscription is linked to a user, else this subscription's.
        let scope: SQL = facts.userId.map { "user_id = \($0)" } ?? "subscription_key = \(subscriptionKey)"
        if let totals = try db.query("""
            SELECT count(*)::bigint AS purchases,
                   count(*) FILTER (WHERE cancellation_ms IS NOT NULL AND cut_kind IN ('refund', 'revoke'))::bigint AS refunds,
                   min(purchase_ms) AS first_ms,
                   bool_or((is_trial OR is_intro) AND group_id = \(group)) AS sampled
            FROM grants WHERE \(fragment: scope) AND cut_kind IS DISTINCT FROM \(Cut.Kind.correction.rawValue)
            """).first {
            facts.lifetimePurchases = Int(try totals.int64("purchases"))
            facts.lifetimeRefunds = Int(try totals.int64("refunds"))
            facts.firstPurchaseMs = try totals.decode("first_ms")
            facts.hadTrialOrIntro = try totals.decode("sampled", as: Bool?.self) ?? false
        }
        return facts
    }

    // MARK: support actions

    public static func recordSupportAction(target: String, kind: String, admin: String, reason: String, request: String, outcome: String,
                                           db: PGConnection) throws {
        _ = try db.execute("""
            INSERT INTO support_actions (target, kind, admin, reason, request, outcome)
            VALUES (\(target), \(kind), \(admin), \(reason), \(PGJSON(request)), \(PGJSON(outcome)))
            """)
    }

    /// One recorded support action, as `storeledger support history` prints it.
    public struct SupportActionRow: Sendable, Equatable, Encodable {
        public var target: String
        public var actionId: Int64
        public var kind: String
        public var admin: String
        public var reason: String
        /// JSON: what was sent to Apple, and Apple's outcome.
        public var request: String
        public var outcome: String
        public var createdAt: String
    }

    /// The support actions recorded for `target` (all targets when nil), newest first.
    public static func supportActions(target: String?, limit: Int, db: PGConnection) throws -> [SupportActionRow] {
        let scope: SQL = target.map { "WHERE target = \($0)" } ?? ""
        return try db.query("""
            SELECT target, action_id, kind, admin, reason, request::text AS request, outcome::text AS outcome, created_at::text AS created_at
            FROM support_actions \(fragment: scope) ORDER BY created_at DESC, action_id DESC LIMIT \(max(1, limit))
            """).map { row in
            SupportActionRow(target: try row.string("target"), actionId: try row.int64("action_id"), kind: try row.string("kind"),
                             admin: try row.string("admin"), reason: try row.string("reason"), request: try row.string("request"),
                             outcome: try row.string("outcome"), createdAt: try row.string("created_at"))
        }
    }
}
