import Domain
import Foundation

/// The simulated app's catalog: every product type (R13) and every kind of switch (R5) has a
/// product to play it. The pipeline's classify worker must be given the same catalog
/// (`storeledger simulate --write-catalog FILE`, then `STORELEDGER_CATALOG=FILE`).
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

    /// The catalog as the JSON file the workers read.
    public static func json(_ catalog: Catalog = standard) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(catalog)
    }
}
