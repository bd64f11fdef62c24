/// The app's product catalog: which products exist, their type (R13), their subscription group,
/// level and duration (R5). Loaded from a JSON file at start (see docs/catalog.md).
public struct Catalog: Codable, Sendable, Equatable {
    public var bundleId: String?
    public var products: [CatalogProduct]

    public init(bundleId: String? = nil, products: [CatalogProduct] = []) {
        self.bundleId = bundleId
        self.products = products
    }

    public func product(_ id: String) -> CatalogProduct? { products.first { $0.id == id } }
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

    public init(id: String, kind: ProductKind, group: String? = nil, level: Int? = nil, durationDays: Int? = nil,
                credits: Int? = nil) {
        self.id = id
        self.kind = kind
        self.group = group
        self.level = level
        self.durationDays = durationDays
        self.credits = credits
    }
}
