import AppleDecoding
import Configuration
import Crypto
import Domain
import Foundation
import FuzzDriver

/// libFuzzer target: the whole pure path on in-memory state, with the functions the stages call.
/// One input is up to eight records separated by a line `--8<--`; each is fed, in order, as
///  - a raw notification and a raw receipt upload: decode (`AppleInputDecoder`), then the decode
///    stage's bounds check (`EventBounds.check`);
///  - a record on the decoded topic (AppleEvent) and on the commands topic (MembershipCommand), binary
///    or legacy JSON as `TopicRecords` reads them, as if it got there some other way;
/// then dedupe → classify → membership apply, with each stage's entry check, as the stages chain them
/// (each output goes through its binary topic encoding, as it does on the topics), and every command is applied
/// twice: the redelivery must change nothing; at the end the whole command history is delivered again
/// (a stage killed before its offset commit republishes a prefix behind newer records) and must change
/// nothing either. The same events also run
/// through the domain *without* the entry checks: no value may make the arithmetic trap even if a
/// check is missed.
@discardableResult
func fuzzOne(_ bytes: [UInt8]) -> (checked: Int, unchecked: Int) {
    var checked = PurePipeline(enforceBounds: true)
    var unchecked = PurePipeline(enforceBounds: false)
    for record in records(in: bytes) {
        var events: [AppleEvent] = []
        for source in [RawSource.appStoreNotification, .appReceipt] {
            let input = RawInput(source: source, body: record, receivedAtMs: FuzzSetup.receivedAtMs, position: nil)
            if case .success(let decoded) = FuzzSetup.decoder.decode(input) { events += decoded }
        }
        if let event = try? TopicRecords.decodeAppleEvent(record) { events.append(event) }
        for event in events {
            checked.decoded(event)
            unchecked.decoded(event)
        }
        if let command = try? TopicRecords.decodeCommand(record) {
            checked.injected(command)
            unchecked.injected(command)
        }
    }
    checked.redeliverHistory()
    return (checked.entries, unchecked.entries)
}

/// Splits an input into records at `\n--8<--\n`.
func records(in bytes: [UInt8]) -> [[UInt8]] {
    let separator = Array("\n--8<--\n".utf8)
    var result: [[UInt8]] = []
    var start = 0, index = 0
    while index + separator.count <= bytes.count, result.count < 7 {
        if bytes[index..<(index + separator.count)].elementsEqual(separator) {
            result.append(Array(bytes[start..<index]))
            index += separator.count
            start = index
        } else {
            index += 1
        }
    }
    result.append(Array(bytes[start...]))
    return result
}

/// Dedupe's memory, classify's catalog and membership's book, as the stages keep them in PostgreSQL.
struct PurePipeline {
    let enforceBounds: Bool
    var known: [String: [KnownPurchase]] = [:]
    var seen: Set<String> = []
    var book = MembershipBook()
    /// Ledger entries made (replays print them: a seed that makes none exercises little).
    var entries = 0
    /// The decoded topic's next offset, and every command classify made, in order.
    var nextOffset: Int64 = 0
    var history: [MembershipCommand] = []
    /// A command fed from the input itself carries any position (or none): no order to check against.
    var injected = false

    init(enforceBounds: Bool) { self.enforceBounds = enforceBounds }

    /// A decoded event: decode's bounds check, then dedupe (its own entry check), classify, membership.
    mutating func decoded(_ event: AppleEvent) {
        guard let event = try? TopicRecords.decodeAppleEvent(TopicRecords.encode(event)), passes(EventBounds.check(event)) else { return }
        guard seen.insert("\(event.subscriptionKey)|\(seenKey(of: event))").inserted else { return }
        let outcome = dedupe(event: event, known: known[event.subscriptionKey] ?? [])
        known[event.subscriptionKey] = outcome.updated
        guard !outcome.changes.isEmpty || event.notification != nil || event.renewalInfo != nil || event.appUserId != nil else { return }
        let position = RecordPosition(topic: Topic.decoded, partition: 0, offset: nextOffset)
        nextOffset += 1
        let decodedRecord = TopicRecords.encode(event)
        let uniqueRecord = TopicRecords.encodeUnique(event: event, decodedRecord: decodedRecord, purchases: outcome.changes, position: position)
        guard let unique = try? TopicRecords.decodeUniqueEvent(uniqueRecord),
              passes(EventBounds.check(unique)) else { return }
        for command in classify(unique, catalog: FuzzSetup.catalog) {
            self.command(command)
            history.append(command)
        }
    }

    /// A command record from the input.
    mutating func injected(_ command: MembershipCommand) {
        injected = true
        self.command(command)
    }

    /// Every command again, in order, after all of them: nothing may change.
    mutating func redeliverHistory() {
        guard !injected else { return }
        let settled = book
        for command in history {
            guard let command = roundTrip(command), passes(EventBounds.check(command)) else { continue }
            let again = book.apply(command)
            precondition(again.isEmpty, "redelivering \(command.commandId) after newer commands made \(again.map(\.kind))")
        }
        precondition(book == settled, "redelivering the command history changed the state")
    }

    mutating func command(_ command: MembershipCommand) {
        guard let command = roundTrip(command), passes(EventBounds.check(command)) else { return }
        let made = book.apply(command)
        entries += made.count
        // Redelivery of the record just applied changes nothing (the stages rely on it after a crash
        // between the PostgreSQL commit and the offset commit).
        let before = book
        let again = book.apply(command)
        precondition(again.isEmpty && book == before, "re-applying \(command.commandId) made \(again.count) more ledger entries")
        for entry in made {
            // The ledger's description of what changed is built for people; it must be buildable.
            _ = entry.interval?.description
        }
        _ = groupMemberships(of: Array(book.subscriptions.values))
        _ = LedgerProjection(states: Array(book.subscriptions.values)).balances
    }

