import Crypto
import Foundation

extension ScenarioBuilder {
    /// 2025-03-01 10:00:00.123 UTC: every scenario's day one (milliseconds on purpose, S14).
    public static let t0: Int64 = 1_740_823_200_123
    static let day: Int64 = 86_400_000
    static let hour: Int64 = 3_600_000

    mutating func buy(_ user: String, _ product: String, at ms: Int64, offer: SimOffer = .none, appleId: Int = 0) throws -> SimTransaction {
        try state.purchase(user: user, appleId: appleId, productId: product, atMs: ms, offer: offer)
    }

    func v1(_ otid: String, _ type: String, at ms: Int64, focus: SimTransaction? = nil, legacy: Bool = false) throws -> Delivery {
        try emitter.v1(state, otid: otid, type: type, atMs: ms, options: .init(focus: focus, legacyShape: legacy))
    }

    func v2(_ otid: String, _ type: String, _ subtype: String? = nil, at ms: Int64, transaction: SimTransaction? = nil) throws -> Delivery {
        try emitter.v2(state, otid: otid, type: type, subtype: subtype, transaction: transaction, atMs: ms)
    }

    func upload(_ user: String, at ms: Int64, focus: SimTransaction? = nil, appleId: Int = 0, restored: Bool = false,
                omitOptional: Bool = false) throws -> Delivery {
        try emitter.receiptUpload(state, user: user, appleId: appleId, atMs: ms, focus: focus,
                                  options: .init(restoredIds: restored, omitOptionalFields: omitOptional))
    }

    /// The usual first purchase: INITIAL_BUY in V1 and V2, and the app's upload.
    mutating func initialBuy(_ user: String, _ product: String, at ms: Int64, offer: SimOffer = .none, appleId: Int = 0) throws -> SimTransaction {
        let t = try buy(user, product, at: ms, offer: offer, appleId: appleId)
        send([try v2(t.originalTransactionId, "SUBSCRIBED", "INITIAL_BUY", at: ms, transaction: t),
              try v1(t.originalTransactionId, "INITIAL_BUY", at: ms, focus: t),
              try upload(user, at: ms + 5000, focus: t, appleId: appleId)])
        return t
    }

    mutating func renewal(_ otid: String, v1: Bool = true, v2: Bool = true) throws -> SimTransaction {
        let t = try state.renew(otid)
        if v2 { send(try self.v2(otid, "DID_RENEW", at: t.purchaseMs, transaction: t)) }
        if v1 { send(try self.v1(otid, "DID_RENEW", at: t.purchaseMs, focus: t)) }
        return t
    }
}

/// Expectation helpers shared by the scenarios.
enum Expect {
    static func ms(_ value: Any?) -> Int64? { (value as? NSNumber)?.int64Value }

    /// Cut entries of the user's ledger with their cutKind.
    static func cuts(_ api: ScenarioAPI, _ user: String) throws -> [(product: String?, kind: String?, entry: [String: Any])] {
        try api.ledger(user).filter { $0["kind"] as? String == "cut" }.map { ($0["productId"] as? String, $0["cutKind"] as? String, $0) }
    }

    static func kinds(_ api: ScenarioAPI, _ user: String) throws -> [String] {
        try api.ledger(user).compactMap { $0["kind"] as? String }
    }
}

/// docs/domain.md's scenarios S1–S15, each a scripted journey checked against the oracle (and R2:
/// no purchase granted twice), plus the evidence each one is about.
public enum Scenarios {
    public static let all: [Scenario] = [s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15]

    public static func named(_ ids: [String]) -> [Scenario] {
        let wanted = Set(ids.map { $0.uppercased() })
        return all.filter { wanted.contains($0.id) }
    }

    typealias B = ScenarioBuilder

