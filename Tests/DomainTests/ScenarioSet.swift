@testable import Domain

/// The scenarios S1–S10, S13–S15 as decoded events (what the decode stage hands dedupe), each in
/// its own subscriptions named after `prefix`, so one set can be fed twice or in any order.
enum ScenarioSet {
    static func events(prefix p: String) -> [AppleEvent] {
        var events: [AppleEvent] = []
        let user = "user-\(p)"
        // S1: a restore copy with a new transaction id.
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s1", [Apple.period("\(p)1a", otid: "\(p)-s1", start: t0)]))
        var restored = Apple.period("\(p)1b", otid: "\(p)-s1", start: t0)
        restored.webOrderLineItemId = "w\(p)1a"
        events.append(Apple.receipt(user: nil, otid: "\(p)-s1", [restored], id: "\(p)-s1-restore"))
        // S3: crossgrade right after buying.
        var a3 = Apple.period("\(p)3a", otid: "\(p)-s3", start: t0)
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s3", [a3]))
        a3.cancellationDateMs = t0 + day
        a3.isUpgraded = true
        let b3 = Apple.period("\(p)3b", otid: "\(p)-s3", product: "vip.b.1m", start: t0 + day)
        events.append(Apple.v1("CANCEL", otid: "\(p)-s3", [a3, b3], autoRenewProduct: "vip.b.1m"))
        // S5: refund mid-period; S6: refund of a period that had ended.
        var a5 = Apple.period("\(p)5a", otid: "\(p)-s5", start: t0)
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s5", [a5]))
        a5.cancellationDateMs = t0 + 9 * day
        a5.cancellationReason = "0"
        events.append(Apple.v1("CANCEL", otid: "\(p)-s5", [a5], autoRenew: false, statusChange: t0 + 9 * day))
        var a6 = Apple.period("\(p)6a", otid: "\(p)-s6", start: t0)
        let r6 = Apple.period("\(p)6b", otid: "\(p)-s6", start: t0 + month)
        events.append(Apple.v1("DID_RENEW", otid: "\(p)-s6", [a6, r6]))
        a6.cancellationDateMs = t0 + month + 2 * day
        a6.cancellationReason = "1"
        events.append(Apple.v1("CANCEL", otid: "\(p)-s6", [a6]))
        // S7: A1 → A3 at the renewal.
        let a7 = Apple.period("\(p)7a", otid: "\(p)-s7", start: t0)
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s7", [a7]))
        events.append(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "\(p)-s7", [a7], autoRenewProduct: "vip.a.3m", statusChange: t0 + 4 * day))
        events.append(Apple.v1("DID_RENEW", otid: "\(p)-s7", [a7, Apple.period("\(p)7b", otid: "\(p)-s7", product: "vip.a.3m",
                                                                               start: t0 + month, length: 90 * day)],
                               autoRenewProduct: "vip.a.3m"))
        // S8: upgrade mid-period (the new purchase arrives on its own).
        let a8 = Apple.period("\(p)8a", otid: "\(p)-s8", start: t0, token: user)
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s8", [a8]))
        events.append(Apple.v1("INTERACTIVE_RENEWAL", otid: "\(p)-s8", [a8, Apple.period("\(p)8b", otid: "\(p)-s8", product: "vip.premium.1m",
                                                                                          start: t0 + 12 * day, token: user)],
                               autoRenewProduct: "vip.premium.1m"))
        // S9: downgrade at renewal.
        let a9 = Apple.period("\(p)9a", otid: "\(p)-s9", product: "vip.premium.1m", start: t0)
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s9", [a9]))
        events.append(Apple.v1("DID_CHANGE_RENEWAL_PREF", otid: "\(p)-s9", [a9], autoRenewProduct: "vip.basic.1m", statusChange: t0 + 2 * day))
        events.append(Apple.v1("DID_RENEW", otid: "\(p)-s9", [a9, Apple.period("\(p)9b", otid: "\(p)-s9", product: "vip.basic.1m", start: t0 + month)],
                               autoRenewProduct: "vip.basic.1m"))
        // S10: the same user after a storefront change (a new original_transaction_id).
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s10", [Apple.period("\(p)10a", otid: "\(p)-s10", start: t0 + 3 * month, token: user)]))
        // S14: two copies whose milliseconds differ.
        events.append(Apple.v1("INITIAL_BUY", otid: "\(p)-s14", [Apple.tx("\(p)14", otid: "\(p)-s14", purchase: t0 + 111, expires: t0 + month)]))
        events.append(Apple.receipt(user: nil, otid: "\(p)-s14", [Apple.tx("\(p)14", otid: "\(p)-s14", purchase: t0 + 777, expires: t0 + month)],
                                    id: "\(p)-s14-copy"))
        // S15 is any order of the above; consumables and lifetime for R13.
        let coins = Apple.tx("\(p)c", otid: "\(p)-c", product: "coins.100", purchase: t0, token: user)
        events.append(Apple.receipt(user: nil, otid: "\(p)-c", [coins], id: "\(p)-coins"))
        var refundedCoins = coins
        refundedCoins.cancellationDateMs = t0 + day
        events.append(Apple.v1("REFUND", otid: "\(p)-c", [refundedCoins], autoRenew: nil))
        events.append(Apple.receipt(user: nil, otid: "\(p)-l", [Apple.tx("\(p)l", otid: "\(p)-l", product: "lifetime", purchase: t0, token: user)],
                                    id: "\(p)-lifetime"))
        return events
    }
}
