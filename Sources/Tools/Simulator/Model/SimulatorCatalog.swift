import Domain
import Foundation

/// The simulated app's catalog: every product type (R13) and every kind of switch (R5) has a
/// product to play it. The pipeline's classify worker must be given the same catalog
/// (`storeledger simulate --write-catalog FILE`, then `Setting.catalog=FILE`).
public enum SimulatorCatalog {
    public static let bundleId = "com.storeledger.simulator"

    public static let standard = Catalog(
        bundleId: bundleId,
        products: [
            // Group "vip": A1 and B1 are crossgrade peers (same level, same duration); A3 is A at
            // another duration; pro is one level up (upgrade); lite one level down (downgrade).
            CatalogProduct(id: "vip.a.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30, introVariantOf: "vip.a.1m.intro"),
            CatalogProduct(id: "vip.a.1m.intro", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.b.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.a.3m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 90),
            CatalogProduct(id: "vip.pro.1m", kind: .autoRenewable, group: "vip", level: 1, durationDays: 30),
            CatalogProduct(id: "vip.lite.1m", kind: .autoRenewable, group: "vip", level: 3, durationDays: 30),
            // A second group, held at the same time as vip by some users.
            CatalogProduct(id: "music.1w", kind: .autoRenewable, group: "music", level: 1, durationDays: 7),
            CatalogProduct(id: "music.1y", kind: .autoRenewable, group: "music", level: 1, durationDays: 365),
            CatalogProduct(id: "lifetime.pro", kind: .nonConsumable, group: "lifetime"),
            CatalogProduct(id: "pass.30d", kind: .nonRenewing, group: "pass", durationDays: 30),
            CatalogProduct(id: "coins.100", kind: .consumable, credits: 100),
        ],
        promotionalOffers: [
            PromotionalOffer(id: "vip.winback", productId: "vip.a.1m", audience: .lapsed, maxRedemptionsPerUser: 1, priority: 10),
            PromotionalOffer(id: "vip.pro.upgrade", productId: "vip.pro.1m", audience: .currentLowerLevel, maxRedemptionsPerUser: 2, priority: 20),
        ])

    /// The simulated App Store's price list (milli-units, as Apple's V2 `price`): each product has its
    /// own price in the US (USD) and Canadian (CAD) storefronts, so finance reports are checked at
    /// several prices and in two currencies. Other storefronts pay the US price.
    static let prices: [String: (usd: Int64, cad: Int64)] = [
        "vip.a.1m": (9_990, 13_990), "vip.a.1m.intro": (9_990, 13_990), "vip.b.1m": (8_990, 12_990),
        "vip.a.3m": (24_990, 34_990), "vip.pro.1m": (19_990, 27_990), "vip.lite.1m": (4_990, 6_990),
        "music.1w": (1_990, 2_990), "music.1y": (59_990, 79_990), "lifetime.pro": (99_990, 139_990),
        "pass.30d": (14_990, 19_990), "coins.100": (990, 1_390),
    ]

    /// What Apple charged for one transaction: nothing for a free trial, half the list price for an
    /// intro price, a promotional offer or an offer code, else the list price of the storefront.
    public static func price(productId: String, storefront: String, offer: SimOffer) -> (milli: Int64, currency: String) {
        let list = prices[productId] ?? (9_990, 13_990)
        let (full, currency) = storefront == "CAN" ? (list.cad, "CAD") : (list.usd, "USD")
        switch offer {
        case .none: return (full, currency)
        case .freeTrial: return (0, currency)
        case .introPrice, .promotional, .offerCode: return (full / 2, currency)
        }
    }

    /// The catalog as the JSON file the workers read.
    public static func json(_ catalog: Catalog = standard) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(catalog)
    }
}
