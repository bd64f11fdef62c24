import Configuration
import Domain
import Foundation
import Runtime
import Stages
import Store

/// `storeledger bench fold`: membership's own CPU per command, without Kafka or PostgreSQL: the
/// batch's plan (`MembershipPlan`: the fold, each entry's meaning, the changed states and their JSON,
/// finance rows, per-user views) and its ledger and outbox rows, on the calling thread. The same
/// work runs in membership's thread of `bench pipeline` between the batch's reads and writes; here
/// it is alone, so changes to the domain code compare in ratios that the host's noise, the broker
/// and PostgreSQL do not blur.
///
/// Traffic: `--subscriptions` (default 10,000; --quick 2,000) subscriptions, two per user, each a user
/// link, SUBSCRIBED, `--renewals` renewals (default 11, a year of monthly periods) and a refund of the
/// last period, interleaved as a stage sees them (every subscription's first command, then every
/// second, …) in batches of `Setting.benchBatch` (default 500). Each batch starts from the
/// states the earlier batches left, as membership loads them. `--runs` rounds (default 5; --quick 3)
/// from empty states; medians.
public enum FoldBench {
    public static func run(_ arguments: Arguments) throws -> Int32 {
        let quick = arguments.has("quick")
        let subscriptions = try arguments.int("subscriptions", default: quick ? 2_000 : 10_000)
        let renewals = try arguments.int("renewals", default: 11)
        let runs = try arguments.int("runs", default: quick ? 3 : 5)
        let batch = try BenchConfiguration.read(arguments).batch
        guard (2...1_000_000).contains(subscriptions), (0...1_000).contains(renewals), (1...100).contains(runs),
              (1...100_000).contains(batch) else {
            throw UsageError("--subscriptions 2…1,000,000, --renewals 0…1,000, --runs 1…100, \(Setting.benchBatch.name) 1…100,000")
        }
        let lives = (0..<subscriptions).map { Self.commands(subscription: $0, renewals: renewals) }
        let commands = interleaved(lives)
        var rounds: [Round] = []
        for _ in 0..<runs { rounds.append(round(commands, batch: batch)) }
        let count = Double(commands.count)
        let perCommand: [Double] = rounds.map { $0.cpuSeconds / count * 1e6 }.sorted()
        let median = perCommand[perCommand.count / 2]
        var text = "bench fold: \(commands.count) commands over \(subscriptions) subscriptions "
            + "(\(renewals) renewals each), batches of \(batch), \(runs) rounds\n"
        text += "  membership's plan + ledger and outbox rows: \(String(format: "%.1f", median)) µs of CPU per command (median; rounds "
            + perCommand.map { String(format: "%.1f", $0) }.joined(separator: " / ") + ")\n"
        text += "  entries per command \(String(format: "%.2f", Double(rounds[0].entries) / Double(commands.count))), "
            + "outbox events per command \(String(format: "%.2f", Double(rounds[0].events) / Double(commands.count))), "
            + "states written per command \(String(format: "%.2f", Double(rounds[0].states) / Double(commands.count)))\n"
        FileHandle.standardOutput.write(Data(text.utf8))
        // A fold that grants nothing measures nothing: the traffic grants at least once per subscription.
        return rounds.allSatisfy({ $0.entries >= subscriptions }) ? 0 : 1
    }

    struct Round { var cpuSeconds = 0.0; var entries = 0; var events = 0; var states = 0 }

    /// One round from empty states: batches in order, each loading what the earlier ones stored.
    static func round(_ commands: [MembershipCommand], batch: Int) -> Round {
        var stored: [String: [UInt8]] = [:]   // states as membership stores them: JSON
        var keysByUser: [String: Set<String>] = [:]
        var result = Round()
        var nextId: Int64 = 1
        var start = 0
        while start < commands.count {
            let slice = Array(commands[start..<min(start + batch, commands.count)])
            start += slice.count
            let keys = Array(Set(slice.map(\.subscriptionKey))).sorted()
            let before = CPUTime.threadSeconds()
            let loaded = keys.compactMap { stored[$0].map(load) }
            var users = Set(loaded.compactMap(\.userId))
            for command in slice { if case .linkUser(let link) = command.action { users.insert(link.userId) } }
            let addressed = Set(keys)
            let others = users.flatMap { keysByUser[$0] ?? [] }.filter { !addressed.contains($0) }.compactMap { stored[$0].map(load) }
            let plan = MembershipPlan(slice, keys: keys, loaded: loaded, others: others)
            let ids = (0..<Int64(plan.described.count)).map { nextId + $0 }
            let ledger = plan.ledgerRows(ids: ids)
            let outbox = plan.outboxRows(ids: ids, nowMs: 1_767_000_000_000)
            result.cpuSeconds += CPUTime.threadSeconds() - before

            nextId += Int64(ids.count)
            result.entries += ledger.count
            result.events += outbox.count
            result.states += plan.states.count
            let owners = Dictionary(uniqueKeysWithValues: loaded.map { ($0.subscriptionKey, $0.userId) })
            for (state, row) in zip(plan.changed, plan.states) {
                if let old = owners[state.subscriptionKey] ?? nil { keysByUser[old]?.remove(state.subscriptionKey) }
                if let user = state.userId { keysByUser[user, default: []].insert(state.subscriptionKey) }
                stored[state.subscriptionKey] = row.state
            }
        }
        return result
    }

    /// A stored state read as membership's batch reads it (`StoredJSONReader`); the bench wrote it, so it reads.
    static func load(_ json: [UInt8]) -> SubscriptionState {
        json.withUnsafeBufferPointer { StoredJSONReader.document($0, SubscriptionState.read) }!
    }

    /// Every subscription's first command, then every second, … (the order a stage sees them in).
    static func interleaved(_ perSubscription: [[MembershipCommand]]) -> [MembershipCommand] {
        let longest = perSubscription.map(\.count).max() ?? 0
        return (0..<longest).flatMap { step in perSubscription.compactMap { step < $0.count ? $0[step] : nil } }
    }

    /// One subscription's commands: a user link (two subscriptions per user), SUBSCRIBED, `renewals`
    /// renewals and a refund of the last period.
    static func commands(subscription index: Int, renewals: Int, prefix: String = "fold") -> [MembershipCommand] {
        let t0: Int64 = 1_709_251_200_000, month: Int64 = 30 * 86_400_000
        let key = "\(prefix)-\(index)"
        let cause = Cause(source: .notificationV2, eventId: key)
        var result = [MembershipCommand(commandId: "\(key)-link", subscriptionKey: key,
                                        action: .linkUser(UserLink(userId: "user-\(index / 2)", via: UserLink.appAccountToken, claimedAtMs: t0)),
                                        reason: "appAccountToken", cause: cause)]
        for period in 0...renewals {
            let start = t0 + Int64(period) * month
            var grant = PurchaseGrant(purchaseId: "\(key)|p|\(period)", transactionId: "\(key)-\(period)", originalTransactionId: key,
                                      productId: "vip.1m", productKind: .autoRenewable, group: "vip", startMs: start, endMs: start + month,
                                      level: 1, durationDays: 30)
            result.append(MembershipCommand(commandId: "\(key)-\(period)", subscriptionKey: key, action: .purchase(grant),
                                            reason: period == 0 ? "SUBSCRIBED" : "DID_RENEW", cause: cause))
            if period == renewals {
                grant.cut = Cut(atMs: start + month / 2, kind: .refund)
                result.append(MembershipCommand(commandId: "\(key)-refund", subscriptionKey: key, action: .purchase(grant),
                                                reason: "REFUND", cause: cause))
            }
        }
        return result
    }
}
