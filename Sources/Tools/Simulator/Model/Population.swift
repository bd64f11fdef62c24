import Domain

/// How a random population behaves and how it reaches StoreLedger.
public struct PopulationConfig: Sendable {
    public var seed: UInt64 = 1
    public var users: Int = 1000
    /// Simulated span: the year 2025 by default.
    public var startMs: Int64 = 1_735_689_600_000
    public var days: Int = 365
    /// Which notification versions Apple sends (an app may have V1 and V2 endpoints; both by default,
    /// so every fact reaches the pipeline through several paths, R2).
    public var v1 = true
    public var v2 = true
    public var sandboxShare = 0.03
    /// V1 bodies in the pre-2021-03-10 shape.
    public var legacyV1Share = 0.15
    /// The app notices a renewal and uploads its receipt.
    public var uploadAfterRenewal = 0.3
    public var uploadTwice = 0.1
    public var uploadWithoutOptionalFields = 0.25
    /// An upload missing `receipt_data` (ingest must answer 400; counted, not checked).
    public var malformedUpload = 0.005
    /// Mean time between a subscriber's own actions (switch, cancel, refund, restore...).
    public var meanDaysBetweenActions = 45.0
    public var billingFailure = 0.05
    public var graceDays = 6
    /// A refund Apple reverses days later (V2 REFUND_REVERSED); half of those also lose the REFUND's
    /// first delivery, so Apple's retry (the same signed payload) arrives after the reversal (R14).
    public var refundReversed = 0.2
    /// V1 CANCEL bodies whose `latest_receipt_info` does not show the cancellation (R15).
    public var cancelOnlyAtTopLevel = 0.3
    /// Receipt uploads that print the account's UUID in upper case (R17).
    public var upperCaseUpload = 0.2
    /// V1 bodies whose `unified_receipt` lists every subscription of the Apple ID (R16).
    public var v1EverySubscription = 0.5
    /// Include consumables (their balances are checked when the API shows them).
    public var consumables = true
    /// Users who restore their Apple ID's purchases on another app account (R6: the catalog's
    /// transfer policy `move` gives that account all of them; later renewals carry the first
    /// account's token and claim nothing, R17).
    public var restoreOnOtherAccount = 0.04
    /// Users who buy in Production and in the Sandbox (a tester's Apple ID) side by side (R18).
    public var bothEnvironments = 0.04

    public init() {}
}

/// Plays one random user's year against the store and returns what reached the wire, in
/// simulated-time order. Every journey kind of issue 5 occurs: first purchase with or without an
/// intro offer or trial, renewals, restore on a new device, crossgrade same/other duration,
/// upgrade, downgrade, cancel + switch, refund mid-period and after the period, auto-renew off
/// and on, billing retry with and without grace, storefront change, promotional offer
/// redemption, a second Apple ID on one account, and one-time products of every type.
public struct JourneyPlayer {
    public let config: PopulationConfig
    let emitter: WireEmitter
    var rng: SimRandom
    var state: StoreState
    let userId: String
    let userIndex: Int
    /// The app accounts this user plays: their own, then any they restored on.
    public private(set) var accounts: [String]
    /// Decided per user: one of their later actions is a restore on another account.
    private var plansOtherAccount = false
    var deliveries: [Delivery] = []
    private var queue: [(ms: Int64, order: Int, event: Event)] = []
    private var order = 0
    /// The simulated instant being played: deliveries dated later wait in the queue until then.
    private var now: Int64 = 0
    let endMs: Int64

    enum Event {
        /// Apple's renewal attempt for the period ending at `expiresMs`, played when Apple charges
        /// (up to an hour before the end); `chargeFails` decided when the period began.
        case periodEnd(String, expiresMs: Int64, chargeFails: Bool)
        case action(String)
        case billingOutcome(String)
        case resubscribe(group: String, appleId: Int)
        case oneTime
        case secondAppleId(group: String)
        /// The user also buys with an Apple ID of the other environment (R18).
        case otherEnvironment(group: String)
        /// Apple reverses the refund; `retry` is the REFUND delivery Apple sends again afterwards.
        case reverseRefund(otid: String, transactionId: String, retry: Delivery?)
        /// Apple support refunds a one-time purchase.
        case refundOneTime(otid: String, transactionId: String)
        /// A delivery dated later than the moment it was decided: built when the world reaches its date.
        case send(Outgoing)
    }

