@testable import Domain
import Foundation
import XCTest

/// The three stages as pure functions, fed one event at a time: dedupe (with its seen-key and
/// purchase memory), classify (with a catalog), membership (a book of subscriptions). Tests read
/// like transcripts: state + event → commands → ledger entries.
struct Transcript {
    var catalog: Catalog
    var known: [String: [KnownPurchase]] = [:]
    var seen: Set<String> = []
    var book = MembershipBook()
    var ledger: [LedgerEntry] = []

    init(catalog: Catalog = TestCatalog.standard) { self.catalog = catalog }

    struct Step {
        var unique: UniqueEvent?
        var commands: [MembershipCommand]
        var entries: [LedgerEntry]
    }

    @discardableResult
    mutating func feed(_ event: AppleEvent) -> Step {
        let key = "\(event.subscriptionKey)|\(seenKey(of: event))"
        guard seen.insert(key).inserted else { return Step(unique: nil, commands: [], entries: []) }
        let outcome = dedupe(event: event, known: known[event.subscriptionKey] ?? [])
        known[event.subscriptionKey] = outcome.updated
        guard !outcome.changes.isEmpty || event.notification != nil || event.renewalInfo != nil || event.appUserId != nil else {
            return Step(unique: nil, commands: [], entries: [])
        }
        let unique = UniqueEvent(event: event, purchases: outcome.changes)
        let commands = classify(unique, catalog: catalog)
        var entries: [LedgerEntry] = []
        for command in commands { entries += book.apply(command) }
        ledger += entries
        return Step(unique: unique, commands: commands, entries: entries)
    }

    func state(_ key: String) -> SubscriptionState { book.subscriptions[key] ?? SubscriptionState(subscriptionKey: key) }
    func entitlement(_ key: String, _ group: String = "vip") -> [Interval] { state(key).entitlement(group: group) }
    func user(_ user: String) -> [GroupMembership] { groupMemberships(of: book.states(ofUser: user)) }
}

enum TestCatalog {
    static let standard = Catalog(
        bundleId: "com.example.app",
        products: [
            CatalogProduct(id: "vip.premium.1m", kind: .autoRenewable, group: "vip", level: 1, durationDays: 30),
            CatalogProduct(id: "vip.a.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.b.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.a.3m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 90),
            CatalogProduct(id: "vip.basic.1m", kind: .autoRenewable, group: "vip", level: 3, durationDays: 30),
            CatalogProduct(id: "vip.a.1m.nointro", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30,
                           introVariantOf: "vip.a.1m"),
            CatalogProduct(id: "coins.100", kind: .consumable, group: "coins", credits: 100),
            CatalogProduct(id: "lifetime", kind: .nonConsumable, group: "lifetime"),
            CatalogProduct(id: "pass.7d", kind: .nonRenewing, group: "pass", durationDays: 7),
        ],
        promotionalOffers: [PromotionalOffer(id: "winback", productId: "vip.a.1m", audience: .lapsed, maxRedemptionsPerUser: 1)],
        groups: [SubscriptionGroup(id: "vip", name: "VIP")])

    static func with(_ policy: AccountPolicy) -> Catalog {
        var catalog = standard
        catalog.accounts = policy
        return catalog
    }
}

let day: Int64 = 86_400_000
let month: Int64 = 30 * day
/// 2020-06-27T00:02:39Z, the fixture's purchase instant.
let t0: Int64 = 1_593_216_159_000

/// Builders for Apple facts as the decode stage normalizes them.
enum Apple {
    static func tx(_ id: String, otid: String, product: String = "vip.a.1m", purchase: Int64, expires: Int64? = nil,
                   web: String? = nil, cancel: Int64? = nil, reason: String? = nil, upgraded: Bool? = nil,
                   trial: Bool? = nil, intro: Bool? = nil, promo: String? = nil, code: String? = nil,
                   token: String? = nil, quantity: Int = 1) -> TransactionFacts {
        TransactionFacts(transactionId: id, originalTransactionId: otid, webOrderLineItemId: web, productId: product,
                         bundleId: "com.example.app", purchaseDateMs: purchase, expiresDateMs: expires,
                         cancellationDateMs: cancel, cancellationReason: reason, isUpgraded: upgraded,
                         isTrialPeriod: trial, isInIntroOfferPeriod: intro, promotionalOfferId: promo,
                         offerCodeRefName: code, quantity: quantity, appAccountToken: token)
    }

    /// A subscription period of `product` starting at `start` (one month unless `length`).
    static func period(_ id: String, otid: String, product: String = "vip.a.1m", start: Int64, length: Int64 = month,
                       token: String? = nil) -> TransactionFacts {
        tx(id, otid: otid, product: product, purchase: start, expires: start + length, web: "w\(id)", token: token)
    }

    static func v1(_ type: String, otid: String, _ transactions: [TransactionFacts], autoRenew: Bool? = true,
                   autoRenewProduct: String? = nil, statusChange: Int64? = nil, renewal: RenewalFacts? = nil,
                   id: String? = nil) -> AppleEvent {
        let product = transactions.max { $0.purchaseDateMs < $1.purchaseDateMs }?.productId
        let info = renewal ?? RenewalFacts(originalTransactionId: otid, productId: product,
                                           autoRenewProductId: autoRenewProduct ?? product, autoRenewStatus: autoRenew)
        return AppleEvent(eventId: id ?? "v1:\(type):\(otid):\(transactions.map(\.transactionId).joined(separator: ",")):\(statusChange ?? 0)",
                          source: .notificationV1, environment: "Production", bundleId: "com.example.app",
                          subscriptionKey: otid,
                          notification: NotificationMeta(type: type, autoRenewStatus: autoRenew,
                                                         autoRenewProductId: autoRenewProduct ?? product,
                                                         autoRenewStatusChangeDateMs: statusChange),
                          transactions: transactions, renewalInfo: info, receivedAtMs: 1, rawPosition: nil)
    }

    static func v2(_ type: String, subtype: String? = nil, uuid: String, otid: String, _ transactions: [TransactionFacts],
                   renewal: RenewalFacts? = nil, signed: Int64) -> AppleEvent {
        AppleEvent(eventId: "v2:\(uuid)", source: .notificationV2, environment: "Production", bundleId: "com.example.app",
                   subscriptionKey: otid,
                   notification: NotificationMeta(type: type, subtype: subtype, uuid: uuid, signedDateMs: signed,
                                                  autoRenewStatus: renewal?.autoRenewStatus,
                                                  autoRenewProductId: renewal?.autoRenewProductId),
                   transactions: transactions, renewalInfo: renewal, receivedAtMs: 1, rawPosition: nil)
    }

    static func receipt(user: String?, otid: String, _ transactions: [TransactionFacts], id: String) -> AppleEvent {
        AppleEvent(eventId: "receipt:\(id)", source: .appReceipt, environment: "Production", bundleId: "com.example.app",
                   subscriptionKey: otid, transactions: transactions, appUserId: user, receivedAtMs: 1, rawPosition: nil)
    }
}

func interval(_ start: Int64, _ end: Int64?) -> Interval { Interval(startMs: start, endMs: end) }

extension Array where Element == LedgerEntry {
    var kinds: [LedgerEntry.Kind] { map(\.kind) }
}
