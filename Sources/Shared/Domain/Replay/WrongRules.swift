/// Deliberately wrong rules behind a test-only switch (`Setting.testWrongRule`): the replay
/// tests (issue 13) run the pipeline with one, then replay with the rule fixed and check that exactly
/// the affected users are corrected. Never set in production; a worker logs it at start.
public struct WrongRules: Sendable, Equatable {
    /// classify: a crossgrade's new purchase is granted as a new period after the old one, which
    /// keeps its whole period (two months instead of one, the S3 mistake).
    public var crossgradeAsNewPeriod = false
    /// dedupe: `transaction_id` as the purchase identity (a restore is a purchase of its own, R1).
    public var dedupe: DedupeRule = .standard

    public init() {}

    public static let none = WrongRules()

    public var isEmpty: Bool { self == .none }

    /// A comma-separated list of `crossgrade-as-new-period`, `trust-transaction-id`; empty = none.
    public static func parse(_ text: String) throws(ReplayUsageError) -> WrongRules {
        var rules = WrongRules()
        for name in text.split(separator: ",") where !name.isEmpty {
            switch name {
            case "crossgrade-as-new-period": rules.crossgradeAsNewPeriod = true
            case "trust-transaction-id": rules.dedupe = .trustTransactionId
            default: throw ReplayUsageError("unknown wrong rule \(name) (crossgrade-as-new-period, trust-transaction-id)")
            }
        }
        return rules
    }

    /// classify's wrong rule applied to the commands of one event: a purchase cut by a crossgrade
    /// loses its cut, and the purchase that replaced it starts where the old period ends.
    public func applyToClassified(_ commands: [MembershipCommand]) -> [MembershipCommand] {
        guard crossgradeAsNewPeriod else { return commands }
        var result = commands
        for (index, command) in commands.enumerated() {
            guard case .purchase(var old) = command.action, old.cut?.kind == .crossgrade, let oldEnd = old.endMs else { continue }
            old.cut = nil
            result[index].action = .purchase(old)
            for (other, candidate) in result.enumerated() where other != index {
                guard case .purchase(var new) = candidate.action, new.group == old.group, new.purchaseId != old.purchaseId,
                      new.startMs >= old.startMs, new.startMs < oldEnd, let newEnd = new.endMs else { continue }
                let length = newEnd.saturatingSubtracting(new.startMs)
                new.startMs = oldEnd
                new.endMs = oldEnd.saturatingAdding(length)
                result[other].action = .purchase(new)
            }
        }
        return result
    }
}
