import AppleDecoding
import Crypto
import Domain
import Foundation
import TestSupport

/// The scenario set as raw Apple inputs (V1 bodies and signed V2 bodies), every id carrying
/// `prefix` so the same set can be fed again under other ids, plus an in-process oracle: the same
/// bytes decoded and run through the pure domain steps (dedupe → classify → membership), which the
/// running system must agree with once it has caught up.
enum ScenarioFeed {
    typealias Tx = ScenarioBodies.Tx

    static func inputs(prefix p: String, signer: ScenarioBodies.V2Signer) throws -> [Data] {
        let t0 = ScenarioBodies.t0, day = ScenarioBodies.day, month = ScenarioBodies.month
        let user = "user-\(p)"
        var feed: [Data] = []
        func v1(_ body: [String: Any]) throws { feed.append(try ScenarioBodies.data(body)) }
        // S3: crossgrade right after buying (V1).
        let a3 = Tx.period("\(p)-s3-0", otid: "\(p)-s3", start: t0, token: user)
        let b3 = Tx.period("\(p)-s3-1", otid: "\(p)-s3", product: "vip.plus.1m", start: t0 + day, token: user)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s3", [a3]))
        try v1(ScenarioBodies.v1("CANCEL", otid: "\(p)-s3", [a3.cancelled(at: t0 + day, upgraded: true), b3], autoRenewProduct: "vip.plus.1m"))
        // S4: cancel and switch.
        let a4 = Tx.period("\(p)-s4-0", otid: "\(p)-s4", start: t0)
        let b4 = Tx.period("\(p)-s4-1", otid: "\(p)-s4", product: "vip.plus.1m", start: t0 + 2 * day)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s4", [a4]))
        try v1(ScenarioBodies.v1("CANCEL", otid: "\(p)-s4", [a4.cancelled(at: t0 + 2 * day, upgraded: true), b4], autoRenew: false,
                                 autoRenewProduct: "vip.plus.1m", statusChangeMs: t0 + 2 * day))
        // S5 (V1) and S5 (V2): refunds mid-period.
        let a5 = Tx.period("\(p)-s5-0", otid: "\(p)-s5", start: t0)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s5", [a5]))
        try v1(ScenarioBodies.v1("CANCEL", otid: "\(p)-s5", [a5.cancelled(at: t0 + 9 * day, reason: "0")], autoRenew: false,
                                 statusChangeMs: t0 + 9 * day))
        let a55 = Tx.period("\(p)-s55-0", otid: "\(p)-s55", start: t0)
        feed.append(try signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "\(p)-s55-buy", signedMs: t0, transaction: a55))
        feed.append(try signer.notification("REFUND", uuid: "\(p)-s55-refund", signedMs: t0 + 4 * day,
                                            transaction: a55.cancelled(at: t0 + 4 * day, reason: "1")))
        // S6: refund after the period ended.
        let p6 = Tx.period("\(p)-s6-0", otid: "\(p)-s6", start: t0), r6 = Tx.period("\(p)-s6-1", otid: "\(p)-s6", start: t0 + month)
        try v1(ScenarioBodies.v1("DID_RENEW", otid: "\(p)-s6", [p6, r6]))
        try v1(ScenarioBodies.v1("CANCEL", otid: "\(p)-s6", [p6.cancelled(at: t0 + month + 3 * day, reason: "1"), r6]))
        // S7: A1 → A3 at the renewal.
        let a7 = Tx.period("\(p)-s7-0", otid: "\(p)-s7", start: t0)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s7", [a7]))
        try v1(ScenarioBodies.v1("DID_CHANGE_RENEWAL_PREF", otid: "\(p)-s7", [a7], autoRenewProduct: "vip.standard.3m",
                                 statusChangeMs: t0 + 4 * day))
        try v1(ScenarioBodies.v1("DID_RENEW", otid: "\(p)-s7", [a7, Tx.period("\(p)-s7-1", otid: "\(p)-s7", product: "vip.standard.3m",
                                                                                start: t0 + month, length: 90 * day)],
                                 autoRenewProduct: "vip.standard.3m"))
        // S8 (V2): upgrade mid-period.
        let a8 = Tx.period("\(p)-s8-0", otid: "\(p)-s8", start: t0, token: user)
        let up8 = Tx.period("\(p)-s8-1", otid: "\(p)-s8", product: "vip.premium.1m", start: t0 + 12 * day, token: user)
        feed.append(try signer.notification("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "\(p)-s8-buy", signedMs: t0, transaction: a8,
                                            renewal: ScenarioBodies.V2Signer.renewal(otid: "\(p)-s8", product: a8.product)))
        feed.append(try signer.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", uuid: "\(p)-s8-up", signedMs: t0 + 12 * day,
                                            transaction: up8,
                                            renewal: ScenarioBodies.V2Signer.renewal(otid: "\(p)-s8", product: up8.product)))
        // S9: downgrade at the renewal.
        let a9 = Tx.period("\(p)-s9-0", otid: "\(p)-s9", product: "vip.premium.1m", start: t0)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s9", [a9]))
        try v1(ScenarioBodies.v1("DID_CHANGE_RENEWAL_PREF", otid: "\(p)-s9", [a9], autoRenewProduct: "vip.basic.1m", statusChangeMs: t0 + 2 * day))
        try v1(ScenarioBodies.v1("DID_RENEW", otid: "\(p)-s9", [a9, Tx.period("\(p)-s9-1", otid: "\(p)-s9", product: "vip.basic.1m",
                                                                                start: t0 + month)],
                                 autoRenewProduct: "vip.basic.1m"))
        // S10: the same user after a storefront change.
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s10", [Tx.period("\(p)-s10-0", otid: "\(p)-s10", start: t0 + 3 * month, token: user)]))
        // S14 / S2: copies of one renewal by V1 and V2, milliseconds apart.
        let a14 = Tx.period("\(p)-s14-0", otid: "\(p)-s14", start: t0)
        var r14 = Tx.period("\(p)-s14-1", otid: "\(p)-s14", start: t0 + month)
        try v1(ScenarioBodies.v1("INITIAL_BUY", otid: "\(p)-s14", [a14]))
        try v1(ScenarioBodies.v1("DID_RENEW", otid: "\(p)-s14", [a14, r14]))
        r14.purchaseMs += 321
        feed.append(try signer.notification("DID_RENEW", uuid: "\(p)-s14-v2", signedMs: t0 + month + 1_000, transaction: r14))
        // R13: a lifetime purchase (V2, non-consumable) for the user.
        feed.append(try signer.notification("ONE_TIME_CHARGE", uuid: "\(p)-life", signedMs: t0,
                                            transaction: Tx(id: "\(p)-life", otid: "\(p)-life", product: "lifetime",
                                                            purchaseMs: t0, token: user)))
        return feed
    }

    /// The pure pipeline over the same bytes, in the given order.
    struct Oracle {
        let catalog: Catalog
        let decoder: AppleInputDecoder
        var known: [String: [KnownPurchase]] = [:]
        var seen: Set<String> = []
        var book = MembershipBook()
        var ledger: [LedgerEntry] = []

        init() throws {
            catalog = try Catalog.load(json: Array(ScenarioBodies.catalogJSON.utf8), source: "scenario catalog")
            let root = try GeneratedPKI.shared().chain.root.certificate
            let verifier = try SignedDataVerifier(roots: [root], bundleId: ScenarioBodies.bundleId, appAppleId: nil,
                                                  environments: [.sandbox], strictChecks: true)
            decoder = AppleInputDecoder(v1: NotificationV1Decoder(), v2: NotificationV2Decoder(verifier: verifier), receipts: nil)
        }

        mutating func feed(_ body: Data) throws {
            let input = RawInput(source: .appStoreNotification, body: [UInt8](body), receivedAtMs: 0, position: nil)
            guard case .success(let events) = decoder.decode(input) else { throw ClusterError("oracle cannot decode \(String(decoding: body.prefix(80), as: UTF8.self))") }
            for event in events {
                guard seen.insert("\(event.subscriptionKey)|\(seenKey(of: event))").inserted else { continue }
                let outcome = dedupe(event: event, known: known[event.subscriptionKey] ?? [])
                known[event.subscriptionKey] = outcome.updated
                for command in classify(UniqueEvent(event: event, purchases: outcome.changes), catalog: catalog) {
                    ledger += book.apply(command)
                }
            }
        }
    }
}
