import CivilCalendar
import Domain

/// One of a user's purchases, as offer eligibility sees it: whatever Apple ID (subscription) it
/// was made with, it counts for the account (R8).
public struct OfferPurchase: Sendable, Equatable {
    /// The subscription (original transaction id): one per Apple ID and group.
    public var subscriptionKey: String
    public var transactionId: String
    public var productId: String
    public var group: String
    public var startMs: Int64
    /// What it entitles, after refunds and switches cut it; nil when it entitles nothing.
    public var entitled: Interval?
    public var isTrial: Bool
    public var isIntro: Bool
    public var promotionalOfferId: String?
    /// The end of the period Apple sold (before any cut): whether the next purchase renewed it.
    public var endMs: Int64?
    /// Apple's `offerPeriod` (ISO 8601, V2): how long one redemption of the offer lasts.
    public var offerPeriod: String?

    public init(subscriptionKey: String, transactionId: String, productId: String, group: String, startMs: Int64,
                entitled: Interval?, isTrial: Bool = false, isIntro: Bool = false, promotionalOfferId: String? = nil,
                endMs: Int64? = nil, offerPeriod: String? = nil) {
        self.subscriptionKey = subscriptionKey
        self.transactionId = transactionId
        self.productId = productId
        self.group = group
        self.startMs = startMs
        self.entitled = entitled
        self.isTrial = isTrial
        self.isIntro = isIntro
        self.promotionalOfferId = promotionalOfferId
        self.endMs = endMs
        self.offerPeriod = offerPeriod
    }

    func isActive(at nowMs: Int64) -> Bool {
        guard let entitled, !entitled.isEmpty else { return false }
        return entitled.startMs <= nowMs && nowMs < (entitled.endMs ?? Int64.max)
    }
}

/// A billing grace period membership granted: the account holds the group through it.
public struct OfferGrace: Sendable, Equatable {
    public var subscriptionKey: String
    public var group: String
    public var entitled: Interval

    public init(subscriptionKey: String, group: String, entitled: Interval) {
        self.subscriptionKey = subscriptionKey
        self.group = group
        self.entitled = entitled
    }
}

/// Everything the account bought, across all its subscriptions.
public struct OfferHistory: Sendable, Equatable {
    public var purchases: [OfferPurchase]
    public var graces: [OfferGrace]

    public init(purchases: [OfferPurchase], graces: [OfferGrace] = []) {
        self.purchases = purchases
        self.graces = graces
    }

    /// From membership's per-subscription state (table `subscriptions`, linked to the user). What a
    /// purchase entitles is what membership granted it (`granted`): cut by a refund, and by the upgrade
    /// or crossgrade that replaced it, not only at Apple's own cancellation date. A purchase a replay
    /// found to be none of its own counts nowhere (`isTakenBack`).
    ///
    /// Only auto-renewable subscriptions count: promotional and introductory offers are theirs, and a
    /// lifetime or non-renewing product sharing the group's entitlement makes no one a subscriber.
    /// R18: a sandbox purchase (free for TestFlight testers and App Review) is no production history.
    /// With any production subscription on the account only production counts; an account known
    /// only outside production (a tester) is judged on what it has there.
    public init(states: [SubscriptionState]) {
        func isProduction(_ environment: String?) -> Bool { (environment ?? SubscriptionKey.production) == SubscriptionKey.production }
        let productionOnly = states.contains { state in
            state.grants.values.contains { !$0.isTakenBack && $0.productKind == .autoRenewable && isProduction($0.environment ?? state.environment) }
        }
        func counted(_ state: SubscriptionState) -> [(key: String, value: PurchaseGrant)] {
            state.grants.filter { !$0.value.isTakenBack && $0.value.productKind == .autoRenewable
                && (!productionOnly || isProduction($0.value.environment ?? state.environment)) }.map { ($0.key, $0.value) }
        }
        let states = productionOnly ? states.filter { isProduction($0.environment) } : states
        purchases = states.flatMap { state in
            counted(state).map { id, grant in
                OfferPurchase(subscriptionKey: state.subscriptionKey, transactionId: grant.transactionId, productId: grant.productId,
                              group: grant.group, startMs: grant.startMs, entitled: state.granted[id], isTrial: grant.finance.isTrial,
                              isIntro: grant.finance.isIntro, promotionalOfferId: grant.finance.promotionalOfferId,
                              endMs: grant.endMs, offerPeriod: grant.finance.offerPeriod)
            }
        }.sorted { ($0.subscriptionKey, $0.startMs, $0.transactionId) < ($1.subscriptionKey, $1.startMs, $1.transactionId) }
        graces = states.flatMap { state in
            state.graces.compactMap { id, grace in
                state.granted[id].map { OfferGrace(subscriptionKey: state.subscriptionKey, group: grace.group, entitled: $0) }
            }
        }.sorted { ($0.subscriptionKey, $0.entitled.startMs) < ($1.subscriptionKey, $1.entitled.startMs) }
    }