    /// What goes on the wire, decided ahead (its random choices made) but built at its own date, so a
    /// receipt or V1 body shows every purchase, refund and reversal up to then, as Apple's and the
    /// app's would (R14 reads a later receipt that misses a refund as a reversal).
    enum Outgoing {
        case v1(otid: String, type: String, options: WireEmitter.V1Options)
        case v2(otid: String, type: String, subtype: String?, transaction: SimTransaction?, deliverAtMs: Int64)
        case upload(Upload)
    }

    struct Upload {
        var appleId: Int
        var focus: SimTransaction?
        var options: WireEmitter.UploadOptions
        /// The app posts the same request again this long after (ms), if at all.
        var againAfterMs: Int64?
        var alsoMalformed: Bool
    }

    public init(config: PopulationConfig, emitter: WireEmitter, userIndex: Int) {
        self.config = config
        self.emitter = emitter
        self.state = StoreState(config: emitter.config, block: userIndex)
        self.rng = SimRandom.forUser(seed: config.seed, index: userIndex)
        self.userId = StoreState.userUUID(seed: config.seed &+ UInt64(emitter.config.runId) << 20, index: userIndex)
        self.userIndex = userIndex
        self.accounts = [userId]
        self.endMs = config.startMs + Int64(config.days) * 86_400_000
    }

    /// Runs the whole year for this user; returns the user's truth (merge it into the store with
    /// `absorb`) and the deliveries.
    public mutating func play() throws -> (StoreState, [Delivery]) {
        state.addUser(userId)
        let environment: SimEnvironment = rng.chance(config.sandboxShare) ? .sandbox : .production
        try state.addAppleID(user: userId, storefront: "USA", environment: environment)
        let first = config.startMs + rng.ms(0...(30 * 86_400_000)) + rng.ms(0...999)
        now = first
        let persona = rng.weighted([("vip", 55), ("music", 12), ("both", 13), ("one-time", 12), ("coins", config.consumables ? 8 : 0)]) ?? "vip"
        switch persona {
        case "vip": try subscribe(group: "vip", appleId: 0, at: first)
        case "music": try subscribe(group: "music", appleId: 0, at: first)
        case "both":
            try subscribe(group: "vip", appleId: 0, at: first)
            // Scheduled, not bought now: its V1 bodies list the vip subscription as it is then (R16).
            schedule(first + rng.ms(86_400_000...(60 * 86_400_000)), .resubscribe(group: "music", appleId: 0))
        default:
            schedule(first, .oneTime)
        }
        if persona != "coins", config.consumables, rng.chance(0.15) { schedule(first + rng.exponential(meanMs: 90 * 86_400_000), .oneTime) }
        plansOtherAccount = rng.chance(config.restoreOnOtherAccount)
        if rng.chance(config.bothEnvironments) {
            schedule(first + rng.ms(86_400_000...(120 * 86_400_000)), .otherEnvironment(group: rng.chance(0.7) ? "vip" : "music"))
        }
        while let next = pop() {
            // The year ends for new facts; what was already decided is still delivered.
            if case .send = next.event {} else { guard next.ms < endMs else { continue } }
            now = max(now, next.ms)
            try handle(next.event, at: next.ms)
        }
        if accounts.count > 1 {
            // Which account owns a restored subscription depends on the order its uploads arrive in
            // (R17: the latest claim). This user's uploads are sent once each and in order, so the
            // arrival order is the simulated one the oracle reads.
            for i in deliveries.indices where deliveries[i].channel == .receiptUpload { deliveries[i].keepsOrder = true }
        }
        deliveries.sort { $0.simMs < $1.simMs }
        return (state, deliveries)
    }

