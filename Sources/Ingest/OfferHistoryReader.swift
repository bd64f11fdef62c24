import Domain
import Postgres
import Store

/// Loads an account's purchase history for offer eligibility: every subscription linked to the
/// user (one per Apple ID), decoded through the Domain types so a schema change shows at compile
/// time. Thin on purpose: the rules live in OfferEligibility.
struct OfferHistoryReader: Sendable {
    let pool: PGPool

    func history(user: String) throws -> OfferHistory {
        try pool.withConnection { OfferHistory(states: try MembershipQueries($0).subscriptions(ofUser: user)) }
    }

    /// The users whose linked subscriptions know `transactionId` (empty: nobody's yet, such as a
    /// purchase on a new Apple ID not reported so far).
    func owners(transaction transactionId: String) throws -> Set<String> {
        try pool.withConnection { try MembershipQueries($0).owners(transaction: transactionId) }
    }
}