    static let s1 = Scenario("S1", "restore on a new device: same purchase, new transaction_id -> one grant") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let restoredAt = B.t0 + 3 * B.day
        let mapping = try b.state.restore(user: user, appleId: 0, atMs: restoredAt)
        b.send(try b.upload(user, at: restoredAt, restored: true))
        let restoredId = mapping[t.transactionId] ?? "?"
        b.expect("one grant for the restored purchase, the new id kept as an alias") { api in
            let grants = try api.ledger(user).filter { $0["kind"] as? String == "grant" }
            if grants.count != 1 { return "\(grants.count) grant entries, expected 1" }
            api.note("restored copy \(restoredId) of \(t.transactionId) granted nothing new")
            return nil
        }
    }

    static let s2 = Scenario("S2", "client upload + V1 + V2 notification of the same renewal -> one grant") { b in
        let user = try b.newUser()
        let t = try b.buy(user, "vip.a.1m", at: B.t0)
        b.send(try b.upload(user, at: B.t0 + 2000, focus: t))
        b.waitUntilKnown(t.originalTransactionId)
        let renewal = try b.state.renew(t.originalTransactionId)
        b.send([try b.upload(user, at: renewal.purchaseMs + 1000, focus: renewal, omitOptional: true),
                try b.v1(t.originalTransactionId, "DID_RENEW", at: renewal.purchaseMs, focus: renewal),
                try b.v2(t.originalTransactionId, "DID_RENEW", at: renewal.purchaseMs, transaction: renewal)])
        b.expect("two purchases, two grants") { api in
            let grants = try api.ledger(user).filter { $0["kind"] as? String == "grant" }.count
            return grants == 2 ? nil : "\(grants) grant entries, expected 2 (initial + one renewal)"
        }
    }

    static let s3 = Scenario("S3", "vipA -> vipB crossgrade right after buying A: membership ends one period after the switch") { b in
        let user = try b.newUser()
        let a = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(a.originalTransactionId)
        let switchAt = B.t0 + 2 * B.hour
        let (old, new) = try b.state.switchNow(a.originalTransactionId, to: "vip.b.1m", atMs: switchAt)
        b.send([try b.v1(a.originalTransactionId, "CANCEL", at: switchAt, focus: old),
                try b.v1(a.originalTransactionId, "INTERACTIVE_RENEWAL", at: switchAt, focus: new),
                try b.v2(a.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: switchAt, transaction: new),
                try b.upload(user, at: switchAt + 3000, focus: new)])
        b.expect("expiry = switch + one period, never two months") { api in
            let expires = Expect.ms(try api.group(user, "vip")?["expiresMs"])
            guard expires.map({ $0 / 1000 }) == new.expiresMs.map({ $0 / 1000 }) else { return "expiresMs \(expires.map(String.init) ?? "none"), expected \(new.expiresMs!)" }
            return nil
        }
        b.expect("A cut at the switch as a crossgrade (R3 a)") { api in
            let cuts = try Expect.cuts(api, user).filter { $0.product == "vip.a.1m" }
            guard let cut = cuts.first else { return "no cut entry for vip.a.1m" }
            api.note("cut of vip.a.1m recorded as \(cut.kind ?? "?")")
            return cut.kind == "crossgrade" ? nil : "cutKind \(cut.kind ?? "none"), expected crossgrade"
        }
    }

    static let s4 = Scenario("S4", "cancel + switch: CANCEL(auto_renew=false) -> same deduction as S3, renewal off") { b in
        let user = try b.newUser()
        let a = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(a.originalTransactionId)
        let switchAt = B.t0 + 5 * B.hour
        let (old, new) = try b.state.switchNow(a.originalTransactionId, to: "vip.b.1m", atMs: switchAt, keepAutoRenew: false)
        b.send([try b.v1(a.originalTransactionId, "CANCEL", at: switchAt, focus: old),
                try b.v1(a.originalTransactionId, "INTERACTIVE_RENEWAL", at: switchAt, focus: new),
                try b.v2(a.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: switchAt, transaction: new),
                try b.v2(a.originalTransactionId, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: switchAt + 1000, transaction: new)])
        b.expect("auto-renew off") { api in
            let status = try api.group(user, "vip")?["autoRenewStatus"] as? Bool
            return status == false ? nil : "autoRenewStatus \(status.map(String.init) ?? "none"), expected false"
        }
        b.expect("A cut as cancel-and-switch (R3 b)") { api in
            let kind = try Expect.cuts(api, user).first { $0.product == "vip.a.1m" }?.kind
            api.note("cut of vip.a.1m recorded as \(kind ?? "?")")
            return kind == "cancelAndSwitch" ? nil : "cutKind \(kind ?? "none"), expected cancelAndSwitch"
        }
    }

    static let s5 = Scenario("S5", "refund by Apple support mid-period -> cut at the cancellation, ledger shows before/after and cause") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let refundAt = B.t0 + 10 * B.day + 12_345
        let refunded = try b.state.refund(t.originalTransactionId, transactionId: t.transactionId, atMs: refundAt, reason: "1")
        b.send([try b.v1(t.originalTransactionId, "CANCEL", at: refundAt, focus: refunded),
                try b.v2(t.originalTransactionId, "REFUND", at: refundAt, transaction: refunded)])
        b.expect("a refund cut with before/after and its cause") { api in
            guard let cut = try Expect.cuts(api, user).first else {
                // An input that already carried the refund (a verifyReceipt answer) grants the cut interval at once.
                let grant = try api.ledger(user).first { $0["kind"] as? String == "grant" }
                let end = Expect.ms((grant?["interval"] as? [String: Any])?["endMs"])
                guard end.map({ $0 / 1000 }) == refundAt / 1000, (grant?["reason"] as? String)?.contains("refund") == true else {
                    return "no cut entry, and no grant that already ends at the refund"
                }
                api.note("first seen already refunded: \(grant?["reason"] as? String ?? "")")
                return nil
            }
            let before = (cut.entry["before"] as? [[String: Any]])?.compactMap { Expect.ms($0["endMs"]) }
            let after = (cut.entry["after"] as? [[String: Any]])?.compactMap { Expect.ms($0["endMs"]) }
            let cause = cut.entry["cause"] as? [String: Any]
            guard cut.kind == "refund" else { return "cutKind \(cut.kind ?? "none"), expected refund" }
            // Expiries and cuts are whole seconds (Apple's copies of one date differ in milliseconds).
            guard before?.last.map({ $0 / 1000 }) == t.expiresMs.map({ $0 / 1000 }), after?.last.map({ $0 / 1000 }) == refundAt / 1000 else {
                return "before \(before ?? []) / after \(after ?? []) do not show \(t.expiresMs!) -> \(refundAt)"
            }
            // The cause names the input that carried the refund: Apple's CANCEL/REFUND, or an upload
            // whose verifyReceipt answer already showed it.
            guard let source = cause?["source"] as? String, cause?["transactionId"] as? String == t.transactionId else {
                return "cause \(cause ?? [:]) does not name transaction \(t.transactionId)"
            }
            api.note("cut by \((cause?["notificationType"] as? String) ?? source): \(cut.entry["reason"] as? String ?? "")")
            return nil
        }
    }

    static let s6 = Scenario("S6", "refund after the period ended -> recorded, nothing deducted") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        _ = try b.renewal(t.originalTransactionId)
        b.waitUntilKnown(t.originalTransactionId)
        let refundAt = t.expiresMs! + 5 * B.day
        let refunded = try b.state.refund(t.originalTransactionId, transactionId: t.transactionId, atMs: refundAt, reason: "0")
        b.send([try b.v1(t.originalTransactionId, "CANCEL", at: refundAt, focus: refunded),
                try b.v2(t.originalTransactionId, "REFUND", at: refundAt, transaction: refunded)])
        b.expect("recorded without a cut (R11)") { api in
            let kinds = try Expect.kinds(api, user)
            if kinds.contains("cut") { return "a cut was written: \(kinds)" }
            return kinds.contains("record") ? nil : "no record entry for the late refund: \(kinds)"
        }
    }

    static let s7 = Scenario("S7", "A1 -> A3 crossgrade: A1 continues until the renewal, then A3 periods") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let changeAt = B.t0 + 5 * B.day
        try b.state.setRenewalProduct(t.originalTransactionId, productId: "vip.a.3m", atMs: changeAt)
        b.send([try b.v1(t.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", at: changeAt),
                try b.v2(t.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: changeAt)])
        b.wait("the pending vip.a.3m is visible, still on vip.a.1m") { api in
            let group = try api.group(user, "vip")
            return group?["pendingProduct"] as? String == "vip.a.3m" && group?["currentProduct"] as? String == "vip.a.1m"
        }
        let renewed = try b.renewal(t.originalTransactionId)
        b.expect("on vip.a.3m after the renewal, 90 days from the old expiry") { api in
            let group = try api.group(user, "vip")
            guard group?["currentProduct"] as? String == "vip.a.3m" else { return "currentProduct \(group?["currentProduct"] ?? "none")" }
            return Expect.ms(group?["expiresMs"]).map({ $0 / 1000 }) == renewed.expiresMs.map({ $0 / 1000 }) ? nil : "expiresMs \(group?["expiresMs"] ?? "none"), expected \(renewed.expiresMs!)"
        }
    }

    static let s8 = Scenario("S8", "upgrade to a higher level mid-period: immediate, old purchase cut at the switch") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let upgradeAt = B.t0 + 12 * B.day
        let (old, new) = try b.state.switchNow(t.originalTransactionId, to: "vip.pro.1m", atMs: upgradeAt)
        b.send([try b.v2(t.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", "UPGRADE", at: upgradeAt, transaction: new),
                try b.v1(t.originalTransactionId, "CANCEL", at: upgradeAt, focus: old),
                try b.v1(t.originalTransactionId, "INTERACTIVE_RENEWAL", at: upgradeAt, focus: new)])
        // Later the upgraded period is refunded: only a correct cut of the old purchase at the
        // switch leaves no service after the refund.
        let refundAt = upgradeAt + 3 * B.day
        let refunded = try b.state.refund(t.originalTransactionId, transactionId: new.transactionId, atMs: refundAt, reason: "0")
        b.send(try b.v2(t.originalTransactionId, "REFUND", at: refundAt, transaction: refunded))
        b.expect("old purchase cut as an upgrade at the switch") { api in
            let kind = try Expect.cuts(api, user).first { $0.product == "vip.a.1m" }?.kind
            api.note("cut of vip.a.1m recorded as \(kind ?? "?")")
            return kind == "upgrade" ? nil : "cutKind \(kind ?? "none"), expected upgrade"
        }
    }

    static let s9 = Scenario("S9", "downgrade: effective at the next renewal") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.pro.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let changeAt = B.t0 + 3 * B.day
        try b.state.setRenewalProduct(t.originalTransactionId, productId: "vip.lite.1m", atMs: changeAt)
        b.send([try b.v2(t.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: changeAt),
                try b.v1(t.originalTransactionId, "DID_CHANGE_RENEWAL_PREF", at: changeAt)])
        b.wait("the pending downgrade is visible and pro still current") { api in
            let group = try api.group(user, "vip")
            return group?["pendingProduct"] as? String == "vip.lite.1m" && group?["currentProduct"] as? String == "vip.pro.1m"
        }
        _ = try b.renewal(t.originalTransactionId)
        b.expect("lite from the renewal; no cut of pro") { api in
            let group = try api.group(user, "vip")
            if group?["currentProduct"] as? String != "vip.lite.1m" { return "currentProduct \(group?["currentProduct"] ?? "none")" }
            return try Expect.cuts(api, user).isEmpty ? nil : "a downgrade must not cut the current period"
        }
    }

    static let s10 = Scenario("S10", "storefront change: new original_transaction_id, same account -> same user") { b in
        let user = try b.newUser()
        let t = try b.initialBuy(user, "vip.a.1m", at: B.t0)
        b.waitUntilKnown(t.originalTransactionId)
        let moved = try b.state.moveStorefront(t.originalTransactionId, to: "CAN", atMs: B.t0 + 20 * B.day)
        // No receipt upload this time: only the appAccountToken in Apple's data says who it is.
        b.send([try b.v2(moved.originalTransactionId, "SUBSCRIBED", "INITIAL_BUY", at: moved.purchaseMs, transaction: moved),
                try b.v1(moved.originalTransactionId, "INITIAL_BUY", at: moved.purchaseMs, focus: moved)])
        b.expect("both original_transaction_ids belong to the user") { api in
            let subscriptions = try api.get("/v1/users/\(user)/membership").json?["subscriptions"] as? [String] ?? []
            return Set([t.originalTransactionId, moved.originalTransactionId]).isSubset(of: Set(subscriptions))
                ? nil : "user's subscriptions are \(subscriptions), expected both \(t.originalTransactionId) and \(moved.originalTransactionId)"
        }
    }

    static let s11 = Scenario("S11", "intro offer abuse: second Apple ID on the same account -> served the non-intro variant") { b in
        let user = try b.newUser()
        b.act("a new account is shown the intro variant") { api in
            let (status, json) = try api.get("/v1/users/\(user)/offers?group=vip")
            guard status == 200 else { return "GET /v1/users/{u}/offers answered \(status)" }
            let show = ((json?["groups"] as? [[String: Any]])?.first?["products"] as? [[String: Any]])?.first { $0["productId"] as? String == "vip.a.1m" }?["show"] as? String
            return show == "vip.a.1m.intro" ? nil : "shown \(show ?? "nothing"), expected vip.a.1m.intro"
        }
        let t = try b.initialBuy(user, "vip.a.1m.intro", at: B.t0, offer: .freeTrial)
        try b.state.setAutoRenew(t.originalTransactionId, on: false, atMs: B.t0 + B.day)
        b.send(try b.v2(t.originalTransactionId, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: B.t0 + B.day))
        b.waitUntilKnown(t.originalTransactionId)
        b.wait("the trial is linked to the account") { api in try api.group(user, "vip") != nil }
        b.act("the same account on a second Apple ID is shown the plain product") { api in
            let (status, json) = try api.get("/v1/users/\(user)/offers?group=vip")
            guard status == 200 else { return "GET /v1/users/{u}/offers answered \(status)" }
            let group = (json?["groups"] as? [[String: Any]])?.first
            let show = (group?["products"] as? [[String: Any]])?.first { $0["productId"] as? String == "vip.a.1m" }?["show"] as? String
            api.note("second Apple ID: server shows \(show ?? "nothing"), intro eligible \((group?["introOffer"] as? [String: Any])?["eligible"] ?? "?")")
            return show == "vip.a.1m" ? nil : "shown \(show ?? "nothing"), expected vip.a.1m (the account already had a trial)"
        }
        let served = b.state.servedVariant(user: user, productId: "vip.a.1m")
        try b.state.addAppleID(user: user)
        b.state.log(user, B.t0 + 40 * B.day, "signs in with a second Apple ID")
        _ = try b.initialBuy(user, served, at: B.t0 + 40 * B.day, appleId: 1)
    }

    static let s12 = Scenario("S12", "promotional offer: eligible user gets a signature that verifies; ineligible and exhausted get a clear refusal") { b in
        let lapsed = try b.newUser()
        let t = try b.initialBuy(lapsed, "vip.a.1m", at: B.t0)
        try b.state.setAutoRenew(t.originalTransactionId, on: false, atMs: B.t0 + B.day)
        b.send(try b.v2(t.originalTransactionId, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: B.t0 + B.day))
        let stranger = try b.newUser()
        let redeemer = try b.newUser()
        let first = try b.initialBuy(redeemer, "vip.a.1m", at: B.t0, offer: .promotional("vip.winback"))
        b.wait("both subscribers are linked") { api in try api.group(lapsed, "vip") != nil && api.group(redeemer, "vip") != nil }
        let bundle = b.state.config.bundleId
        let offerKey = b.offerPublicKey
        b.act("lapsed subscriber asks for vip.winback") { api in
            let (status, json) = try api.post("/v1/offers/signature", json: ["user_id": lapsed, "product_id": "vip.a.1m", "offer_id": "vip.winback"])
            switch status {
            case 200:
                guard let signature = json?["signature"] as? String, let nonce = json?["nonce"] as? String,
                      let keyId = json?["keyIdentifier"] as? String, let timestamp = Expect.ms(json?["timestamp"]) else {
                    return "200 without signature, nonce, keyIdentifier and timestamp: \(json ?? [:])"
                }
                let separator = "\u{2063}"
                let payload = [bundle, keyId, "vip.a.1m", "vip.winback", lapsed.lowercased(), nonce.lowercased(), String(timestamp)].joined(separator: separator)
                if let key = offerKey {
                    guard let der = Base64.decode(signature), key.verify(signature: der, message: Array(payload.utf8)) else {
                        return "the signature does not verify with the signer's public key"
                    }
                    api.note("eligible: signature by key \(keyId) verifies")
                } else {
                    api.note("eligible: signed by key \(keyId) (the signer's public key is unknown here: not verified)")
                }
                return nil
            case 503, 504:
                api.note("eligible (no refusal), but no signer answered: \(json?["error"] as? String ?? "")")
                return nil
            default:
                return "answered \(status): \(json ?? [:])"
            }
        }
        b.act("a user who never subscribed is refused") { api in
            let (status, json) = try api.post("/v1/offers/signature", json: ["user_id": stranger, "product_id": "vip.a.1m", "offer_id": "vip.winback"])
            api.note("never subscribed: \(status) \(json?["code"] as? String ?? "") \(json?["error"] as? String ?? "")")
            return status == 403 ? nil : "answered \(status), expected 403"
        }
        b.act("a user who already redeemed it once (limit 1) is refused") { api in
            let (status, json) = try api.post("/v1/offers/signature", json: ["user_id": redeemer, "product_id": "vip.a.1m", "offer_id": "vip.winback"])
            api.note("limit reached: \(status) \(json?["code"] as? String ?? "") \(json?["error"] as? String ?? "")")
            return status == 403 ? nil : "answered \(status), expected 403"
        }
        _ = first
    }

    static let s13 = Scenario("S13", "sandbox receipt sent to production verifyReceipt (21007) -> retried on sandbox") { b in
        let user = try b.newUser(.sandbox)
        let t = try b.buy(user, "vip.a.1m", at: B.t0)
        b.send(try b.upload(user, at: B.t0 + 3000, focus: t))
        b.expect("the sandbox purchase is granted from the upload alone") { api in
            try api.group(user, "vip") == nil ? "no vip membership" : nil
        }
        let server = b.verifyReceipt
        b.expect("verifyReceipt answered 21007 on production, then 0 on sandbox") { api in
            guard let server else { return "no local verifyReceipt endpoint: run the workers in verify-receipt mode against the simulator's" }
            let answered = server.answered
            api.note("verifyReceipt answers: \(answered.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))")
            return (answered["Production 21007"] ?? 0) > 0 && (answered["Sandbox 0"] ?? 0) > 0 ? nil : "no 21007 → sandbox round trip seen"
        }
    }

    static let s14 = Scenario("S14", "milliseconds differ between two copies of one purchase -> one grant") { b in
        let user = try b.newUser()
        let t = try b.buy(user, "vip.a.1m", at: B.t0)
        // Apple's JSON keeps .123, the receipt has whole seconds, and a third copy says .987.
        var other = try b.v1(t.originalTransactionId, "INITIAL_BUY", at: B.t0, focus: t)
        if var body = try JSONSerialization.jsonObject(with: Data(other.body)) as? [String: Any],
           var unified = body["unified_receipt"] as? [String: Any], var info = unified["latest_receipt_info"] as? [[String: Any]] {
            for i in info.indices { info[i]["purchase_date_ms"] = String(t.purchaseMs - 123 + 987) }
            unified["latest_receipt_info"] = info
            body["unified_receipt"] = unified
            other.body = [UInt8](try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]))
            other.label += " (purchase_date_ms .987)"
        }
        b.send([try b.v2(t.originalTransactionId, "SUBSCRIBED", "INITIAL_BUY", at: B.t0, transaction: t),
                try b.upload(user, at: B.t0 + 4000, focus: t), other])
        b.expect("one grant") { api in
            let grants = try api.ledger(user).filter { $0["kind"] as? String == "grant" }.count
            return grants == 1 ? nil : "\(grants) grant entries, expected 1"
        }
    }

    static let s15 = Scenario("S15", "notifications out of order (refund before the purchase is seen) -> same final state as in order") { b in
        let late = try b.newUser()
        let inOrder = try b.newUser()
        var refunds: [String: SimTransaction] = [:]
        var purchases: [String: SimTransaction] = [:]
        for user in [late, inOrder] {
            let t = try b.buy(user, "vip.a.1m", at: B.t0)
            purchases[user] = t
            refunds[user] = try b.state.refund(t.originalTransactionId, transactionId: t.transactionId, atMs: B.t0 + 6 * B.day, reason: "0")
        }
        func initial(_ user: String) throws -> [Delivery] {
            let t = purchases[user]!
            // What Apple said at purchase time: built from a copy of the state without the refund.
            var then = b.state
            var subscription = try then.subscription(t.originalTransactionId)
            subscription.transactions[0].cancellationMs = nil
            subscription.transactions[0].cancellationReason = nil
            subscription.autoRenew = true
            then.replace(subscription)
            return [try b.emitter.v2(then, otid: t.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", transaction: subscription.transactions[0], atMs: B.t0),
                    try b.emitter.v1(then, otid: t.originalTransactionId, type: "INITIAL_BUY", atMs: B.t0, options: .init(focus: subscription.transactions[0])),
                    try b.emitter.receiptUpload(then, user: user, appleId: 0, atMs: B.t0 + 3000, focus: subscription.transactions[0])]
        }
        let refundAt = B.t0 + 6 * B.day
        // In order.
        b.send(try initial(inOrder))
        b.waitUntilKnown(purchases[inOrder]!.originalTransactionId)
        b.send(try b.v2(purchases[inOrder]!.originalTransactionId, "REFUND", at: refundAt, transaction: refunds[inOrder]))
        // Out of order: the refund is processed before the purchase is seen.
        b.send(try b.v2(purchases[late]!.originalTransactionId, "REFUND", at: refundAt, transaction: refunds[late]))
        b.waitUntilKnown(purchases[late]!.originalTransactionId)
        b.send(try initial(late))
        b.expect("the same membership either way") { api in
            let a = try api.group(late, "vip")?["intervals"] as? [[String: Any]]
            let b = try api.group(inOrder, "vip")?["intervals"] as? [[String: Any]]
            // Compared at second precision, as the oracle compares (S14).
            let durations = [a, b].map { $0?.compactMap { i in Expect.ms(i["endMs"]).flatMap { e in Expect.ms(i["startMs"]).map { e / 1000 - $0 / 1000 } } } }
            return durations[0] == durations[1] ? nil : "out of order \(durations[0] ?? []) vs in order \(durations[1] ?? [])"
        }
    }
}
