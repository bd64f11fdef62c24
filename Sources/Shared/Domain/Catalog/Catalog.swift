/// The app's product catalog (a JSON file, see docs/catalog.md): which products exist, their type
/// (R13), their subscription group, level and duration (R5), intro-offer variants (R8), the
/// promotional offers the server may sign (R9) with their rules, and how purchases map to accounts
/// (R6). Load it with `Catalog.load(json:source:)`, which validates it.
public struct Catalog: Codable, Sendable, Equatable {
    public var bundleId: String?
    public var products: [CatalogProduct]
    public var promotionalOffers: [PromotionalOffer]
    /// Subscription groups, optionally declared with a display name; when any are declared, every
    /// auto-renewable product must name one of them (catches typos in `group`).
    public var groups: [SubscriptionGroup]
    /// How purchases are mapped to app accounts (R6).
    public var accounts: AccountPolicy
    /// R18: whether purchases made outside Production (Sandbox, Xcode, LocalTesting) grant.
    public var nonProductionPurchases: NonProductionPolicy

    /// Default `grant`: App Review buys in the sandbox with the production build, and must get what it
    /// bought; such grants are marked with their environment everywhere.
    public enum NonProductionPolicy: String, Codable, Sendable {
        case grant
        /// Recorded in the ledger, nothing granted.
        case record
    }

    public init(bundleId: String? = nil, products: [CatalogProduct] = [], promotionalOffers: [PromotionalOffer] = [],
                groups: [SubscriptionGroup] = [], accounts: AccountPolicy = AccountPolicy(),
                nonProductionPurchases: NonProductionPolicy = .grant) {
        self.bundleId = bundleId
        self.products = products
        self.promotionalOffers = promotionalOffers
        self.groups = groups
        self.accounts = accounts
        self.nonProductionPurchases = nonProductionPurchases
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bundleId = try container.decodeIfPresent(String.self, forKey: .bundleId)
        products = try container.decodeIfPresent([CatalogProduct].self, forKey: .products) ?? []
        promotionalOffers = try container.decodeIfPresent([PromotionalOffer].self, forKey: .promotionalOffers) ?? []
        groups = try container.decodeIfPresent([SubscriptionGroup].self, forKey: .groups) ?? []
        accounts = try container.decodeIfPresent(AccountPolicy.self, forKey: .accounts) ?? AccountPolicy()
        nonProductionPurchases = try container.decodeIfPresent(NonProductionPolicy.self, forKey: .nonProductionPurchases) ?? .grant
    }

    public func product(_ id: String) -> CatalogProduct? { products.first { $0.id == id } }
    public func offer(_ id: String) -> PromotionalOffer? { promotionalOffers.first { $0.id == id } }
    public func products(inGroup group: String) -> [CatalogProduct] { products.filter { $0.entitlementGroup == group } }
}

public struct CatalogProduct: Codable, Sendable, Equatable {
    public var id: String
    public var kind: ProductKind
    /// Subscription group (auto-renewables); for other products the entitlement (or, for
    /// consumables, the balance) they add to; defaults to the product id.
    public var group: String?
    /// 1 = highest level of service within the group.
    public var level: Int?
    /// Duration in days for subscriptions (non-renewing: the granted length).
    public var durationDays: Int?
    /// Consumables: how many units one purchase credits.
    public var credits: Int?
    /// R8: the product id of the same subscription *with* an introductory offer configured in
    /// App Store Connect; this product is then the variant without one. Accounts that never had an
    /// intro or trial period in the group are served the intro variant.
    public var introVariantOf: String?

    public init(id: String, kind: ProductKind, group: String? = nil, level: Int? = nil, durationDays: Int? = nil,
                credits: Int? = nil, introVariantOf: String? = nil) {
        self.id = id
        self.kind = kind
        self.group = group
        self.level = level
        self.durationDays = durationDays
        self.credits = credits
        self.introVariantOf = introVariantOf
    }

    /// The group a purchase of this product adds to: its subscription group, else its own id.
    public var entitlementGroup: String { group ?? id }
}

/// A subscription group as declared in the catalog.
public struct SubscriptionGroup: Codable, Sendable, Equatable {
    public var id: String
    public var name: String?
    public init(id: String, name: String? = nil) { self.id = id; self.name = name }
}

/// How purchases find their app account (R6) and what happens when a second account claims one.
public struct AccountPolicy: Codable, Sendable, Equatable {
    /// What `appAccountToken` (StoreKit 2) / `applicationUsername` (StoreKit 1, a UUID) means.
    public enum TokenPolicy: String, Codable, Sendable {
        /// The app sets it to the account's own id (as a UUID): the token, lowercased, is the user id.
        case userId = "user-id"
        /// The app uses it for something else: never link through it.
        case ignore
    }
    /// A purchase already linked to one account is claimed by another (restore on another account).
    public enum TransferPolicy: String, Codable, Sendable, CaseIterable {
        /// The purchase moves to the account that claimed it last (Apple's restore semantics); the
        /// previous account loses the entitlement. Both sides are recorded in the ledger.
        case move
        /// The first account keeps it; later claims are recorded and refused (stops one Apple ID's
        /// subscription from being passed around between accounts).
        case keepFirst = "keep-first"
    }

    public var appAccountToken: TokenPolicy
    public var transfer: TransferPolicy

    public init(appAccountToken: TokenPolicy = .userId, transfer: TransferPolicy = .move) {
        self.appAccountToken = appAccountToken
        self.transfer = transfer
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        appAccountToken = try container.decodeIfPresent(TokenPolicy.self, forKey: .appAccountToken) ?? .userId
        transfer = try container.decodeIfPresent(TransferPolicy.self, forKey: .transfer) ?? .move
    }
}

/// A promotional (subscription) offer configured in App Store Connect, with the server-side rule
/// deciding who may have it (R9; the seeds: only previous buyers of the group, limited per user).
public struct PromotionalOffer: Codable, Sendable, Equatable {
    public enum Audience: String, Codable, Sendable {
        /// Anyone who ever held a subscription in the group.
        case previousSubscribers = "previous-subscribers"
        /// Win-back: previous subscribers with no active subscription in the group now.
        case lapsed
        /// Upgrade: current subscribers of a lower level (higher level number) than the offer's product.
        case currentLowerLevel = "current-lower-level"
        /// Current subscribers of the group (retention).
        case current
    }

    public var id: String
    /// The product the offer applies to.
    public var productId: String
    public var audience: Audience
    /// How many times one user may redeem it (counted from transactions carrying this offer id).
    public var maxRedemptionsPerUser: Int?
    /// When several offers fit, the lowest priority number is picked.
    public var priority: Int

    public init(id: String, productId: String, audience: Audience, maxRedemptionsPerUser: Int? = nil, priority: Int = 100) {
        self.id = id
        self.productId = productId
        self.audience = audience
        self.maxRedemptionsPerUser = maxRedemptionsPerUser
        self.priority = priority
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        productId = try container.decode(String.self, forKey: .productId)
        audience = try container.decode(Audience.self, forKey: .audience)
        maxRedemptionsPerUser = try container.decodeIfPresent(Int.self, forKey: .maxRedemptionsPerUser)
        priority = try container.decodeIfPresent(Int.self, forKey: .priority) ?? 100
    }
}
