import Foundation

/// One thing wrong with a catalog, with where it is (a JSON path such as `products[2].level`).
public struct CatalogProblem: Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var message: String
    public init(_ path: String, _ message: String) { self.path = path; self.message = message }
    public var description: String { "\(path): \(message)" }
}

/// Why a catalog cannot be used. Every problem is listed at once, so an operator fixes the file in one go.
public enum CatalogError: Error, Sendable, Equatable, CustomStringConvertible {
    case unreadable(source: String, reason: String)
    case invalid(source: String, problems: [CatalogProblem])

    public var description: String {
        switch self {
        case .unreadable(let source, let reason):
            return "catalog \(source) is not valid JSON for a catalog: \(reason)"
        case .invalid(let source, let problems):
            return "catalog \(source) has \(problems.count) problem\(problems.count == 1 ? "" : "s"):\n"
                + problems.map { "  - \($0)" }.joined(separator: "\n")
        }
    }
}

extension Catalog {
    /// Decodes and validates a catalog file's bytes. `source` names the file in error messages.
    public static func load(json: [UInt8], source: String) throws(CatalogError) -> Catalog {
        let catalog: Catalog
        do {
            catalog = try JSONDecoder().decode(Catalog.self, from: Data(json))
        } catch let error as DecodingError {
            throw .unreadable(source: source, reason: describe(error))
        } catch {
            throw .unreadable(source: source, reason: String(describing: error))
        }
        let problems = catalog.validate()
        guard problems.isEmpty else { throw .invalid(source: source, problems: problems) }
        return catalog
    }

    /// Everything that would make classification or offers wrong: missing levels or durations,
    /// dangling references, duplicates. Empty means usable.
    public func validate() -> [CatalogProblem] {
        var problems: [CatalogProblem] = []
        if let bundleId, bundleId.trimmingCharacters(in: .whitespaces).isEmpty {
            problems.append(CatalogProblem("bundleId", "must not be empty when present"))
        }
        let declaredGroups = Set(groups.map(\.id))
        var seenGroups: Set<String> = []
        for (index, group) in groups.enumerated() {
            if group.id.isEmpty { problems.append(CatalogProblem("groups[\(index)].id", "must not be empty")) }
            if !seenGroups.insert(group.id).inserted {
                problems.append(CatalogProblem("groups[\(index)].id", "group \"\(group.id)\" is declared twice"))
            }
        }
        var seenProducts: Set<String> = []
        for (index, product) in products.enumerated() {
            let path = "products[\(index)]"
            if product.id.isEmpty { problems.append(CatalogProblem("\(path).id", "must not be empty")) }
            if !seenProducts.insert(product.id).inserted {
                problems.append(CatalogProblem("\(path).id", "product \"\(product.id)\" is listed twice"))
            }
            problems += validateProduct(product, path: path, declaredGroups: declaredGroups)
        }
        for (index, group) in groups.enumerated() where !products.contains(where: { $0.kind == .autoRenewable && $0.group == group.id }) {
            problems.append(CatalogProblem("groups[\(index)]", "group \"\(group.id)\" has no auto-renewable product"))
        }
        var seenOffers: Set<String> = []
        for (index, offer) in promotionalOffers.enumerated() {
            let path = "promotionalOffers[\(index)]"
            if offer.id.isEmpty { problems.append(CatalogProblem("\(path).id", "must not be empty")) }
            if !seenOffers.insert(offer.id).inserted {
                problems.append(CatalogProblem("\(path).id", "offer \"\(offer.id)\" is listed twice"))
            }
            problems += validateOffer(offer, path: path)
        }
        return problems
    }

