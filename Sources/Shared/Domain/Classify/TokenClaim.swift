/// When an `appAccountToken` claims a subscription (R17). The app sets the token on a purchase, so a
/// purchase carrying it claims as of itself (a renewal in the same event bounds that time too).
/// Renewals only repeat a token set on an earlier purchase: when the event holds no purchase carrying
/// it (renewals alone, or the token only in the renewal info), the claim is provisional, as of the
/// subscription's original purchase, the earliest the token can have been set. Membership lets the
/// exact claim of a purchase carrying the token replace it, so every arrival order gives one owner.
struct TokenClaim {
    let via: String
    let atMs: Int64

    init(carriers: [TransactionFacts], earliestOriginalMs: Int64?, statedAtMs: Int64) {
        if carriers.contains(where: { $0.transactionReason != "RENEWAL" }) {
            via = UserLink.appAccountToken
            atMs = carriers.map(\.purchaseDateMs).min()!
        } else {
            via = UserLink.renewedAppAccountToken
            atMs = carriers.map { min($0.purchaseDateMs, $0.originalPurchaseDateMs ?? $0.purchaseDateMs) }.min()
                ?? earliestOriginalMs ?? statedAtMs
        }
    }
}