    func inGroup(_ group: String) -> [OfferPurchase] { purchases.filter { $0.group == group } }

    /// The purchases through which the account holds the group now: those whose granted interval
    /// covers now and, in a billing grace period, the newest purchase of the subscription in grace.
    func holding(_ group: String, at nowMs: Int64) -> [OfferPurchase] {
        let purchases = inGroup(group)
        var holding = purchases.filter { $0.isActive(at: nowMs) }
        for grace in graces where grace.group == group && grace.entitled.contains(nowMs) {
            guard let lapsing = purchases.filter({ $0.subscriptionKey == grace.subscriptionKey }).max(by: { $0.startMs < $1.startMs }),
                  !holding.contains(lapsing) else { continue }
            holding.append(lapsing)
        }
        return holding
    }
}

/// Why a user may not have an offer. `code` is stable for clients; `message` is for people.
public enum OfferRefusal: Sendable, Equatable {
    case notAPreviousSubscriber(group: String)
    case stillSubscribed(group: String, productId: String)
    case notSubscribed(group: String)
    case notOnALowerLevel(currentProductId: String, currentLevel: Int, offerLevel: Int)
    case redemptionLimitReached(offerId: String, used: Int, limit: Int)

    public var code: String {
        switch self {
        case .notAPreviousSubscriber: "not_a_previous_subscriber"
        case .stillSubscribed: "still_subscribed"
        case .notSubscribed: "not_subscribed"
        case .notOnALowerLevel: "not_on_a_lower_level"
        case .redemptionLimitReached: "redemption_limit_reached"
        }
    }

    public var message: String {
        switch self {
        case .notAPreviousSubscriber(let group):
            "the account never held a subscription in group \(group); offers are for previous subscribers"
        case .stillSubscribed(let group, let product):
            "win-back offer: the account still holds \(product) in group \(group)"
        case .notSubscribed(let group):
            "the offer is for current subscribers of group \(group); the account holds none now"
        case .notOnALowerLevel(let current, let level, let offerLevel):
            "upgrade offer: the account's \(current) is level \(level), not lower than the offer's level \(offerLevel)"
        case .redemptionLimitReached(let offer, let used, let limit):
            "offer \(offer) already redeemed \(used) time\(used == 1 ? "" : "s"); the limit is \(limit) per account"
        }
    }
}

/// The verdict on one promotional offer for one account.
public struct OfferVerdict: Sendable, Equatable {
    public var offer: PromotionalOffer
    /// How many times the account has redeemed it.
    public var redemptions: Int
    /// nil: the account may have it now.
    public var refusal: OfferRefusal?

    public var isEligible: Bool { refusal == nil }
}

/// R8: whether to serve the intro-offer variant of a group's products to this account.
public struct IntroOfferDecision: Sendable, Equatable {
    public var group: String
    public var eligible: Bool
    /// The transactions that used an intro or trial period in the group (the evidence).
    public var usedBy: [String]

    public var reason: String {
        eligible ? "the account never had a free trial or introductory price in group \(group)"
            : "the account already had a free trial or introductory price in group \(group) (transactions \(usedBy.joined(separator: ", "))), whichever Apple ID it used"
    }
}

/// Which product to show for one product of a group: the intro variant or the plain one (R8).
public struct ProductVariantChoice: Sendable, Equatable, Encodable {
    /// The product as the app knows it (the variant without an intro offer, or a product that has no variant).
    public var productId: String
    /// The same subscription with an introductory offer configured in App Store Connect, if any.
    public var introVariant: String?
    /// What the app should offer this account.
    public var show: String
}

/// The server's offer rules (R8, R9) as pure functions of the catalog, the account's purchase
/// history and the time. No I/O: OfferHistoryReader loads the history, the endpoints act.
public struct OfferEligibility: Sendable {
    public let catalog: Catalog

    public init(catalog: Catalog) { self.catalog = catalog }

    /// R8: the intro variant only for accounts that never had a trial or intro period in the group,
    /// across every subscription (Apple ID) linked to the account.
    public func introOffer(group: String, history: OfferHistory) -> IntroOfferDecision {
        let used = history.inGroup(group).filter { $0.isTrial || $0.isIntro }.map(\.transactionId)
        return IntroOfferDecision(group: group, eligible: used.isEmpty, usedBy: used)
    }

    /// For each product of the group that the app sells, which variant to show.
    public func variants(group: String, history: OfferHistory) -> [ProductVariantChoice] {
        let eligible = introOffer(group: group, history: history).eligible
        let inGroup = catalog.products.filter { $0.kind == .autoRenewable && ($0.group ?? $0.id) == group }
        let introTargets = Set(inGroup.compactMap(\.introVariantOf))
        return inGroup.filter { !introTargets.contains($0.id) }.map { product in
            let intro = product.introVariantOf
            return ProductVariantChoice(productId: product.id, introVariant: intro, show: eligible ? (intro ?? product.id) : product.id)
        }
    }

