import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
import Synchronization

/// What an operator asks of `storeledger replay`.
public struct ReplayRequest: Sendable {
    public var stage: ReplayStage
    public var from: ReplayBound
    public var to: ReplayBound?
    /// Only these users' (or `subscription:<key>` owners') subscriptions are corrected.
    public var users: Set<String>?
    public var dryRun: Bool
    public var codeVersion: String
    /// Appended to each stage's group id (`storeledger-<stage>`): the workers were started with
    /// `--group storeledger-<stage><suffix>` (a rebuild under new group ids).
    public var groupSuffix: String

    public init(stage: ReplayStage, from: ReplayBound, to: ReplayBound? = nil, users: Set<String>? = nil, dryRun: Bool = false,
                codeVersion: String = CodeVersion.current, groupSuffix: String = "") {
        self.stage = stage
        self.from = from
        self.to = to
        self.users = users
        self.dryRun = dryRun
        self.codeVersion = codeVersion
        self.groupSuffix = groupSuffix
    }
}

/// What a replay did (or, with `--dry-run`, would do).
public struct ReplayReport: Codable, Sendable {
    public var stage: String
    public var dryRun: Bool
    public var codeVersion: String
    /// Records read from the stage's input topics (each subscription's whole history).
    public var recordsRead: Int
    /// Records of the requested range.
    public var recordsInRange: Int
    /// Subscriptions recomputed (those with input in the range, after `--users`).
    public var subscriptions: Int
    /// Membership commands folded from scratch.
    public var commandsFolded: Int
    public var diff: ReplayDiff
    /// Ledger entries written (0 for a dry run).
    public var entriesWritten: Int
    public var seconds: Double
    /// Of `seconds`, the wait for the consumer groups (the embedded broker holds a first join ~3 s).
    public var joinSeconds: Double
    /// Input records per second through the whole recomputation (read, stages, fold, diff, write),
    /// from the moment the groups were held.
    public var recordsPerSecond: Double
}

/// A replay the command refuses, with the reason for the operator.
public struct ReplayRefused: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Replay (issue 13), the I/O shell around `ReplayCompensation`: holds the consumer groups of the
/// stage and every later one (refusing when a worker still runs), reads each recomputed
/// subscription's whole input history from the stage's topic, runs it through the same stage code
/// as the workers (dedupe rebuilding its memory in PostgreSQL), folds the resulting commands from
/// scratch, and writes the difference to what PostgreSQL holds as compensating entries through
/// `MembershipWriter` (so they publish as membership events too). Everything happens in one
/// transaction; `--dry-run` rolls it back. The groups' committed offsets are not moved: the stages
/// resume where they stopped, on corrected state.
public struct ReplayEngine {
    public var kafka: KafkaConfig
    public var databaseURL: String
    public var catalog: Catalog
    /// Needed to replay decode only.
    public var decoder: AppleInputDecoder?
    public var wrongRules: WrongRules
    public var joinTimeout: Duration = .seconds(60)
    private let logger = Logger(component: "replay")

    public init(kafka: KafkaConfig, databaseURL: String, catalog: Catalog, decoder: AppleInputDecoder?, wrongRules: WrongRules = .none) {
        self.kafka = kafka
        self.databaseURL = databaseURL
        self.catalog = catalog
        self.decoder = decoder
        self.wrongRules = wrongRules
    }

