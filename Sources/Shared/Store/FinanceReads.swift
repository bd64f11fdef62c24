import Domain
import Foundation
import Postgres

/// Reads of the finance facts (the `finance_transactions` view) for `storeledger report`.
public struct FinanceReads {
    let db: PGConnection
    public init(_ db: PGConnection) { self.db = db }

    /// Purchases made, cut or granted within `[fromMs, toMs)`. `wholeHistories`: every purchase of
    /// the subscriptions that have one there, whenever made (metrics: whether a purchase is a
    /// subscription's first, or its last before a lapse, must not depend on where a report starts).
    public func transactions(fromMs: Int64, toMs: Int64, wholeHistories: Bool = false) throws -> [FinanceTransaction] {
        let counted: SQL = "purchase_ms IS NOT NULL AND cut_kind IS DISTINCT FROM \(Cut.Kind.correction.rawValue)"  // taken back by a replay: no purchase
        let touching: SQL = """
            ((purchase_ms >= \(fromMs) AND purchase_ms < \(toMs)) OR (cancellation_ms >= \(fromMs) AND cancellation_ms < \(toMs))
             OR (granted_end_ms > \(fromMs) AND granted_start_ms < \(toMs)) OR (expires_ms > \(fromMs) AND purchase_ms < \(toMs)))
            """
        let selected: SQL = wholeHistories
            ? "subscription_key IN (SELECT subscription_key FROM finance_transactions WHERE \(fragment: counted) AND \(fragment: touching))"
            : touching
        return try db.query("""
            SELECT subscription_key, purchase_id, product_id, coalesce(product_kind, 'unknown') AS product_kind, group_id, environment,
                   purchase_ms, expires_ms, cancellation_ms, cut_kind, is_trial, is_intro, promotional_offer_id, offer_code_ref_name,
                   offer_type, offer_identifier, offer_discount_type, price_milli, currency, is_renewal, duration_days,
                   granted_start_ms, granted_end_ms,
                   coalesce((SELECT p.state->'facts'->>'inAppOwnershipType' = 'FAMILY_SHARED' FROM purchases p
                             WHERE p.subscription_key = f.subscription_key AND p.purchase_id = f.purchase_id), false) AS family_shared
            FROM finance_transactions f
            WHERE \(fragment: counted) AND \(fragment: selected)
            ORDER BY subscription_key, purchase_ms, purchase_id
            """).map { row in
            FinanceTransaction(
                subscriptionKey: try row.string("subscription_key"), purchaseId: try row.string("purchase_id"),
                productId: try row.string("product_id"), productKind: try row.string("product_kind"), group: try row.string("group_id"),
                environment: try row.string("environment"), purchaseMs: try row.int64("purchase_ms"),
                expiresMs: try row.decode("expires_ms"), cancellationMs: try row.decode("cancellation_ms"),
                cutKind: try row.decode("cut_kind"), isTrial: try row.bool("is_trial"), isIntro: try row.bool("is_intro"),
                promotionalOfferId: try row.decode("promotional_offer_id"), offerCodeRefName: try row.decode("offer_code_ref_name"),
                offerType: try row.decode("offer_type"), offerIdentifier: try row.decode("offer_identifier"),
                offerDiscountType: try row.decode("offer_discount_type"), priceMilli: try row.decode("price_milli"),
                currency: try row.decode("currency"), isRenewal: try row.bool("is_renewal"), durationDays: try row.decode("duration_days"),
                grantedStartMs: try row.decode("granted_start_ms"), grantedEndMs: try row.decode("granted_end_ms"),
                isFamilyShared: try row.bool("family_shared"))
        }
    }

    /// Each subscription's latest renewal facts, for churn.
    public func renewalStandings(_ keys: [String]) throws -> [String: RenewalStanding] {
        guard !keys.isEmpty else { return [:] }
        var standings: [String: RenewalStanding] = [:]
        for row in try db.query("""
            SELECT subscription_key, (renewal->>'autoRenewStatus')::boolean AS on,
                   (renewal->>'isInBillingRetry')::boolean AS retry, renewal->>'expirationIntent' AS intent
            FROM (SELECT subscription_key, (state->'renewal')::jsonb AS renewal  -- a json state: parsed once, not per member
                  FROM subscriptions WHERE subscription_key = ANY(\(keys))) s
            """) {
            standings[try row.string("subscription_key")] = RenewalStanding(
                autoRenewStatus: try row.decode("on"), isInBillingRetry: try row.decode("retry"), expirationIntent: try row.decode("intent"))
        }
        return standings
    }
}
