import Domain
import Foundation
import Synchronization

/// The simulated App Store's settings: the app it sells for and the products it sells.
public struct StoreConfig: Sendable {
    public var bundleId: String
    public var appAppleId: Int64
    public var bundleVersion: String
    /// The V1 `password` (app-specific shared secret).
    public var sharedSecret: String
    public var catalog: Catalog
    /// Makes ids unique per run, so runs against a long-lived pipeline never collide.
    public var runId: Int

    public init(bundleId: String, appAppleId: Int64 = 1_234_567_890, bundleVersion: String = "42",
                sharedSecret: String = "simulator-shared-secret", catalog: Catalog, runId: Int) {
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.bundleVersion = bundleVersion
        self.sharedSecret = sharedSecret
        self.catalog = catalog
        self.runId = runId % 900_000
    }
}

public struct SimulatorError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The ground truth: users, Apple IDs, subscriptions and every transaction, with the mutations
/// the App Store performs (charge, renew, refund, switch, restore, move storefront). Mutations are
/// plain state changes; what goes on the wire is `WireEmitter`'s business.
public struct StoreState: Sendable {
    public let config: StoreConfig
    public private(set) var users: [String: SimUser] = [:]
    public private(set) var subscriptions: [String: SimSubscription] = [:]
    /// Digits that make this state's ids unique: the run, then the user (or probe) number.
    public let idPrefix: String
    private var nextTransaction: Int64 = 0
    private var nextWebOrder: Int64 = 0

    /// `block` numbers the independent id ranges (one per simulated user), so states built apart
    /// can be merged without collisions.
    public init(config: StoreConfig, block: Int = 0) {
        self.config = config
        let run = String(1000 + config.runId)
        let user = String(block % 10_000_000)
        self.idPrefix = run + String(repeating: "0", count: 7 - user.count) + user
    }

    /// Overwrites one subscription (scripts that need what Apple said before a later change).
    public mutating func replace(_ subscription: SimSubscription) {
        subscriptions[subscription.originalTransactionId] = subscription
    }

    /// Adds another state's users and subscriptions (built with another `block`).
    public mutating func absorb(_ other: StoreState) {
        users.merge(other.users) { $1 }
        subscriptions.merge(other.subscriptions) { $1 }
    }

    public func user(_ id: String) throws -> SimUser {
        guard let user = users[id] else { throw SimulatorError("unknown user \(id)") }
        return user
    }

    public func subscription(_ otid: String) throws -> SimSubscription {
        guard let subscription = subscriptions[otid] else { throw SimulatorError("unknown subscription \(otid)") }
        return subscription
    }

    public func product(_ id: String) throws -> CatalogProduct {
        guard let product = config.catalog.product(id) else { throw SimulatorError("product \(id) is not in the catalog") }
        return product
    }

    /// The group a product entitles (its own id when the catalog names none).
    public func group(of product: CatalogProduct) -> String { product.group ?? product.id }

    func periodMs(_ product: CatalogProduct) -> Int64 { Int64(product.durationDays ?? 30) * 86_400_000 }

    // MARK: ids

    /// Numeric like Apple's (`1000000318407192`), 15 to 17 digits, unique per run and block.
    private mutating func newTransactionId() -> String {
        nextTransaction += 1
        return idPrefix + Self.pad(nextTransaction, 4)
    }