    public func run(_ request: ReplayRequest, progress: (ReplayProgress) -> Void) throws -> ReplayReport {
        let started = ContinuousClock.now
        func elapsed() -> Double {
            let d = ContinuousClock.now - started
            return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
        }
        if request.stage == .decode, decoder == nil { throw ReplayRefused("replaying decode needs the decode settings (docs/configuration.md)") }
        let reader = try TopicRangeReader(config: kafka)

        // 1. Hold every recomputed stage's group: nobody else may process meanwhile.
        var groups: [(groupId: String, topics: [String], partitions: Int)] = []
        for stage in request.stage.recomputedStages {
            var count = 0
            for topic in stage.inputTopics { count += Int(try reader.partitionCount(topic: topic)) }
            groups.append((stage.groupId + request.groupSuffix, stage.inputTopics, count))
        }
        let joined = try ConsumerGroupHold.join(config: kafka, groups: groups, timeout: joinTimeout)
        let holds = joined.map(\.hold)
        defer { for hold in holds { hold.close() } }
        if let busy = joined.first(where: { !$0.sole }) {
            throw ReplayRefused("""
                consumer group \(busy.hold.groupId) has active members: stop every `storeledger worker \
                \(busy.hold.groupId.replacingOccurrences(of: "storeledger-", with: ""))` (and every later stage's workers) before replaying
                """)
        }
        let generations = holds.map(\.consumer.rebalanceGeneration)
        let joinSeconds = elapsed()
        // The later stages caught up: PostgreSQL then reflects the derivation of everything the replayed
        // stage had committed (which is where its part of the replay ends; what arrived after it, the
        // stage processes when it starts again, on corrected state).
        for (stage, hold) in zip(request.stage.recomputedStages, holds).dropFirst() {
            for topic in stage.inputTopics {
                let partitions = Array(0..<(try reader.partitionCount(topic: topic)))
                let committed = try hold.consumer.committedOffsets(topic: topic, partitions: partitions, timeout: .seconds(10))
                for partition in partitions {
                    let marks = try reader.watermarks(topic: topic, partition: partition)
                    let behind = marks.high - (committed[partition] ?? marks.low)
                    if behind > 0 {
                        throw ReplayRefused("""
                            \(hold.groupId) has \(behind) record(s) of \(topic)[\(partition)] not yet processed: let the stage catch up, \
                            then stop it and replay
                            """)
                    }
                }
            }
        }

        // 2. The range per partition, and every record up to where the stage had committed.
        var ranges: [ReplayPartitionRange] = []
        for topic in request.stage.inputTopics {
            let partitions = Array(0..<(try reader.partitionCount(topic: topic)))
            let committed = try holds[0].consumer.committedOffsets(topic: topic, partitions: partitions, timeout: .seconds(10))
            for partition in partitions {
                let marks = try reader.watermarks(topic: topic, partition: partition)
                do {
                    ranges.append(try ReplayRange.resolve(
                        topic: topic, partition: partition, low: marks.low, high: marks.high, horizon: committed[partition] ?? marks.low,
                        from: request.from, to: request.to) { ms in
                            try reader.offset(forTime: ms, topic: topic, partition: partition, low: marks.low, high: marks.high)
                        })
                } catch let error as ReplayUsageError {
                    throw ReplayRefused(error.description)
                }
            }
        }
        let total = ranges.reduce(0) { $0 + Int($1.horizon - $1.low) }
        var read = 0
        var inRange = 0
        var records: [KafkaRecord] = []
        var keysInRange: Set<String> = []
        progress(ReplayProgress(phase: "reading", done: 0, total: total, elapsedSeconds: elapsed()))
        let decodeStage = decoder.map { DecodeStage(decoder: $0) }
        for range in ranges {
            try reader.read(topic: range.topic, partition: range.partition, from: range.low, to: range.horizon) { batch in
                for record in batch {
                    let inside = record.offset >= range.start && record.offset < range.end
                    if inside { inRange += 1 }
                    if let decodeStage {
                        // Raw inputs carry no subscription: decode each to learn (and keep) its events.
                        for output in try decodeStage.process([record], database: nil).outputs {
                            if inside { keysInRange.insert(output.key) }
                            // Positioned at its raw input: these events never sat in the decoded topic.
                            records.append(KafkaRecord(topic: record.topic, partition: record.partition, offset: record.offset,
                                                       key: Array(output.key.utf8), value: output.value, headers: [],
                                                       timestamp: record.timestamp))
                        }
                    } else {
                        if inside, let key = record.key { keysInRange.insert(String(decoding: key, as: UTF8.self)) }
                        records.append(record)
                    }
                }
                read += batch.count
                progress(ReplayProgress(phase: "reading", done: read, total: total, elapsedSeconds: elapsed()))
                return true
            }
        }
        if decodeStage != nil {
            records = Self.arrivalOrder(records)
        }
        records.removeAll { record in record.key.map { !keysInRange.contains(String(decoding: $0, as: UTF8.self)) } ?? true }

        // 3. Recompute in one transaction: dedupe memory, then the fold, the diff and the write.
        var options = PGOptions.process
        options.statementTimeoutMs = 0
        let db = try PGConnection(url: databaseURL, options: options)
        defer { db.close() }
        try db.begin()
        var committed = false
        defer { if !committed { try? db.rollback() } }
        if let users = request.users, request.stage == .decode || request.stage == .dedupe {
            // Only the named users' subscriptions are rebuilt: dedupe's memory of the others must stay
            // as their ledger (left alone) was computed, or the two would disagree.
            let owned = try ReplayStore(db).owned(by: users, among: keysInRange.sorted())
            // `subscription:<key>` names a subscription itself, owned or not.
            keysInRange = keysInRange.filter { owned.contains($0) || users.contains("subscription:\($0)") }
            records.removeAll { record in record.key.map { !keysInRange.contains(String(decoding: $0, as: UTF8.self)) } ?? true }
        }
        let keys = keysInRange.sorted()
        // Records a previous replay superseded (it republished the subscription's corrected derivation).
        let horizons = try loadHorizons(db, keys: keys, topics: request.stage == .decode ? [] : request.stage.inputTopics)
        if !horizons.isEmpty {
            records.removeAll { record in
                guard let key = record.key, let highs = horizons[HorizonKey(key: String(decoding: key, as: UTF8.self), topic: record.topic)] else { return false }
                return Int(record.partition) < highs.count && record.offset < highs[Int(record.partition)]
            }
        }
        var commands: [MembershipCommand] = []
        var uniqueOut: [OutputRecord] = []
        var done = 0
        let work = records.count
        func step(_ count: Int) {
            done += count
            progress(ReplayProgress(phase: "replaying", done: done, total: work, elapsedSeconds: elapsed()))
        }
        switch request.stage {
        case .decode, .dedupe:
            // Dedupe's memory of these subscriptions is rebuilt from their whole input (a fixed rule reaches old input).
            try DedupeStore(db).forget(keys)
            let dedupe = DedupeStage(rule: wrongRules.dedupe)
            var index = 0
            while index < records.count {
                let batch = Array(records[index..<min(index + 500, records.count)])
                index += batch.count
                for output in try dedupe.process(batch, database: db).outputs {
                    commands += try classified(output.value)
                    uniqueOut.append(output)
                }
                step(batch.count)
            }
        case .classify:
            for record in records { commands += try classified(record.value) }
            step(records.count)
        case .membership:
            // Decoded on every core: older records are JSON, most of a membership replay's time.
            let values = records.map(\.value)
            let decodedCommands = ReplayEngine.concurrently(values.count) { range in
                values[range].compactMap { value -> MembershipCommand? in
                    guard let command = try? TopicRecords.decodeCommand(value),
                          EventBounds.check(command) == nil else { return nil }   // the stage dead-lettered it
                    return command
                }
            }
            commands = decodedCommands
            step(records.count)
        }

        // 4. Fold from scratch, compare with what is stored, plan the compensation. A subscription's
        //    state depends on its own commands alone, so subscriptions fold apart, on every core.
        var grouped: [String: [MembershipCommand]] = [:]
        for command in commands { grouped[command.subscriptionKey, default: []].append(command) }
        let byKey = grouped
        let foldKeys = byKey.keys.sorted()
        let folded = ReplayEngine.concurrently(foldKeys.count) { range -> [(SubscriptionState, [String: Cause], [String: String])] in
            var out: [(SubscriptionState, [String: Cause], [String: String])] = []
            for key in foldKeys[range] {
                var book = MembershipBook()
                var causes: [String: Cause] = [:], reasons: [String: String] = [:]
                for command in byKey[key]! {
                    _ = book.apply(command)
                    if causes[key] == nil { causes[key] = command.cause }
                    if case .purchase(let grant) = command.action {
                        causes[grant.purchaseId] = command.cause
                        reasons[grant.purchaseId] = command.reason
                    }
                }
                if let state = book.subscriptions[key] { out.append((state, causes, reasons)) }
            }
            return out
        }
        var freshStates: [String: SubscriptionState] = [:]
        var causes: [String: Cause] = [:], reasons: [String: String] = [:]
        for (state, stateCauses, stateReasons) in folded {
            freshStates[state.subscriptionKey] = state
            causes.merge(stateCauses) { $1 }
            reasons.merge(stateReasons) { $1 }
        }
        let stored = try ReplayStore(db).states(keys)
        let storedByKey = Dictionary(stored.map { ($0.subscriptionKey, $0) }, uniquingKeysWith: { first, _ in first })
        var compensations: [MembershipCommand] = []
        for key in keys {
            let freshState = freshStates[key] ?? SubscriptionState(subscriptionKey: key)
            if let users = request.users {
                let owners = [storedByKey[key]?.userId, freshState.userId].map { $0 ?? "subscription:\(key)" }
                guard owners.contains(where: users.contains) else { continue }
            }
            let fallback = causes[key] ?? Cause(source: .notificationV1, eventId: "replay:\(key)")
            compensations += ReplayCompensation.commands(stored: storedByKey[key], fresh: freshState, stage: request.stage,
                                                         codeVersion: request.codeVersion, causes: causes, fallbackCause: fallback,
                                                         reasons: reasons)
        }

        // 5. The difference as the writer will compute it: the stored states of the subscriptions and
        //    of every other subscription of their users (exactly what MembershipWriter loads).
        let touched = Array(Set(compensations.map(\.subscriptionKey))).sorted()
        var predicted: [LedgerEntry] = []
        if !touched.isEmpty {
            let own = try ReplayStore(db).states(touched)
            let users = Array(Set(own.compactMap(\.userId))).sorted()
            let others = users.isEmpty ? [] : try MembershipStore(db).states(ofUsers: users, excluding: touched)
            var book = MembershipBook(own + others)
            for command in compensations { predicted += book.apply(command) }
        }
        let diff = ReplayDiff(entries: predicted)
        var written = 0
        if request.dryRun {
            try db.rollback()
        } else {
            if !compensations.isEmpty {
                written = try MembershipWriter(db).apply(compensations).entries
                guard written == predicted.count else {
                    throw ReplayRefused("replay: the writer made \(written) entries where \(predicted.count) were planned; rolled back")
                }
            }
            if let lost = zip(holds, generations).first(where: { $0.0.wasRebalanced(since: $0.1) }) {
                throw ReplayRefused("a worker joined \(lost.0.groupId) while the replay ran: rolled back, nothing written")
            }
            // The corrected subscriptions' new derivation goes to the topics after the stage, so a
            // later replay of a later stage starts from it (their older records there are superseded).
            let corrected = Set(compensations.map(\.subscriptionKey))
            var downstream: [(topic: String, records: [(key: String, value: [UInt8])])] = []
            if request.stage == .decode {
                downstream.append((Topic.decoded, records.compactMap { record in
                    record.key.map { (key: String(decoding: $0, as: UTF8.self), value: record.value) }
                }.filter { corrected.contains($0.key) }))
            }
            if request.stage == .decode || request.stage == .dedupe {
                downstream.append((Topic.unique, uniqueOut.filter { corrected.contains($0.key) }.map { (key: $0.key, value: $0.value) }))
            }
            if request.stage != .membership {
                downstream.append((Topic.commands, commands.filter { corrected.contains($0.subscriptionKey) }.map {
                    (key: $0.subscriptionKey, value: TopicRecords.encode($0))
                }))
            }
            if !corrected.isEmpty, !downstream.isEmpty {
                try republish(downstream, corrected: corrected.sorted(), stage: request.stage, codeVersion: request.codeVersion,
                              reader: reader, db: db)
            }
            try db.commit()
            if !corrected.isEmpty {
                // The later stages' groups move past what was republished: the workers must not apply it
                // again (only the replay wrote to those topics since they stopped, and they had caught up).
                for (stage, hold) in zip(request.stage.recomputedStages, holds).dropFirst() {
                    var ends: [PartitionID: Int64] = [:]
                    for topic in stage.inputTopics {
                        for partition in 0..<(try reader.partitionCount(topic: topic)) {
                            ends[PartitionID(topic: topic, partition: partition)] = try reader.watermarks(topic: topic, partition: partition).high
                        }
                    }
                    try hold.consumer.commit(offsets: ends)
                }
            }
            Metrics.shared.increment("storeledger_replay_entries_total", ["stage": request.stage.rawValue], by: Double(written))
        }
        committed = true
        let seconds = elapsed()
        logger.info("replay_finished", ["stage": .string(request.stage.rawValue), "dry_run": .of(request.dryRun ? 1 : 0),
                                        "records": .of(read), "subscriptions": .of(keys.count), "entries": .of(diff.entries),
                                        "written": .of(written), "code_version": .string(request.codeVersion)])
        return ReplayReport(stage: request.stage.rawValue, dryRun: request.dryRun, codeVersion: request.codeVersion,
                            recordsRead: read, recordsInRange: inRange, subscriptions: keys.count, commandsFolded: commands.count,
                            diff: diff, entriesWritten: written, seconds: seconds, joinSeconds: joinSeconds,
                            recordsPerSecond: seconds > joinSeconds ? Double(read) / (seconds - joinSeconds) : 0)
    }