    private func passes(_ failure: PermanentFailure?) -> Bool { !enforceBounds || failure == nil }

    /// Through the topic's encoding, as the next stage reads it; it must give back what went in.
    private func roundTrip(_ command: MembershipCommand) -> MembershipCommand? {
        let decoded = try? TopicRecords.decodeCommand(TopicRecords.encode(command))
        precondition(decoded == command, "command \(command.commandId) changed through its topic encoding")
        return decoded
    }
}

enum FuzzSetup {
    static let receivedAtMs: Int64 = 1_709_251_200_000
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    /// V1 without a shared secret (so every body reaches the domain), V2 against Apple's test CA and
    /// local receipts against Apple's root (`FuzzDriver.decodingConfiguration`, as FuzzNotification).
    static let decoder: AppleInputDecoder = {
        try! FuzzDriver.decodingConfiguration().makeDecoder()
    }()

    /// Every product kind, levels for switches, and the fixtures' product ids.
    static let catalog = Catalog(
        products: [
            CatalogProduct(id: "com.educreations.proteacher.1month", kind: .autoRenewable, group: "pro", level: 2, durationDays: 30),
            CatalogProduct(id: "com.educreations.proteacher.1year", kind: .autoRenewable, group: "pro", level: 2, durationDays: 365),
            CatalogProduct(id: "month_premium", kind: .autoRenewable, group: "premium", level: 1, durationDays: 30),
            CatalogProduct(id: "year_premium", kind: .autoRenewable, group: "premium", level: 2, durationDays: 365),
            CatalogProduct(id: "vip.a.1m", kind: .autoRenewable, group: "vip", level: 2, durationDays: 30),
            CatalogProduct(id: "vip.b.1m", kind: .autoRenewable, group: "vip", level: 1, durationDays: 30),
            CatalogProduct(id: "coins", kind: .consumable, group: "coins", credits: 100),
            CatalogProduct(id: "lifetime", kind: .nonConsumable, group: "lifetime"),
            CatalogProduct(id: "pass", kind: .nonRenewing, group: "pass", durationDays: 7),
        ],
        groups: [SubscriptionGroup(id: "pro"), SubscriptionGroup(id: "premium"), SubscriptionGroup(id: "vip")])
}

/// Seeds the fixtures cannot give: decoded events and commands as the topics carry them (the legacy
/// JSON records, and the same inputs in the binary encoding).
enum Seeds {
    static func write(to directory: String) throws {
        let t: Int64 = 1_709_251_200_000, month: Int64 = 2_592_000_000
        let buy = TransactionFacts(transactionId: "10", originalTransactionId: "10", webOrderLineItemId: "w10", productId: "vip.a.1m",
                                   bundleId: "com.example", purchaseDateMs: t, expiresDateMs: t + month)
        var refund = buy
        refund.cancellationDateMs = t + month / 2
        refund.cancellationReason = "0"
        let coins = TransactionFacts(transactionId: "20", originalTransactionId: "20", productId: "coins", purchaseDateMs: t, quantity: 3)
        func event(_ id: String, _ type: String, _ transactions: [TransactionFacts], user: String? = nil) -> AppleEvent {
            AppleEvent(eventId: id, source: .notificationV1, environment: "Production", bundleId: "com.example",
                       subscriptionKey: transactions[0].originalTransactionId,
                       notification: NotificationMeta(type: type, autoRenewStatus: true),
                       transactions: transactions, appUserId: user, receivedAtMs: t)
        }
        let link = MembershipCommand(commandId: "c1#link", subscriptionKey: "10",
                                     action: .linkUser(UserLink(userId: "user-1", via: "receipt-upload")), reason: "seed",
                                     cause: Cause(source: .appReceipt, eventId: "c1"))
        let records = [
            [event("e1", "INITIAL_BUY", [buy], user: "user-1"), event("e2", "REFUND", [refund])].map { try? FuzzSetup.encoder.encode($0) },
            [event("e3", "DID_RENEW", [coins])].map { try? FuzzSetup.encoder.encode($0) },
            [try? FuzzSetup.encoder.encode(link), try? FuzzSetup.encoder.encode(event("e4", "INITIAL_BUY", [buy]))],
        ]
        let binary = [
            [TopicRecords.encode(event("e1", "INITIAL_BUY", [buy], user: "user-1")), TopicRecords.encode(event("e2", "REFUND", [refund]))],
            [TopicRecords.encode(link), TopicRecords.encode(event("e4", "INITIAL_BUY", [buy]))],
        ]
        let separator = Array("\n--8<--\n".utf8)
        for (index, parts) in records.enumerated() {
            let joined = parts.compactMap { $0 }.map { [UInt8]($0) }.joined(separator: separator)
            try Data(Array(joined)).write(to: URL(fileURLWithPath: "\(directory)/pipeline-seed-\(index).json"))
        }
        for (index, parts) in binary.enumerated() {
            try Data(Array(parts.joined(separator: separator))).write(to: URL(fileURLWithPath: "\(directory)/pipeline-seed-binary-\(index).bin"))
        }
    }
}

/// `FuzzDriver.run`; either build: `Setting.fuzzWriteSeeds=DIR FuzzPipeline` writes the synthetic
/// seeds and exits.
@main
struct Entry {
    static func main() {
        if let directory = FuzzConfiguration.process.writeSeeds {
            do { try Seeds.write(to: directory) } catch { print("cannot write seeds: \(error)"); exit(1) }
            exit(0)
        }
        FuzzDriver.run({ _ = fuzzOne($0) }) { path, bytes in
            let made = fuzzOne(bytes)
            print("\(path): \(made.checked) ledger entries (\(made.unchecked) without the bounds checks)")
        }
    }
}