    // MARK: scheduling

    private mutating func schedule(_ ms: Int64, _ event: Event) {
        order += 1
        queue.append((ms, order, event))
    }

    private mutating func pop() -> (ms: Int64, event: Event)? {
        guard let index = queue.indices.min(by: { (queue[$0].ms, queue[$0].order) < (queue[$1].ms, queue[$1].order) }) else { return nil }
        let item = queue.remove(at: index)
        return (item.ms, item.event)
    }

    private mutating func nextAction(_ otid: String, after ms: Int64) {
        schedule(ms + rng.exponential(meanMs: Int64(config.meanDaysBetweenActions * 86_400_000)), .action(otid))
    }

    // MARK: wire

    /// Builds `outgoing` now when it is dated now (V2 payloads are signed at the fact), else when the
    /// simulation reaches its date (V1 bodies and receipts are made when they are sent).
    private mutating func send(_ outgoing: Outgoing, at ms: Int64) throws {
        guard ms <= now else { return schedule(ms, .send(outgoing)) }
        switch outgoing {
        case .v1(let otid, let type, let options):
            deliveries.append(try emitter.v1(state, otid: otid, type: type, atMs: ms, options: options))
        case .v2(let otid, let type, let subtype, let transaction, let deliverAtMs):
            var delivery = try emitter.v2(state, otid: otid, type: type, subtype: subtype, transaction: transaction, atMs: ms)
            delivery.simMs = deliverAtMs
            deliveries.append(delivery)
        case .upload(let upload):
            let delivery = try emitter.receiptUpload(state, user: userId, appleId: upload.appleId, atMs: ms, focus: upload.focus,
                                                     options: upload.options)
            deliveries.append(delivery)
            let account = state.users[userId]?.appleIds[upload.appleId].appAccount ?? userId
            state.recordUpload(account: account, user: userId, appleId: upload.appleId, receiptMs: ms, claimMs: ms)
            if let after = upload.againAfterMs {
                var again = delivery
                again.simMs += after
                again.label += " (uploaded again)"
                deliveries.append(again)
                state.recordUpload(account: account, user: userId, appleId: upload.appleId, receiptMs: ms, claimMs: again.simMs)
            }
            if upload.alsoMalformed {
                deliveries.append(try emitter.receiptUpload(state, user: userId, appleId: upload.appleId, atMs: ms, focus: upload.focus,
                                                            options: .init(omitReceiptData: true)))
            }
            // The app finishes consumables once it has told the server, so later receipts leave them out.
            state.finishConsumables(user: userId)
        }
    }

    /// Apple's notifications about `otid`, a few seconds after the fact.
    private mutating func notify(_ otid: String, v1 v1Type: String?, v2 v2Type: String?, subtype: String? = nil,
                                 at ms: Int64, focus: SimTransaction? = nil, v2Transaction: SimTransaction? = nil,
                                 expirationIntent: String? = nil) throws {
        if config.v1, let v1Type {
            var options = WireEmitter.V1Options(focus: focus, legacyShape: rng.chance(config.legacyV1Share), expirationIntent: expirationIntent,
                                                everySubscription: rng.chance(config.v1EverySubscription))
            if v1Type == "CANCEL", focus?.cancellationMs != nil, !(focus?.isUpgraded ?? false) {
                options.cancellationOnlyAtTopLevel = rng.chance(config.cancelOnlyAtTopLevel)
            }
            try send(.v1(otid: otid, type: v1Type, options: options), at: ms + rng.ms(1000...60_000))
        }
        if config.v2, let v2Type {
            let deliverAt = ms + rng.ms(1000...60_000)
            try send(.v2(otid: otid, type: v2Type, subtype: subtype, transaction: v2Transaction ?? focus, deliverAtMs: deliverAt), at: ms)
        }
    }