    /// Runs `body` over `count` items split into one slice per core, and joins the slices' results in order.
    static func concurrently<T: Sendable>(_ count: Int, _ body: @Sendable (Range<Int>) -> [T]) -> [T] {
        let slices = max(1, min(ProcessInfo.processInfo.activeProcessorCount, count / 1000))
        guard slices > 1 else { return body(0..<count) }
        let results = Mutex<[Int: [T]]>([:])
        DispatchQueue.concurrentPerform(iterations: slices) { slice in
            let range = (count * slice / slices)..<(count * (slice + 1) / slices)
            let part = body(range)
            results.withLock { $0[slice] = part }
        }
        return results.withLock { all in (0..<slices).flatMap { all[$0] ?? [] } }
    }

    private struct HorizonKey: Hashable { var key: String; var topic: String }

    private func loadHorizons(_ db: PGConnection, keys: [String], topics: [String]) throws -> [HorizonKey: [Int64]] {
        guard !keys.isEmpty else { return [:] }
        var result: [HorizonKey: [Int64]] = [:]
        for horizon in try ReplayStore(db).horizons(of: keys, topics: topics) {
            result[HorizonKey(key: horizon.subscriptionKey, topic: horizon.topic)] = horizon.partitionHighs
        }
        return result
    }

    /// Publishes the corrected derivation (acknowledged by the broker before the caller commits) and
    /// records, per corrected subscription and topic, the partitions' high watermarks before it.
    private func republish(_ topics: [(topic: String, records: [(key: String, value: [UInt8])])], corrected: [String],
                           stage: ReplayStage, codeVersion: String, reader: TopicRangeReader, db: PGConnection) throws {
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        let failures = Mutex<[String]>([])
        var horizons: [ReplayStore.Horizon] = []
        for (topic, records) in topics {
            var highs: [Int64] = []
            for partition in 0..<(try reader.partitionCount(topic: topic)) { highs.append(try reader.watermarks(topic: topic, partition: partition).high) }
            horizons += corrected.map { ReplayStore.Horizon(subscriptionKey: $0, topic: topic, partitionHighs: highs) }
            for record in records {
                producer.send(topic: topic, key: Array(record.key.utf8), value: record.value,
                              headers: [KafkaHeader(name: RecordHeader.provenance, value: Array("replay".utf8))]) { result in
                    if case .failure(let error) = result { failures.withLock { $0.append(String(describing: error)) } }
                }
            }
        }
        try producer.flush(timeout: .seconds(120))
        if let failure = failures.withLock({ $0.first }) { throw ReplayRefused("republishing the corrected records failed: \(failure); rolled back") }
        try ReplayStore(db).save(horizons, stage: stage.rawValue, codeVersion: codeVersion)

    }

