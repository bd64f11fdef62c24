/// R5: what moving from one product to another in the same group means, from the catalog's levels
/// (1 = highest service) and durations.
public enum ProductRelation: String, Sendable, Codable {
    /// To a higher level: immediate, the old purchase refunded pro rata.
    case upgrade
    /// To a lower level: at the next renewal.
    case downgrade
    /// Same level, same duration: immediate, the old purchase refunded pro rata.
    case crossgrade
    /// Same level, different duration (A1 → A3): at the next renewal; until then Apple still
    /// reports A1, with A3 as `auto_renew_product_id`.
    case crossgradeAtRenewal = "crossgrade-at-renewal"
    /// The catalog does not know both products (or they are in different groups).
    case unknown = "switch"

    public var takesEffectImmediately: Bool? {
        switch self {
        case .upgrade, .crossgrade: return true
        case .downgrade, .crossgradeAtRenewal: return false
        case .unknown: return nil
        }
    }

    var cutKind: Cut.Kind {
        switch self {
        case .upgrade: return .upgrade
        case .downgrade: return .downgrade
        case .crossgrade, .crossgradeAtRenewal: return .crossgrade
        case .unknown: return .switch
        }
    }
}

extension Catalog {
    public func relation(from old: String, to new: String) -> ProductRelation {
        guard let a = product(old), let b = product(new), a.kind == .autoRenewable, b.kind == .autoRenewable,
              a.group == b.group, let from = a.level, let to = b.level else { return .unknown }
        if to < from { return .upgrade }
        if to > from { return .downgrade }
        return a.durationDays == b.durationDays ? .crossgrade : .crossgradeAtRenewal
    }
}