    /// The app posts its receipt (sometimes twice, sometimes without the optional fields).
    private mutating func upload(appleId: Int, at ms: Int64, focus: SimTransaction?, restored: Bool = false) throws {
        let at = ms + rng.ms(1000...30_000)
        let options = WireEmitter.UploadOptions(restoredIds: restored, omitOptionalFields: rng.chance(config.uploadWithoutOptionalFields),
                                                upperCaseUserId: rng.chance(config.upperCaseUpload))
        let again = rng.chance(config.uploadTwice) ? rng.ms(1000...600_000) : nil
        let upload = Upload(appleId: appleId, focus: focus, options: options, againAfterMs: again,
                            alsoMalformed: rng.chance(config.malformedUpload))
        try send(.upload(upload), at: at)
    }

    // MARK: journeys

    private func productsOf(_ group: String) -> [CatalogProduct] {
        state.config.catalog.products.filter { $0.group == group && $0.kind == .autoRenewable }
    }

    /// First purchase in a group: the intro variant when this account never had one (R8), half the
    /// time with a free trial, else an intro price.
    private mutating func subscribe(group: String, appleId: Int, at ms: Int64, offer forced: SimOffer? = nil) throws {
        let base = group == "vip" ? (rng.chance(0.8) ? "vip.a.1m" : "vip.b.1m") : (rng.chance(0.8) ? "music.1w" : "music.1y")
        var product = base
        var offer: SimOffer = forced ?? .none
        if forced == nil {
            let served = state.servedVariant(user: userId, productId: base)
            if served != base, rng.chance(0.7) {
                product = served
                offer = rng.chance(0.5) ? .freeTrial : .introPrice
            }
        }
        let existing = state.subscriptions(ofUser: userId, appleId: appleId).first { $0.group == group && $0.kind == .autoRenewable && $0.movedTo == nil }
        let t = try state.purchase(user: userId, appleId: appleId, productId: product, atMs: ms, offer: offer)
        if existing == nil {
            try notify(t.originalTransactionId, v1: "INITIAL_BUY", v2: "SUBSCRIBED", subtype: "INITIAL_BUY", at: ms, focus: t)
        } else {
            try notify(t.originalTransactionId, v1: "INTERACTIVE_RENEWAL", v2: "SUBSCRIBED", subtype: "RESUBSCRIBE", at: ms, focus: t)
        }
        try upload(appleId: appleId, at: ms, focus: t)
        schedulePeriodEnd(t)
        nextAction(t.originalTransactionId, after: ms)
    }

    private mutating func handle(_ event: Event, at ms: Int64) throws {
        switch event {
        case .periodEnd(let otid, let expiresMs, let chargeFails): try periodEnd(otid, expiresMs: expiresMs, chargeFails: chargeFails, at: ms)
        case .action(let otid): try action(otid, at: ms)
        case .billingOutcome(let otid): try billingOutcome(otid, at: ms)
        case .resubscribe(let group, let appleId):
            let lapsed = state.subscriptions(ofUser: userId, appleId: appleId).contains { $0.group == group && !$0.autoRenew }
            let redeemed = state.users[userId]?.promotionalRedemptions["vip.winback"] ?? 0
            if group == "vip", lapsed, redeemed == 0, rng.chance(0.5) {
                try subscribe(group: group, appleId: appleId, at: ms, offer: .promotional("vip.winback"))
            } else {
                try subscribe(group: group, appleId: appleId, at: ms)
            }
        case .oneTime: try oneTime(at: ms)
        case .otherEnvironment(let group):
            let environment: SimEnvironment = state.users[userId]!.appleIds[0].environment == .production ? .sandbox : .production
            let index = try state.addAppleID(user: userId, storefront: "USA", environment: environment)
            state.log(userId, ms, "also buys in \(environment.rawValue) with Apple ID \(state.users[userId]!.appleIds[index].id)")
            try subscribe(group: group, appleId: index, at: ms)
        case .secondAppleId(let group):
            let environment = state.users[userId]!.appleIds[0].environment
            let index = try state.addAppleID(user: userId, storefront: "USA", environment: environment)
            state.log(userId, ms, "signs in with a second Apple ID \(state.users[userId]!.appleIds[index].id)")
            try subscribe(group: group, appleId: index, at: ms)
        case .refundOneTime(let otid, let transactionId):
            let refunded = try state.refund(otid, transactionId: transactionId, atMs: ms, reason: "0")
            try notify(otid, v1: "REFUND", v2: "REFUND", at: ms, focus: refunded)
        case .send(let outgoing):
            try send(outgoing, at: ms)
        case .reverseRefund(let otid, let transactionId, let retry):
            let reinstated = try state.reverseRefund(otid, transactionId: transactionId, atMs: ms)
            try notify(otid, v1: nil, v2: "REFUND_REVERSED", at: ms, focus: reinstated)
            if var retry {
                retry.simMs = ms + rng.ms(3_600_000...(24 * 3_600_000))
                retry.label += " (Apple's retry, after the reversal)"
                deliveries.append(retry)
            }
        }
    }

