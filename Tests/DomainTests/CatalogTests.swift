@testable import Domain
import Foundation
import XCTest

/// The catalog file: loaded and validated at start, with every problem listed and located.
final class CatalogTests: XCTestCase {
    static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    func testTheExampleCatalogIsValid() throws {
        let url = Self.packageRoot.appendingPathComponent("deploy/catalog.example.json")
        let data = try XCTUnwrap(FileManager.default.contents(atPath: url.path), "deploy/catalog.example.json is missing")
        let catalog = try Catalog.load(json: [UInt8](data), source: "catalog.example.json")
        XCTAssertEqual(catalog.product("vip.standard.1m")?.level, 2)
        XCTAssertEqual(catalog.accounts, AccountPolicy(appAccountToken: .userId, transfer: .move))
        XCTAssertEqual(catalog.relation(from: "vip.standard.1m", to: "vip.standard.3m"), .crossgradeAtRenewal)
        XCTAssertTrue(TestCatalog.standard.validate().isEmpty, "\(TestCatalog.standard.validate())")
    }

    func testEveryProblemIsListedWithItsPath() {
        let catalog = Catalog(
            bundleId: " ",
            products: [
                CatalogProduct(id: "a", kind: .autoRenewable, group: "vip"),
                CatalogProduct(id: "a", kind: .consumable),
                CatalogProduct(id: "p", kind: .nonRenewing),
                CatalogProduct(id: "l", kind: .nonConsumable, durationDays: 3),
                CatalogProduct(id: "x", kind: .autoRenewable, group: "typo", level: 1, durationDays: 30, introVariantOf: "nope"),
            ],
            promotionalOffers: [PromotionalOffer(id: "o", productId: "coins", audience: .lapsed, maxRedemptionsPerUser: 0)],
            groups: [SubscriptionGroup(id: "vip")])
        let problems = catalog.validate().map(\.description)
        for expected in [
            "bundleId: must not be empty when present",
            "products[0].level: auto-renewable \"a\" needs a level >= 1 (1 = highest service)",
            "products[0].durationDays: auto-renewable \"a\" needs durationDays >= 1",
            "products[1].id: product \"a\" is listed twice",
            "products[1].credits: consumable \"a\" needs credits >= 1 (units per purchase)",
            "products[2].durationDays: non-renewing \"p\" needs durationDays >= 1: Apple sends no expiry for it",
            "products[3].durationDays: a non-consumable is open-ended: remove durationDays",
            "products[4].group: group \"typo\" is not declared in groups",
            "products[4].introVariantOf: unknown product \"nope\"",
            "promotionalOffers[0].productId: unknown product \"coins\"",
        ] {
            XCTAssertTrue(problems.contains(expected), "missing \(expected) in \(problems)")
        }
    }

    func testR8IntroVariantsMustMirrorTheirProductAndR9OffersMustBeReachable() {
        var catalog = TestCatalog.standard
        catalog.products.append(CatalogProduct(id: "vip.a.3m.nointro", kind: .autoRenewable, group: "vip", level: 2,
                                               durationDays: 30, introVariantOf: "vip.a.3m"))
        catalog.promotionalOffers.append(PromotionalOffer(id: "up", productId: "vip.basic.1m", audience: .currentLowerLevel))
        let problems = catalog.validate().map(\.description)
        XCTAssertTrue(problems.contains { $0.contains("must have the same group, level and duration") }, "\(problems)")
        XCTAssertTrue(problems.contains { $0.contains("nobody could ever qualify") }, "\(problems)")
    }

    func testUnreadableCatalogSaysWhereAndWhat() {
        XCTAssertThrowsError(try Catalog.load(json: Array(#"{"products": [{"id": "a", "kind": "subscription"}]}"#.utf8), source: "c.json")) { error in
            let text = String(describing: error)
            XCTAssertTrue(text.hasPrefix("catalog c.json is not valid JSON for a catalog: products[0].kind"), text)
        }
        XCTAssertThrowsError(try Catalog.load(json: Array(#"{"products": [{"kind": "consumable"}]}"#.utf8), source: "c.json")) { error in
            XCTAssertTrue(String(describing: error).contains("products[0]: required key \"id\" is missing"), String(describing: error))
        }
        XCTAssertThrowsError(try Catalog.load(json: Array(#"{"products": [{"id": "c", "kind": "consumable"}]}"#.utf8), source: "c.json")) { error in
            XCTAssertEqual(String(describing: error), """
                catalog c.json has 1 problem:
                  - products[0].credits: consumable "c" needs credits >= 1 (units per purchase)
                """)
        }
    }

    func testOlderCatalogShapeStillLoads() throws {
        // The shape before groups/accounts existed, and offers without a priority.
        let json = #"{"products": [{"id": "v", "kind": "auto-renewable", "group": "g", "level": 1, "durationDays": 30}], "promotionalOffers": [{"id": "o", "productId": "v", "audience": "current"}]}"#
        let catalog = try Catalog.load(json: Array(json.utf8), source: "old")
        XCTAssertEqual(catalog.promotionalOffers.first?.priority, 100)
        XCTAssertEqual(catalog.accounts.transfer, .move)
    }
}