    private func validateProduct(_ product: CatalogProduct, path: String, declaredGroups: Set<String>) -> [CatalogProblem] {
        var problems: [CatalogProblem] = []
        func require(_ condition: Bool, _ field: String, _ message: String) {
            if !condition { problems.append(CatalogProblem("\(path).\(field)", message)) }
        }
        let name = "\"\(product.id)\""
        switch product.kind {
        case .autoRenewable:
            require(product.group.map { !$0.isEmpty } ?? false, "group", "auto-renewable \(name) needs its subscription group")
            require(product.level.map { $0 >= 1 } ?? false, "level", "auto-renewable \(name) needs a level >= 1 (1 = highest service)")
            require(product.durationDays.map { $0 >= 1 } ?? false, "durationDays", "auto-renewable \(name) needs durationDays >= 1")
            require(product.credits == nil, "credits", "only consumables credit units")
            if let group = product.group, !declaredGroups.isEmpty {
                require(declaredGroups.contains(group), "group", "group \"\(group)\" is not declared in groups")
            }
        case .nonRenewing:
            require(product.durationDays.map { $0 >= 1 } ?? false, "durationDays",
                    "non-renewing \(name) needs durationDays >= 1: Apple sends no expiry for it")
            require(product.credits == nil, "credits", "only consumables credit units")
        case .consumable:
            require(product.credits.map { $0 >= 1 } ?? false, "credits", "consumable \(name) needs credits >= 1 (units per purchase)")
            require(product.durationDays == nil, "durationDays", "a consumable has no duration")
        case .nonConsumable:
            require(product.durationDays == nil, "durationDays", "a non-consumable is open-ended: remove durationDays")
            require(product.credits == nil, "credits", "only consumables credit units")
        case .unknown:
            problems.append(CatalogProblem("\(path).kind",
                                           "kind must be auto-renewable, non-renewing, consumable or non-consumable"))
        }
        if product.kind != .autoRenewable {
            require(product.level == nil, "level", "levels apply to auto-renewable subscriptions only")
        }
        // Upper bounds keep period ends and credits × quantity inside what PostgreSQL stores (docs/limits.md).
        if let failure = EventBounds.identifier(product.id, field: "id", required: false) {
            problems.append(CatalogProblem("\(path).id", failure.reason))
        }
        require(product.durationDays.map { $0 <= EventBounds.durationDays.upperBound } ?? true, "durationDays",
                "at most \(EventBounds.durationDays.upperBound) days")
        require(product.credits.map { $0 <= EventBounds.credits.upperBound } ?? true, "credits",
                "at most \(EventBounds.credits.upperBound) units per purchase")
        require(product.level.map { $0 <= EventBounds.level.upperBound } ?? true, "level", "at most \(EventBounds.level.upperBound)")
        if let base = product.introVariantOf {
            if let other = self.product(base) {
                require(product.kind == .autoRenewable && other.kind == .autoRenewable, "introVariantOf",
                        "intro variants pair two auto-renewable products")
                require(base != product.id, "introVariantOf", "a product cannot be its own intro variant")
                require(other.introVariantOf == nil, "introVariantOf", "\"\(base)\" is itself a variant of another product")
                require(other.group == product.group && other.level == product.level && other.durationDays == product.durationDays,
                        "introVariantOf", "\"\(base)\" must have the same group, level and duration as \(name)")
            } else {
                problems.append(CatalogProblem("\(path).introVariantOf", "unknown product \"\(base)\""))
            }
        }
        return problems
    }

    private func validateOffer(_ offer: PromotionalOffer, path: String) -> [CatalogProblem] {
        guard let product = product(offer.productId) else {
            return [CatalogProblem("\(path).productId", "unknown product \"\(offer.productId)\"")]
        }
        var problems: [CatalogProblem] = []
        if product.kind != .autoRenewable {
            problems.append(CatalogProblem("\(path).productId", "promotional offers apply to auto-renewable subscriptions only"))
        }
        if let failure = EventBounds.identifier(offer.id, field: "id", required: false) {
            problems.append(CatalogProblem("\(path).id", failure.reason))
        }
        if let max = offer.maxRedemptionsPerUser, max < 1 {
            problems.append(CatalogProblem("\(path).maxRedemptionsPerUser", "must be >= 1 when present (omit it for no limit)"))
        }
        if offer.audience == .currentLowerLevel, let level = product.level, let group = product.group,
           !products.contains(where: { $0.group == group && ($0.level ?? 0) > level }) {
            problems.append(CatalogProblem("\(path).audience",
                                           "no product in group \"\(group)\" has a lower level than \"\(product.id)\": nobody could ever qualify"))
        }
        return problems
    }
}

/// DecodingError's own text is long and names Swift types; operators need the JSON path and the fix.
private func describe(_ error: DecodingError) -> String {
    func path(_ context: DecodingError.Context) -> String {
        let text = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        return text.isEmpty ? "(top level)" : String(text.drop { $0 == "." })
    }
    switch error {
    case .typeMismatch(let type, let context):
        return "\(path(context)): expected \(type) (\(context.debugDescription))"
    case .valueNotFound(_, let context):
        return "\(path(context)): value missing"
    case .keyNotFound(let key, let context):
        let base = path(context)
        return "\(base == "(top level)" ? "" : base + ": ")required key \"\(key.stringValue)\" is missing"
    case .dataCorrupted(let context):
        return "\(path(context)): \(context.debugDescription)"
    @unknown default:
        return String(describing: error)
    }
}
