import Domain
import Foundation
import Postgres

/// Loads an account's purchase history for offer eligibility: every subscription linked to the
/// user (one per Apple ID), decoded through the Domain types so a schema change shows at compile
/// time. Thin on purpose: the rules live in OfferEligibility.
struct OfferHistoryReader: Sendable {
    let pool: PGPool

    func history(user: String) throws -> OfferHistory {
        try pool.withConnection { db in
            let decoder = JSONDecoder()
            let rows = try db.query("SELECT state::text AS state FROM subscriptions WHERE user_id = \(user) ORDER BY subscription_key")
            return OfferHistory(states: try rows.map { try decoder.decode(SubscriptionState.self, from: Data(try $0.string("state").utf8)) })
        }
    }

    /// The users whose linked subscriptions know `transactionId` (empty: nobody's yet, such as a
    /// purchase on a new Apple ID not reported so far).
    func owners(transaction transactionId: String) throws -> Set<String> {
        try pool.withConnection { db in
            let rows = try db.query("""
                SELECT DISTINCT s.user_id FROM transaction_aliases a JOIN subscriptions s ON s.subscription_key = a.subscription_key
                WHERE a.transaction_id = \(transactionId) AND s.user_id IS NOT NULL
                """)
            return Set(try rows.map { try $0.string("user_id") })
        }
    }
}