    /// An INTEGER in receipts (attribute 1711): starts with 5 and fits Int64.
    private mutating func newWebOrderLineItemId() -> String {
        nextWebOrder += 1
        return "5" + idPrefix.dropFirst() + Self.pad(nextWebOrder, 4)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    // MARK: users

    public mutating func addUser(_ userId: String) {
        guard users[userId] == nil else { return }
        users[userId] = SimUser(userId: userId, appAccountToken: Self.accountToken(userId), appleIds: [], subscriptionIds: [],
                                introUsedGroups: [], promotionalRedemptions: [:], journey: [])
    }

    /// The app account token the app gives StoreKit: the account id itself when it is a UUID
    /// (the catalog's default `appAccountToken: user-id` policy), else a UUID derived from it.
    public static func accountToken(_ userId: String) -> String {
        if UUID(uuidString: userId) != nil { return userId.lowercased() }
        let fnv = userId.utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        return userUUID(seed: fnv, index: Int(fnv >> 40))
    }

    /// A lowercase UUID (version 4 layout) for user `index` of run `seed`: apps use UUID account
    /// ids, and the pipeline links `appAccountToken` to the account of the same id.
    public static func userUUID(seed: UInt64, index: Int) -> String {
        func hex(_ value: UInt64, _ digits: Int) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: max(0, digits - text.count)) + text.suffix(digits)
        }
        let a = seed & 0xFFFF_FFFF_FFFF
        return "\(hex(a >> 16, 8))-\(hex(a & 0xFFFF, 4))-4\(hex(UInt64(index) >> 48, 3))-8\(hex(UInt64(index) >> 36 & 0xFFF, 3))-\(hex(UInt64(index) & 0xF_FFFF_FFFF, 12))"
    }

    @discardableResult
    public mutating func addAppleID(user userId: String, storefront: String = "USA", environment: SimEnvironment = .production) throws -> Int {
        var user = try user(userId)
        let index = user.appleIds.count
        user.appleIds.append(SimAppleID(id: "\(userId).apple\(index + 1)", storefront: storefront, environment: environment))
        users[userId] = user
        return index
    }

    public mutating func log(_ userId: String, _ atMs: Int64, _ text: String) {
        users[userId]?.journey.append("\(AppleDates.readable(atMs))  \(text)")
    }

    // MARK: purchases

    /// A purchase the user makes in the app: a first subscription (new otid), a resubscription in
    /// a group this Apple ID already had (same otid, as Apple keeps it), or a one-time product.
    @discardableResult
    public mutating func purchase(user userId: String, appleId index: Int, productId: String, atMs: Int64,
                                  offer: SimOffer = .none) throws -> SimTransaction {
        var user = try user(userId)
        guard user.appleIds.indices.contains(index) else { throw SimulatorError("user \(userId) has no Apple ID #\(index)") }
        let appleId = user.appleIds[index]
        let product = try product(productId)
        let group = group(of: product)
        let existing = product.kind == .autoRenewable
            ? user.subscriptionIds.first { id in
                guard let s = subscriptions[id] else { return false }
                return s.appleIdIndex == index && s.group == group && s.kind == .autoRenewable && s.movedTo == nil
            }
            : nil
        let transactionId = newTransactionId()
        let otid = existing ?? transactionId
        let originalPurchase = existing.flatMap { subscriptions[$0]?.transactions.first?.purchaseMs } ?? atMs
        var transaction = SimTransaction(
            transactionId: transactionId, originalTransactionId: otid,
            webOrderLineItemId: product.kind == .autoRenewable ? newWebOrderLineItemId() : nil,
            productId: productId, kind: product.kind, group: group, purchaseMs: atMs, originalPurchaseMs: originalPurchase,
            expiresMs: nil, durationMs: nil, cancellationMs: nil, cancellationReason: nil, isUpgraded: false, offer: offer,
            isRenewal: false, appAccountToken: appleId.appAccount.map(Self.accountToken) ?? user.appAccountToken, storefront: appleId.storefront,
            environment: appleId.environment, restoredIds: [], finished: false, credits: product.credits ?? 1)
        switch product.kind {
        case .autoRenewable:
            transaction.expiresMs = atMs + periodMs(product)
        case .nonRenewing:
            transaction.durationMs = periodMs(product)
        default:
            break
        }
        if offer.isIntroductory { user.introUsedGroups.insert(group) }
        if case .promotional(let id) = offer { user.promotionalRedemptions[id, default: 0] += 1 }
        if var subscription = existing.flatMap({ subscriptions[$0] }) {
            subscription.transactions.append(transaction)
            subscription.autoRenew = true
            subscription.autoRenewProductId = productId
            subscription.billing = .paid
            subscriptions[otid] = subscription
        } else {
            subscriptions[otid] = SimSubscription(
                originalTransactionId: otid, userId: userId, appleIdIndex: index, group: group, kind: product.kind,
                environment: appleId.environment, transactions: [transaction], autoRenew: product.kind == .autoRenewable,
                autoRenewProductId: productId)
            user.subscriptionIds.append(otid)
        }
        users[userId] = user
        let offerText = offer == .none ? "" : " [\(offer)]"
        log(userId, atMs, "\(existing == nil ? "buy" : "resubscribe") \(productId)\(offerText) on \(appleId.id) (\(appleId.environment.rawValue), \(appleId.storefront)): otid \(otid) txn \(transactionId)\(transaction.expiresMs.map { " until \(AppleDates.readable($0))" } ?? "")")
        return transaction
    }

    /// Apple charges the next period: starts at the previous expiry (charged `chargeMs`, up to a
    /// day earlier), on the product chosen for renewal (a pending downgrade/crossgrade lands here).
    @discardableResult
    public mutating func renew(_ otid: String, chargeMs: Int64? = nil) throws -> SimTransaction {
        var subscription = try subscription(otid)
        guard let last = subscription.latest, let previousEnd = last.expiresMs else {
            throw SimulatorError("subscription \(otid) has no period to renew")
        }
        let product = try product(subscription.autoRenewProductId)
        let transaction = SimTransaction(
            transactionId: newTransactionId(), originalTransactionId: otid, webOrderLineItemId: newWebOrderLineItemId(),
            productId: product.id, kind: .autoRenewable, group: subscription.group,
            purchaseMs: chargeMs ?? previousEnd, originalPurchaseMs: subscription.transactions[0].purchaseMs,
            expiresMs: previousEnd + periodMs(product), durationMs: nil, cancellationMs: nil, cancellationReason: nil,
            isUpgraded: false, offer: .none, isRenewal: true, appAccountToken: last.appAccountToken,
            storefront: last.storefront, environment: subscription.environment, restoredIds: [], finished: false, credits: 1)
        subscription.transactions.append(transaction)
        subscription.billing = .paid
        subscriptions[otid] = subscription
        log(subscription.userId, transaction.purchaseMs, "renewal \(product.id): otid \(otid) txn \(transaction.transactionId) until \(AppleDates.readable(transaction.expiresMs!))")
        return transaction
    }

    public mutating func setAutoRenew(_ otid: String, on: Bool, atMs: Int64) throws {
        var subscription = try subscription(otid)
        subscription.autoRenew = on
        subscription.autoRenewChangedMs = atMs
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "auto-renew \(on ? "on" : "off"): otid \(otid)")
    }

    /// A downgrade or a crossgrade to another duration: effective at the next renewal (R5).
    public mutating func setRenewalProduct(_ otid: String, productId: String, atMs: Int64) throws {
        var subscription = try subscription(otid)
        _ = try product(productId)
        subscription.autoRenewProductId = productId
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "renewal product \(subscription.productId) -> \(productId) from the next renewal: otid \(otid)")
    }

    /// An upgrade or a same-level same-duration crossgrade: immediate; the current period is
    /// cancelled at the switch (is_upgraded) and refunded pro rata; a new period starts (R5).
    @discardableResult
    public mutating func switchNow(_ otid: String, to productId: String, atMs: Int64, keepAutoRenew: Bool = true) throws -> (old: SimTransaction, new: SimTransaction) {
        var subscription = try subscription(otid)
        guard var old = subscription.latest else { throw SimulatorError("subscription \(otid) has no period") }
        let product = try product(productId)
        old.cancellationMs = atMs
        old.isUpgraded = true
        subscription.transactions[subscription.transactions.count - 1] = old
        let new = SimTransaction(
            transactionId: newTransactionId(), originalTransactionId: otid, webOrderLineItemId: newWebOrderLineItemId(),
            productId: productId, kind: .autoRenewable, group: subscription.group, purchaseMs: atMs,
            originalPurchaseMs: subscription.transactions[0].purchaseMs, expiresMs: atMs + periodMs(product), durationMs: nil,
            cancellationMs: nil, cancellationReason: nil, isUpgraded: false, offer: .none, isRenewal: false,
            appAccountToken: old.appAccountToken, storefront: old.storefront, environment: subscription.environment,
            restoredIds: [], finished: false, credits: 1)
        subscription.transactions.append(new)
        subscription.autoRenewProductId = productId
        subscription.autoRenew = keepAutoRenew
        if !keepAutoRenew { subscription.autoRenewChangedMs = atMs }
        subscription.billing = .paid
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "switch \(old.productId) -> \(productId) now\(keepAutoRenew ? "" : " and auto-renew off"): txn \(old.transactionId) cancelled, new txn \(new.transactionId) until \(AppleDates.readable(new.expiresMs!))")
        return (old, new)
    }

    /// Apple reverses a refund (V2 REFUND_REVERSED): the purchase stands again, whole.
    @discardableResult
    public mutating func reverseRefund(_ otid: String, transactionId: String, atMs: Int64) throws -> SimTransaction {
        var subscription = try subscription(otid)
        guard let index = subscription.transactions.firstIndex(where: { $0.transactionId == transactionId }) else {
            throw SimulatorError("subscription \(otid) has no transaction \(transactionId)")
        }
        if let refunded = subscription.transactions[index].cancellationMs {
            subscription.transactions[index].reversal = SimReversal(refundMs: refunded, reversedMs: atMs)
        }
        subscription.transactions[index].cancellationMs = nil
        subscription.transactions[index].cancellationReason = nil
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "refund of txn \(transactionId) reversed")
        return subscription.transactions[index]
    }

    /// Apple support refunds a transaction at `atMs` (R3 c, R11). A refunded subscription stops renewing.
    @discardableResult
    public mutating func refund(_ otid: String, transactionId: String, atMs: Int64, reason: String = "0") throws -> SimTransaction {
        var subscription = try subscription(otid)
        guard let index = subscription.transactions.firstIndex(where: { $0.transactionId == transactionId }) else {
            throw SimulatorError("subscription \(otid) has no transaction \(transactionId)")
        }
        var transaction = subscription.transactions[index]
        transaction.cancellationMs = atMs
        transaction.cancellationReason = reason
        subscription.transactions[index] = transaction
        if subscription.kind == .autoRenewable, index == subscription.transactions.count - 1 {
            subscription.autoRenew = false
            subscription.autoRenewChangedMs = atMs
        }
        subscriptions[otid] = subscription
        let after = transaction.paidEndMs.map { atMs >= $0 } ?? false
        log(subscription.userId, atMs, "refund of txn \(transactionId) (\(transaction.productId)) reason \(reason)\(after ? ", after its period ended" : "")")
        return transaction
    }

    /// The renewal charge failed; Apple retries (billing retry), with a grace period if configured.
    public mutating func failRenewal(_ otid: String, atMs: Int64, graceMs: Int64?) throws {
        var subscription = try subscription(otid)
        subscription.billing = .retrying(sinceMs: atMs, graceUntilMs: graceMs.map { atMs + $0 })
        if let graceMs, let end = subscription.latest?.expiresMs, atMs + graceMs > end {
            subscription.graceWindows.append(GraceWindow(fromMs: end, untilMs: atMs + graceMs))
        }
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "renewal charge failed: otid \(otid)\(graceMs.map { " (grace period \($0 / 86_400_000) days)" } ?? " (billing retry)")")
    }

    /// Billing recovered at `atMs`. Within a grace period the renewal date does not move; after
    /// it (or without one) the new period starts at the recovery.
    @discardableResult
    public mutating func recover(_ otid: String, atMs: Int64) throws -> SimTransaction {
        let subscription = try subscription(otid)
        guard case .retrying(_, let graceUntil) = subscription.billing, let end = subscription.latest?.expiresMs else {
            throw SimulatorError("subscription \(otid) is not in billing retry")
        }
        let product = try product(subscription.autoRenewProductId)
        let inGrace = graceUntil.map { atMs < $0 } ?? false
        var transaction = try renew(otid, chargeMs: atMs)
        if !inGrace {
            transaction.expiresMs = atMs + periodMs(product)
            var updated = try self.subscription(otid)
            updated.transactions[updated.transactions.count - 1] = transaction
            subscriptions[otid] = updated
        }
        _ = end
        log(subscription.userId, atMs, "billing recovered\(inGrace ? " in the grace period" : ""): txn \(transaction.transactionId) until \(AppleDates.readable(transaction.expiresMs!))")
        return transaction
    }

    public mutating func expire(_ otid: String, atMs: Int64, intent: String) throws {
        var subscription = try subscription(otid)
        subscription.billing = .expired(intent: intent)
        subscription.autoRenew = false
        subscriptions[otid] = subscription
        log(subscription.userId, atMs, "expired (intent \(intent)): otid \(otid)")
    }

    /// The user moved to another App Store country: the subscription continues under a new
    /// original_transaction_id from the end of the current period (R6, S10).
    @discardableResult
    public mutating func moveStorefront(_ otid: String, to storefront: String, atMs: Int64) throws -> SimTransaction {
        var old = try subscription(otid)
        guard let last = old.latest, let end = last.expiresMs else { throw SimulatorError("subscription \(otid) has no period") }
        var user = try user(old.userId)
        user.appleIds[old.appleIdIndex].storefront = storefront
        users[old.userId] = user
        let product = try product(old.autoRenewProductId)
        let transactionId = newTransactionId()
        let transaction = SimTransaction(
            transactionId: transactionId, originalTransactionId: transactionId, webOrderLineItemId: newWebOrderLineItemId(),
            productId: product.id, kind: .autoRenewable, group: old.group, purchaseMs: end, originalPurchaseMs: end,
            expiresMs: end + periodMs(product), durationMs: nil, cancellationMs: nil, cancellationReason: nil, isUpgraded: false,
            offer: .none, isRenewal: false, appAccountToken: last.appAccountToken, storefront: storefront,
            environment: old.environment, restoredIds: [], finished: false, credits: 1)
        old.movedTo = transactionId
        old.autoRenew = false
        subscriptions[otid] = old
        subscriptions[transactionId] = SimSubscription(
            originalTransactionId: transactionId, userId: old.userId, appleIdIndex: old.appleIdIndex, group: old.group,
            kind: .autoRenewable, environment: old.environment, transactions: [transaction], autoRenew: true,
            autoRenewProductId: product.id)
        users[old.userId]?.subscriptionIds.append(transactionId)
        log(old.userId, atMs, "storefront \(last.storefront) -> \(storefront): otid \(otid) continues as otid \(transactionId) from \(AppleDates.readable(end))")
        return transaction
    }

    /// Restore on a new device: every transaction of the Apple ID comes back with a new
    /// transaction id (previous + 1 style), same purchase (S1). Returns canonical → new id.
    @discardableResult
    public mutating func restore(user userId: String, appleId index: Int, atMs: Int64) throws -> [String: String] {
        var user = try user(userId)
        user.appleIds[index].devices += 1
        users[userId] = user
        var mapping: [String: String] = [:]
        for otid in user.subscriptionIds {
            guard var subscription = subscriptions[otid], subscription.appleIdIndex == index,
                  subscription.kind != .consumable else { continue }
            for i in subscription.transactions.indices {
                let newId = newTransactionId()
                subscription.transactions[i].restoredIds.append(newId)
                mapping[subscription.transactions[i].transactionId] = newId
            }
            subscriptions[otid] = subscription
        }
        log(userId, atMs, "restore on a new device (\(user.appleIds[index].id) device \(user.appleIds[index].devices)): \(mapping.count) transactions get new ids")
        return mapping
    }

    /// The user signs in to the app with another account on this Apple ID's device (R6): from now
    /// on that account uploads the receipts and is the token of new purchases.
    public mutating func signIn(account: String, user userId: String, appleId index: Int, atMs: Int64) throws {
        addUser(account)
        var user = try user(userId)
        user.appleIds[index].appAccount = account
        users[userId] = user
        log(userId, atMs, "signs in to the app as another account \(account) with \(user.appleIds[index].id)")
        log(account, atMs, "account of user \(userId), signed in with \(user.appleIds[index].id)")
    }

    /// The subscriptions a receipt of this Apple ID made at `atMs` shows, each with the transactions it
    /// lists: purchases made by then, consumables the app has not finished.
    public func receiptContents(user userId: String, appleId index: Int, atMs: Int64) -> [(SimSubscription, [SimTransaction])] {
        subscriptions(ofUser: userId, appleId: index).compactMap { subscription in
            let shown = subscription.transactions.filter { !($0.kind == .consumable && $0.finished) && $0.purchaseMs <= atMs }
            return shown.isEmpty ? nil : (subscription, shown)
        }
    }

    /// Records that `account` uploaded, at `claimMs`, this Apple ID's receipt made at `receiptMs`: a
    /// claim on every subscription it shows.
    public mutating func recordUpload(account: String, user userId: String, appleId index: Int, receiptMs: Int64, claimMs: Int64) {
        for (subscription, _) in receiptContents(user: userId, appleId: index, atMs: receiptMs) {
            let otid = subscription.originalTransactionId
            subscriptions[otid]?.uploadClaims.append(SimClaim(account: account, atMs: claimMs))
            if account != userId, users[account]?.claimedSubscriptionIds.contains(otid) == false {
                users[account]?.claimedSubscriptionIds.append(otid)
            }
        }
    }

    public mutating func finishConsumables(user userId: String) {
        guard let user = users[userId] else { return }
        for otid in user.subscriptionIds {
            guard var subscription = subscriptions[otid], subscription.kind == .consumable else { continue }
            for i in subscription.transactions.indices { subscription.transactions[i].finished = true }
            subscriptions[otid] = subscription
        }
    }

    /// What the app shows (R8): accounts that never had an intro or trial in the group get the
    /// intro variant; the others the plain product. The simulator's own rule, used when no
    /// eligibility API answers.
    public func servedVariant(user userId: String, productId: String) -> String {
        guard let product = config.catalog.product(productId), let intro = product.introVariantOf,
              let user = users[userId] else { return productId }
        return user.introUsedGroups.contains(group(of: product)) ? productId : intro
    }

    /// Every subscription of one Apple ID, oldest first (what its receipt holds).
    public func subscriptions(ofUser userId: String, appleId index: Int) -> [SimSubscription] {
        (users[userId]?.subscriptionIds ?? []).compactMap { subscriptions[$0] }.filter { $0.appleIdIndex == index }
    }
}

/// The store shared between the journey generator and the verifyReceipt endpoint's threads.
public final class AppStore: Sendable {
    public let config: StoreConfig
    private let state: Mutex<StoreState>

    public init(config: StoreConfig) {
        self.config = config
        self.state = Mutex(StoreState(config: config))
    }

    public func read<R: Sendable>(_ body: (StoreState) throws -> R) rethrows -> R {
        try state.withLock { try body($0) }
    }

    public func mutate<R: Sendable>(_ body: (inout StoreState) throws -> R) rethrows -> R {
        try state.withLock { try body(&$0) }
    }
}