    /// Apple charges up to an hour before the period ends (the renewal's purchase date). The attempt is
    /// played at the charge, so whatever happens meanwhile already sees the renewal.
    private mutating func schedulePeriodEnd(_ t: SimTransaction) {
        guard let end = t.expiresMs else { return }
        let fails = rng.chance(config.billingFailure)
        let lead = !fails && rng.chance(0.3) ? rng.ms(0...3_600_000) : 0
        schedule(end - lead, .periodEnd(t.originalTransactionId, expiresMs: end, chargeFails: fails))
    }

    private mutating func periodEnd(_ otid: String, expiresMs end: Int64, chargeFails: Bool, at ms: Int64) throws {
        let subscription = try state.subscription(otid)
        guard subscription.latest?.expiresMs == end, subscription.movedTo == nil, subscription.billing == .paid else { return }
        if let latest = subscription.latest, latest.cancellationMs != nil, !latest.isUpgraded { return }  // refunded: over
        if ms < end, !subscription.autoRenew {
            // Nothing to charge: the period runs out at its end.
            return schedule(end, .periodEnd(otid, expiresMs: end, chargeFails: false))
        }
        guard subscription.autoRenew else {
            try state.expire(otid, atMs: ms, intent: "1")
            try notify(otid, v1: nil, v2: "EXPIRED", subtype: "VOLUNTARY", at: ms)
            if rng.chance(0.35) {
                let group = subscription.group
                if rng.chance(0.15) {
                    schedule(ms + rng.ms((5 * 86_400_000)...(60 * 86_400_000)), .secondAppleId(group: group))
                } else {
                    schedule(ms + rng.ms((2 * 86_400_000)...(90 * 86_400_000)), .resubscribe(group: group, appleId: subscription.appleIdIndex))
                }
            }
            return
        }
        if chargeFails {
            let grace = rng.chance(0.5) ? Int64(config.graceDays) * 86_400_000 : nil
            try state.failRenewal(otid, atMs: ms, graceMs: grace)
            try notify(otid, v1: "DID_FAIL_TO_RENEW", v2: "DID_FAIL_TO_RENEW", subtype: grace == nil ? nil : "GRACE_PERIOD", at: ms,
                       expirationIntent: "2")
            schedule(ms + rng.ms(3_600_000...(12 * 86_400_000)), .billingOutcome(otid))
            return
        }
        let charge = ms
        let t = try state.renew(otid, chargeMs: charge)
        try notify(otid, v1: "DID_RENEW", v2: "DID_RENEW", at: charge, focus: t)
        if rng.chance(config.uploadAfterRenewal) { try upload(appleId: subscription.appleIdIndex, at: charge + rng.ms(0...3_600_000), focus: t) }
        schedulePeriodEnd(t)
    }

