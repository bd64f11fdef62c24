/// The app's product catalog (a JSON file, see docs/catalog.md): which products exist, their type
/// (R13), their subscription group, level and duration (R5), intro-offer variants (R8) and the
/// promotional offers the server may sign (R9) with their rules.
public struct Catalog: Codable, Sendable, Equatable {
    public var bundleId: String?
    public var products: [CatalogProduct]
    public var promotionalOffers: [PromotionalOffer]

    public init(bundleId: String? = nil, products: [CatalogProduct] = [], promotionalOffers: [PromotionalOffer] = []) {
        self.bundleId = bundleId
        self.products = products
        self.promotionalOffers = promotionalOffers
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bundleId = try container.decodeIfPresent(String.self, forKey: .bundleId)
        products = try container.decodeIfPresent([CatalogProduct].self, forKey: .products) ?? []
        promotionalOffers = try container.decodeIfPresent([PromotionalOffer].self, forKey: .promotionalOffers) ?? []
    }

    public func product(_ id: String) -> CatalogProduct? { products.first { $0.id == id } }
    public func offer(_ id: String) -> PromotionalOffer? { promotionalOffers.first { $0.id == id } }
}

public struct CatalogProduct: Codable, Sendable, Equatable {
    public var id: String
    public var kind: ProductKind
    /// Subscription group (auto-renewables); other products entitle their own id unless set.
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
}
