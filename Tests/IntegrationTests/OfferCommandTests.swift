import Crypto
import Domain
import Foundation
import TestSupport
import XCTest

/// Contract: `storeledger offer sign` makes, for the vectors (ours, plus Apple's library vectors
/// when ../shared is present), legacy signatures that verify with OpenSSL against the signing
/// key's public key over the vector's expected payload, echoing the
/// lowercased nonce and the timestamp. `storeledger offer eligibility` applies the offer rules (R8,
/// R9) to an account's history; the transcripts below pin each rule: intro variant only for
/// accounts that never had a trial or intro in the group under any Apple ID; previous subscribers
/// only; win-back only when lapsed; upgrade only from a lower level; per-account limits counted in
/// redemptions (consecutive periods carrying the offer id are one redemption).
final class OfferCommandTests: XCTestCase {
    private func storeledger(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    func testOfferSignMatchesTheVectorsAndVerifiesWithOpenSSL() throws {
        let pki = try GeneratedPKI.shared()
        let publicKey = pki.offerKey.publicKey
        let keyPath = pki.offerKeyPath
        for vector in try OfferVector.all() {
            let (status, output) = try storeledger([
                "offer", "sign", "--key", keyPath, "--key-id", vector.keyId, "--bundle-id", vector.bundleId,
                "--product", vector.productId, "--offer", vector.offerId,
                "--username", vector.appAccountToken_or_applicationUsername, "--nonce", vector.nonce,
                "--timestamp", String(vector.timestamp), "--json",
            ])
            XCTAssertEqual(status, 0)
            let answer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
            XCTAssertEqual(Set(answer.keys), ["keyIdentifier", "nonce", "timestamp", "signature"])
            XCTAssertEqual(answer["nonce"] as? String, vector.nonce.lowercased())
            XCTAssertEqual((answer["timestamp"] as? NSNumber)?.int64Value, vector.timestamp)
            let der = try XCTUnwrap((answer["signature"] as? String).flatMap { Base64.decode($0) })
            XCTAssertTrue(publicKey.verify(signature: der, message: Array(vector.expected_payload.utf8)))
        }
        let (status, _) = try storeledger(["offer", "sign", "--key", keyPath, "--key-id", "K", "--bundle-id", "b", "--product", "p",
                                           "--offer", "o", "--nonce", "not-a-uuid"])
        XCTAssertEqual(status, 2, "usage error")
    }

    // MARK: eligibility transcripts

    private let now: Int64 = 1_800_000_000_000
    private let day: Int64 = 86_400_000

    private func grant(_ key: String, _ tx: String, _ product: String, from start: Int64, to end: Int64, trial: Bool = false,
                       intro: Bool = false, offer: String? = nil, offerPeriod: String? = nil, refundedAt: Int64? = nil,
                       kind: ProductKind = .autoRenewable, environment: String? = nil) -> (String, PurchaseGrant) {
        (key, PurchaseGrant(purchaseId: "p-\(tx)", transactionId: tx, originalTransactionId: key, productId: product,
                            productKind: kind, group: "vip", startMs: start, endMs: end,
                            cut: refundedAt.map { Cut(atMs: $0, kind: .refund) },
                            finance: FinanceFlags(isTrial: trial, isIntro: intro, promotionalOfferId: offer, offerPeriod: offerPeriod),
                            environment: environment))
    }

    /// Apple's period of a purchase, cut at its cancellation: what membership grants it when nothing
    /// else (an upgrade, a crossgrade) took part of it.
    private func appleInterval(of grant: PurchaseGrant) -> Interval? {
        let interval = Interval(startMs: grant.startMs, endMs: min(grant.endMs ?? Int64.max, grant.cut?.atMs ?? Int64.max))
        return interval.isEmpty ? nil : interval
    }

    /// Runs `offer eligibility` for user "u" on these purchases and returns the vip group's answer.
    /// Membership's granted interval of a purchase is Apple's own unless `granted` says otherwise
    /// (by purchase id; nil: nothing granted); `graces` are billing grace periods granted per subscription.
    private func eligibility(_ grants: [(String, PurchaseGrant)], granted: [String: Interval?] = [:],
                             graces: [(String, Interval)] = []) throws -> [String: Any] {
        var states: [String: SubscriptionState] = [:]
        for (key, grant) in grants {
            var state = states[key] ?? SubscriptionState(subscriptionKey: key, userId: "u")
            state.grants[grant.purchaseId] = grant
            state.granted[grant.purchaseId] = granted[grant.purchaseId] ?? appleInterval(of: grant)
            states[key] = state
        }
        for (key, interval) in graces {
            let id = "grace|\(interval.startMs)"
            states[key]?.graces[id] = SubscriptionState.GraceRecord(group: "vip", productId: nil, startMs: interval.startMs,
                                                                   endMs: interval.endMs ?? interval.startMs)
            states[key]?.granted[id] = interval
        }
        let (status, output) = try offerEligibility(states: Array(states.values), catalog: OfferCluster.catalog)
        XCTAssertEqual(status, 0, output)
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        return try XCTUnwrap((object?["groups"] as? [[String: Any]])?.first)
    }

    /// `storeledger offer eligibility` for user "u" in group vip, on these states and this catalog
    /// written to temporary files.
    private func offerEligibility(states: [SubscriptionState], catalog: Catalog) throws -> (status: Int32, output: String) {
        let directory = FileManager.default.temporaryDirectory
        let statesPath = directory.appendingPathComponent("offer-states-\(UUID().uuidString).json").path
        let catalogPath = directory.appendingPathComponent("offer-catalog-\(UUID().uuidString).json").path
        defer {
            try? FileManager.default.removeItem(atPath: statesPath)
            try? FileManager.default.removeItem(atPath: catalogPath)
        }
        try JSONEncoder().encode(states).write(to: URL(fileURLWithPath: statesPath))
        try JSONEncoder().encode(catalog).write(to: URL(fileURLWithPath: catalogPath))
        return try storeledger(["offer", "eligibility", "--user", "u", "--group", "vip", "--catalog", catalogPath,
                                "--states", statesPath, "--now", String(now)])
    }

    private func introEligible(_ answer: [String: Any]) -> Bool? { (answer["introOffer"] as? [String: Any])?["eligible"] as? Bool }
    private func shown(_ answer: [String: Any]) -> String? {
        (answer["products"] as? [[String: Any]])?.first { $0["productId"] as? String == "vip.1m" }?["show"] as? String
    }
    private func offerCodes(_ answer: [String: Any]) -> [String: String] {
        var codes: [String: String] = [:]
        for offer in answer["offers"] as? [[String: Any]] ?? [] {
            codes[offer["offerId"] as! String] = (offer["code"] as? String) ?? "eligible"
        }
        return codes
    }

    func testNewAccountGetsTheIntroVariantAndNoPromotionalOffer() throws {
        let answer = try eligibility([])
        XCTAssertEqual(introEligible(answer), true)
        XCTAssertEqual(shown(answer), "vip.1m.intro")
        XCTAssertEqual(offerCodes(answer), ["winback": "not_a_previous_subscriber", "loyalty": "not_a_previous_subscriber",
                                            "upgrade": "not_a_previous_subscriber"])
    }

    func testTrialOrIntroUnderAnyAppleIDEndsIntroEligibility() throws {
        // Apple ID 1 had a trial; Apple ID 2 (another subscription of the same account) bought plainly.
        let answer = try eligibility([
            grant("A", "a1", "vip.1m.intro", from: now - 100 * day, to: now - 93 * day, trial: true),
            grant("B", "b1", "vip.1m", from: now - 40 * day, to: now - 10 * day),
        ])
        XCTAssertEqual(introEligible(answer), false)
        XCTAssertEqual(shown(answer), "vip.1m")
        let intro = try eligibility([grant("A", "a1", "vip.1m.intro", from: now - 100 * day, to: now - 70 * day, intro: true)])
        XCTAssertEqual(introEligible(intro), false)
        let plain = try eligibility([grant("A", "a1", "vip.1m", from: now - 100 * day, to: now - 70 * day)])
        XCTAssertEqual(introEligible(plain), true, "a plain purchase does not use up the intro offer")
    }

    func testLapsedCurrentAndLevelRules() throws {
        let lapsed = try eligibility([grant("A", "a1", "vip.1m", from: now - 60 * day, to: now - 30 * day)])
        XCTAssertEqual(offerCodes(lapsed), ["winback": "eligible", "loyalty": "not_subscribed", "upgrade": "not_subscribed"])

        let refunded = try eligibility([grant("A", "a1", "vip.1m", from: now - 10 * day, to: now + 20 * day, refundedAt: now - 5 * day)])
        XCTAssertEqual(offerCodes(refunded)["winback"], "eligible", "a refund ended the subscription")

        let current = try eligibility([grant("A", "a1", "vip.1m", from: now - 10 * day, to: now + 20 * day)])
        XCTAssertEqual(offerCodes(current), ["winback": "still_subscribed", "loyalty": "eligible", "upgrade": "eligible"])

        let premium = try eligibility([grant("A", "a1", "vip.12m.premium", from: now - 10 * day, to: now + 355 * day)])
        XCTAssertEqual(offerCodes(premium)["upgrade"], "not_on_a_lower_level")
    }

    /// "Active" is what membership granted, not Apple's own period of the purchase.
    func testActiveMeansWhatMembershipGrantedUpgradesGraceAndCorrections() throws {
        // An upgrade replaced the yearly purchase 50 days ago; the monthly one that replaced it lapsed.
        let upgraded = try eligibility([
            grant("A", "a1", "vip.12m.premium", from: now - 60 * day, to: now + 305 * day),
            grant("A", "a2", "vip.1m", from: now - 50 * day, to: now - 20 * day),
        ], granted: ["p-a1": Interval(startMs: now - 60 * day, endMs: now - 50 * day)])
        XCTAssertEqual(offerCodes(upgraded), ["winback": "eligible", "loyalty": "not_subscribed", "upgrade": "not_subscribed"])

        // The period ended, but membership holds the group through a billing grace period.
        let grace = try eligibility([grant("A", "a1", "vip.1m", from: now - 32 * day, to: now - 2 * day)],
                                    graces: [("A", Interval(startMs: now - 2 * day, endMs: now + 14 * day))])
        XCTAssertEqual(offerCodes(grace), ["winback": "still_subscribed", "loyalty": "eligible", "upgrade": "eligible"])

        // A purchase a replay took back (no purchase of its own) counts nowhere.
        var gone = grant("A", "a1", "vip.1m.intro", from: now - 100 * day, to: now - 70 * day, trial: true)
        gone.1.cut = Cut(atMs: gone.1.startMs, kind: .correction)
        let corrected = try eligibility([gone], granted: ["p-a1": Interval?.none])
        XCTAssertEqual(introEligible(corrected), true)
        XCTAssertEqual(offerCodes(corrected)["winback"], "not_a_previous_subscriber")
    }

    func testUpgradeOfferLooksAtTheBestLevelTheAccountHoldsOnAnyAppleID() throws {
        // Premium (level 1) on Apple ID A; a newer monthly (level 2) on Apple ID B.
        let answer = try eligibility([
            grant("A", "a1", "vip.12m.premium", from: now - 100 * day, to: now + 265 * day),
            grant("B", "b1", "vip.1m", from: now - 10 * day, to: now + 20 * day),
        ])
        XCTAssertEqual(offerCodes(answer)["upgrade"], "not_on_a_lower_level")
    }

    /// The catalog is validated as the workers validate it: an offer id listed twice would decide by
    /// whichever came first.
    func testACatalogListingAnOfferTwiceIsRefused() throws {
        var catalog = OfferCluster.catalog
        catalog.promotionalOffers.append(PromotionalOffer(id: "winback", productId: "vip.1m", audience: .current, priority: 1))
        let (status, output) = try offerEligibility(states: [], catalog: catalog)
        XCTAssertNotEqual(status, 0, output)
        XCTAssertEqual(output, "", "no verdict from an invalid catalog")
    }

    func testRedemptionLimitsCountRedemptionsNotPeriods() throws {
        // One win-back redemption spanning three discounted months, long ago: the limit of 1 is reached.
        let once = try eligibility([
            grant("A", "a1", "vip.1m", from: now - 300 * day, to: now - 270 * day),
            grant("A", "a2", "vip.1m", from: now - 200 * day, to: now - 170 * day, offer: "winback"),
            grant("A", "a3", "vip.1m", from: now - 170 * day, to: now - 140 * day, offer: "winback"),
            grant("A", "a4", "vip.1m", from: now - 140 * day, to: now - 110 * day, offer: "winback"),
        ])
        XCTAssertEqual(offerCodes(once)["winback"], "redemption_limit_reached")
        XCTAssertEqual((once["offers"] as? [[String: Any]])?.first { $0["offerId"] as? String == "winback" }?["redemptions"] as? Int, 1)

        // Loyalty allows two: once on each Apple ID reaches it.
        let loyalty = try eligibility([
            grant("A", "a1", "vip.1m", from: now - 100 * day, to: now - 70 * day, offer: "loyalty"),
            grant("B", "b1", "vip.1m", from: now - 10 * day, to: now + 20 * day, offer: "loyalty"),
        ])
        XCTAssertEqual(offerCodes(loyalty)["loyalty"], "redemption_limit_reached")
        let loyaltyOnce = try eligibility([grant("B", "b1", "vip.1m", from: now - 10 * day, to: now + 20 * day, offer: "loyalty")])
        XCTAssertEqual(offerCodes(loyaltyOnce)["loyalty"], "eligible")
    }

    /// R9: a lapse and a resubscription with the offer on the same Apple ID (same original
    /// transaction id) is a second redemption, as is the offer taken again at a renewal once its own
    /// length (`offerPeriod`) ran out; periods inside that length stay one redemption.
    func testRedemptionsAfterALapseOrAfterTheOfferRanOutCountAgain() throws {
        func redemptions(_ answer: [String: Any], _ offer: String) -> Int? {
            (answer["offers"] as? [[String: Any]])?.first { $0["offerId"] as? String == offer }?["redemptions"] as? Int
        }
        let lapsedTwice = try eligibility([
            grant("A", "a1", "vip.1m", from: now - 300 * day, to: now - 270 * day, offer: "loyalty"),
            grant("A", "a2", "vip.1m", from: now - 100 * day, to: now - 70 * day, offer: "loyalty"),
            grant("A", "a3", "vip.1m", from: now - 10 * day, to: now + 20 * day),
        ])
        XCTAssertEqual(redemptions(lapsedTwice, "loyalty"), 2)
        XCTAssertEqual(offerCodes(lapsedTwice)["loyalty"], "redemption_limit_reached")

        // A one-month offer taken at two renewals in a row: two redemptions; a three-month one
        // over the same three periods: one.
        func period(_ i: Int64, _ tx: String, offer: String?, length: String) -> (String, PurchaseGrant) {
            let start: Int64 = now - (90 - 30 * i) * day
            return grant("A", tx, "vip.1m", from: start, to: start + 30 * day, offer: offer, offerPeriod: length)
        }
        let monthly = [period(0, "m0", offer: "loyalty", length: "P1M"), period(1, "m1", offer: "loyalty", length: "P1M"),
                       period(2, "m2", offer: nil, length: "P1M")]
        XCTAssertEqual(redemptions(try eligibility(monthly), "loyalty"), 2)
        let quarterly = [period(0, "q0", offer: "loyalty", length: "P3M"), period(1, "q1", offer: "loyalty", length: "P3M"),
                         period(2, "q2", offer: "loyalty", length: "P3M")]
        XCTAssertEqual(redemptions(try eligibility(quarterly + [grant("A", "q3", "vip.1m", from: now, to: now + 30 * day)]), "loyalty"), 1)
    }

    /// Offers are for auto-renewable subscribers (a lifetime product sharing the group makes no one a
    /// subscriber), and R18: with production history, a free sandbox purchase counts for nothing; an
    /// account known only in the sandbox (a tester) is judged there.
    func testOnlyAutoRenewableAndProductionHistoryDecides() throws {
        let lifetimeOnly = try eligibility([grant("L", "l1", "vip.lifetime", from: now - 100 * day, to: now + 10_000 * day, kind: .nonConsumable)])
        XCTAssertEqual(offerCodes(lifetimeOnly)["winback"], "not_a_previous_subscriber")
        XCTAssertEqual(introEligible(lifetimeOnly), true)

        let sandboxTrial = grant("S@Sandbox", "s1", "vip.1m.intro", from: now - 100 * day, to: now - 93 * day, trial: true,
                                 offer: "winback", environment: "Sandbox")
        let production = grant("P", "p1", "vip.1m", from: now - 10 * day, to: now + 20 * day)
        let both = try eligibility([sandboxTrial, production])
        XCTAssertEqual(introEligible(both), true, "a TestFlight trial does not spend the production intro offer")
        XCTAssertEqual(offerCodes(both)["loyalty"], "eligible")
        let testerOnly = try eligibility([sandboxTrial])
        XCTAssertEqual(introEligible(testerOnly), false)
        XCTAssertEqual(offerCodes(testerOnly)["winback"], "redemption_limit_reached")
    }
}