    /// The verdict on one offer.
    public func verdict(_ offer: PromotionalOffer, history: OfferHistory, nowMs: Int64) -> OfferVerdict {
        let product = catalog.product(offer.productId)
        let group = product?.group ?? offer.productId
        let purchases = history.inGroup(group)
        let holding = history.holding(group, at: nowMs)
        let current = holding.max { $0.startMs < $1.startMs }
        let redemptions = redemptionCount(offer.id, history: history)
        func verdict(_ refusal: OfferRefusal?) -> OfferVerdict {
            OfferVerdict(offer: offer, redemptions: redemptions, refusal: refusal)
        }
        guard !purchases.isEmpty else { return verdict(.notAPreviousSubscriber(group: group)) }
        switch offer.audience {
        case .previousSubscribers:
            break
        case .lapsed:
            if let current { return verdict(.stillSubscribed(group: group, productId: current.productId)) }
        case .current:
            if current == nil { return verdict(.notSubscribed(group: group)) }
        case .currentLowerLevel:
            // The best level the account holds now, whichever Apple ID holds it.
            func level(_ purchase: OfferPurchase) -> Int { catalog.product(purchase.productId)?.level ?? Int.max }
            guard let current = holding.min(by: { level($0) < level($1) }) else { return verdict(.notSubscribed(group: group)) }
            let currentLevel = level(current)
            let offerLevel = product?.level ?? Int.max
            // Level 1 is the highest service: "lower" means a larger number.
            if currentLevel <= offerLevel {
                return verdict(.notOnALowerLevel(currentProductId: current.productId, currentLevel: currentLevel, offerLevel: offerLevel))
            }
        }
        if let limit = offer.maxRedemptionsPerUser, redemptions >= limit {
            return verdict(.redemptionLimitReached(offerId: offer.id, used: redemptions, limit: limit))
        }
        return verdict(nil)
    }

    /// Verdicts on every offer whose product is in the group, best first (priority, then id).
    public func offers(group: String, history: OfferHistory, nowMs: Int64) -> [OfferVerdict] {
        catalog.promotionalOffers.filter { (catalog.product($0.productId)?.group ?? $0.productId) == group }
            .sorted { ($0.priority, $0.id) < ($1.priority, $1.id) }
            .map { verdict($0, history: history, nowMs: nowMs) }
    }

    /// The offer to sign for a product when the app names none: the eligible one with the lowest
    /// priority number. Otherwise every offer's refusal, for the 403.
    public func pick(productId: String, history: OfferHistory, nowMs: Int64) -> Result<PromotionalOffer, PickRefusal> {
        let verdicts = catalog.promotionalOffers.filter { $0.productId == productId }
            .sorted { ($0.priority, $0.id) < ($1.priority, $1.id) }
            .map { verdict($0, history: history, nowMs: nowMs) }
        if let best = verdicts.first(where: \.isEligible) { return .success(best.offer) }
        return .failure(PickRefusal(productId: productId, verdicts: verdicts))
    }

    /// An offer lasting several billing periods puts its id on each period's transaction, but it was
    /// redeemed once: a carrying purchase continues the redemption of the one before it when that one
    /// carried the offer too, this one renewed it (started within a day of its end, the rule finance
    /// uses for renewals), and the offer's own length (`offerPeriod`, when Apple stated it) from the
    /// redemption's first period has not run out. A lapse and a resubscription with the offer, or the
    /// offer taken again at a renewal after it ran out, is a new redemption.
    func redemptionCount(_ offerId: String, history: OfferHistory) -> Int {
        var count = 0
        for (_, purchases) in Dictionary(grouping: history.purchases, by: \.subscriptionKey) {
            var previous: OfferPurchase?
            var redemptionEndsMs: Int64?
            for purchase in purchases.sorted(by: { ($0.startMs, $0.transactionId) < ($1.startMs, $1.transactionId) }) {
                defer { previous = purchase }
                guard purchase.promotionalOfferId == offerId else { continue }
                if let previous, previous.promotionalOfferId == offerId, Self.renews(previous, with: purchase),
                   redemptionEndsMs.map({ purchase.startMs < $0 - CivilDate.dayMs }) ?? true {
                    continue
                }
                count += 1
                redemptionEndsMs = purchase.offerPeriod.flatMap { OfferPeriod.endMs(adding: $0, to: purchase.startMs) }
            }
        }
        return count
    }

    /// Whether `next` starts within a day of the end of `previous`'s period.
    static func renews(_ previous: OfferPurchase, with next: OfferPurchase) -> Bool {
        guard let end = previous.endMs else { return false }
        return next.startMs >= end.saturatingSubtracting(CivilDate.dayMs) && next.startMs <= end.saturatingAdding(CivilDate.dayMs)
    }
}

/// No offer could be picked for a product: the verdicts say why (empty: none is configured).
public struct PickRefusal: Error, Sendable, Equatable {
    public var productId: String
    public var verdicts: [OfferVerdict]
}