    private mutating func billingOutcome(_ otid: String, at ms: Int64) throws {
        let subscription = try state.subscription(otid)
        guard case .retrying = subscription.billing else { return }
        if rng.chance(0.7) {
            let t = try state.recover(otid, atMs: ms)
            try notify(otid, v1: "DID_RECOVER", v2: "DID_RENEW", subtype: "BILLING_RECOVERY", at: ms, focus: t)
            if rng.chance(0.5) { try upload(appleId: subscription.appleIdIndex, at: ms, focus: t) }
            schedulePeriodEnd(t)
            nextAction(otid, after: ms)
        } else {
            try state.expire(otid, atMs: ms, intent: "2")
            try notify(otid, v1: nil, v2: "EXPIRED", subtype: "BILLING_RETRY", at: ms)
        }
    }

    private mutating func action(_ otid: String, at ms: Int64) throws {
        let subscription = try state.subscription(otid)
        guard let latest = subscription.latest, let end = latest.expiresMs, ms < end, subscription.billing == .paid,
              subscription.movedTo == nil, latest.cancellationMs == nil else { return }
        let product = try state.product(latest.productId)
        let vip = subscription.group == "vip"
        let level = product.level ?? 2
        let peer = ["vip.a.1m": "vip.b.1m", "vip.a.1m.intro": "vip.b.1m", "vip.b.1m": "vip.a.1m"][latest.productId]
        let otherDuration = ["vip.a.1m": "vip.a.3m", "vip.a.3m": "vip.a.1m", "music.1w": "music.1y", "music.1y": "music.1w"][latest.productId]
        let past = subscription.transactions.dropLast().last { $0.cancellationMs == nil && ($0.paidEndMs ?? .max) < ms }
        enum Kind {
            case autoRenewOff, autoRenewOn, crossgrade, otherDuration, upgrade, downgrade, cancelAndSwitch, refundNow, refundPast, restore, storefront
            case restoreOnOtherAccount
        }
        let otherAccount = plansOtherAccount && accounts.count == 1
        let options: [(Kind, Int)] = [
            (.autoRenewOff, subscription.autoRenew ? 22 : 0),
            (.autoRenewOn, subscription.autoRenew ? 0 : 15),
            (.crossgrade, peer != nil && subscription.autoRenew ? 7 : 0),
            (.otherDuration, otherDuration != nil && subscription.autoRenew && subscription.autoRenewProductId == latest.productId ? 6 : 0),
            (.upgrade, vip && level > 1 ? 7 : 0),
            (.downgrade, vip && level < 3 && subscription.autoRenew && subscription.autoRenewProductId == latest.productId ? 5 : 0),
            (.cancelAndSwitch, peer != nil || (vip && level > 1) ? 3 : 0),
            (.refundNow, 4),
            (.refundPast, past != nil ? 4 : 0),
            (.restore, 10),
            (.storefront, subscription.autoRenew ? 3 : 0),
            (.restoreOnOtherAccount, otherAccount ? 30 : 0),
        ]
        guard let kind = rng.weighted(options) else { return }
        let appleId = subscription.appleIdIndex
        switch kind {
        case .autoRenewOff, .autoRenewOn:
            let on = kind == .autoRenewOn
            try state.setAutoRenew(otid, on: on, atMs: ms)
            try notify(otid, v1: "DID_CHANGE_RENEWAL_STATUS", v2: "DID_CHANGE_RENEWAL_STATUS",
                       subtype: on ? "AUTO_RENEW_ENABLED" : "AUTO_RENEW_DISABLED", at: ms)
        case .otherDuration, .downgrade:
            let target = kind == .downgrade ? "vip.lite.1m" : otherDuration!
            try state.setRenewalProduct(otid, productId: target, atMs: ms)
            try notify(otid, v1: "DID_CHANGE_RENEWAL_PREF", v2: "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", at: ms)
        case .crossgrade, .upgrade, .cancelAndSwitch:
            let target = kind == .upgrade ? "vip.pro.1m" : (peer ?? "vip.pro.1m")
            let keep = kind != .cancelAndSwitch
            let (old, new) = try state.switchNow(otid, to: target, atMs: ms, keepAutoRenew: keep)
            try notify(otid, v1: "CANCEL", v2: nil, at: ms, focus: old)
            try notify(otid, v1: "INTERACTIVE_RENEWAL", v2: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", at: ms, focus: new)
            if !keep { try notify(otid, v1: nil, v2: "DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", at: ms, v2Transaction: new) }
            try upload(appleId: appleId, at: ms, focus: new)
            schedulePeriodEnd(new)
        case .refundNow:
            let refunded = try state.refund(otid, transactionId: latest.transactionId, atMs: ms, reason: rng.chance(0.3) ? "1" : "0")
            try notify(otid, v1: "CANCEL", v2: "REFUND", at: ms, focus: refunded)
            let reverseAt = ms + rng.ms(86_400_000...(5 * 86_400_000))
            if config.v2, reverseAt < min(end, endMs), rng.chance(config.refundReversed) {
                // Half the time the REFUND's first delivery fails; Apple's retry comes after the reversal.
                var retry: Delivery?
                if rng.chance(0.5), let index = deliveries.lastIndex(where: { $0.channel == .notificationV2 }) {
                    retry = deliveries.remove(at: index)
                }
                schedule(reverseAt, .reverseRefund(otid: otid, transactionId: refunded.transactionId, retry: retry))
                return
            }
            if rng.chance(0.3) {
                schedule(ms + rng.ms((7 * 86_400_000)...(60 * 86_400_000)), .resubscribe(group: subscription.group, appleId: appleId))
            }
            return
        case .refundPast:
            let refunded = try state.refund(otid, transactionId: past!.transactionId, atMs: ms, reason: "0")
            try notify(otid, v1: "CANCEL", v2: "REFUND", at: ms, focus: refunded)
        case .restore:
            try state.restore(user: userId, appleId: appleId, atMs: ms)
            try upload(appleId: appleId, at: ms, focus: nil, restored: true)
        case .restoreOnOtherAccount:
            // A second account of the same person (or a family member's): a fresh UUID outside every user's range.
            let account = StoreState.userUUID(seed: (config.seed &+ UInt64(state.config.runId) << 20) | 1 << 47, index: userIndex)
            accounts.append(account)
            try state.signIn(account: account, user: userId, appleId: appleId, atMs: ms)
            try state.restore(user: userId, appleId: appleId, atMs: ms)
            try upload(appleId: appleId, at: ms, focus: nil, restored: true)
        case .storefront:
            let next = try state.moveStorefront(otid, to: latest.storefront == "USA" ? "CAN" : "USA", atMs: ms)
            // Dated at the new period's start: built then, showing the Apple ID as it is by then.
            try notify(next.originalTransactionId, v1: "INITIAL_BUY", v2: "SUBSCRIBED", subtype: "INITIAL_BUY", at: next.purchaseMs, focus: next)
            try upload(appleId: appleId, at: next.purchaseMs, focus: next)
            try notify(otid, v1: nil, v2: "EXPIRED", subtype: "VOLUNTARY", at: end)
            schedulePeriodEnd(next)
            nextAction(next.originalTransactionId, after: next.purchaseMs)
            return
        }
        nextAction(otid, after: ms)
    }

    private mutating func oneTime(at ms: Int64) throws {
        let pick = rng.weighted([("lifetime.pro", 3), ("pass.30d", 4), ("coins.100", config.consumables ? 6 : 0)]) ?? "pass.30d"
        let appleId = 0
        let t = try state.purchase(user: userId, appleId: appleId, productId: pick, atMs: ms)
        try notify(t.originalTransactionId, v1: nil, v2: "ONE_TIME_CHARGE", at: ms, focus: t)
        try upload(appleId: appleId, at: ms, focus: t)
        if rng.chance(0.12) {
            schedule(ms + rng.ms(3_600_000...(40 * 86_400_000)), .refundOneTime(otid: t.originalTransactionId, transactionId: t.transactionId))
        }
        if pick == "coins.100" || rng.chance(0.3) {
            schedule(ms + rng.exponential(meanMs: 60 * 86_400_000), .oneTime)
        }
    }
}