    /// classify over one unique-event record, as the classify stage does it (invalid ones it dead-letters).
    private func classified(_ bytes: [UInt8]) throws -> [MembershipCommand] {
        guard let unique = try? TopicRecords.decodeUniqueEvent(bytes), EventBounds.check(unique) == nil else { return [] }
        return wrongRules.applyToClassified(classify(unique, catalog: catalog))
    }
}

extension ReplayEngine {
    /// One subscription's raw inputs may sit in several raw partitions: merged by arrival time, each
    /// partition in its offset order whatever its producers' clocks said (ingest hosts' clocks differ:
    /// a later record stamped earlier would otherwise be folded first, and the earlier one's facts
    /// then dropped as older news). Equal times keep partition, offset, then decode's own order.
    static func arrivalOrder(_ records: [KafkaRecord]) -> [KafkaRecord] {
        var effective = [Int64](repeating: 0, count: records.count)
        var latest: [PartitionID: Int64] = [:]
        let inPartitionOrder = records.indices.sorted {
            (records[$0].topic, records[$0].partition, records[$0].offset, $0) < (records[$1].topic, records[$1].partition, records[$1].offset, $1)
        }
        for index in inPartitionOrder {
            let partition = records[index].partitionID
            let time = max(records[index].timestamp, latest[partition] ?? .min)
            latest[partition] = time
            effective[index] = time
        }
        return records.indices.sorted {
            (effective[$0], records[$0].partition, records[$0].offset, $0) < (effective[$1], records[$1].partition, records[$1].offset, $1)
        }.map { records[$0] }
    }
}
