import Domain
import Foundation
import Kafka
import LocalStack
import Postgres
import Runtime
import Stages
import Store

/// `storeledger bench replay`: the replay rate through membership (issue 13, BENCHMARKS.md). The
/// commands topic is filled with `--events` membership commands (default 100,000; --quick 10,000)
/// over events/6 subscriptions, each linked to a user and holding SUBSCRIBED, three renewals and a
/// refund in the last period; membership's writer applies them (batches of 500, as the stage) and
/// the membership group is committed at the end of the topic. Then `replay --stage membership --from
/// earliest` runs over it twice: a replay of unchanged code (every command read, folded from scratch,
/// compared, nothing to write), and a dry run. Embedded broker and PostgreSQL.
public enum ReplayBench {
    public static func run(_ arguments: Arguments) throws -> Int32 {
        let events = arguments.has("quick") ? 10_000 : try arguments.int("events", default: 100_000)
        guard events >= 6 else { throw UsageError("--events must be at least 6") }
        let subscriptions = events / 6
        let logger = Logger(component: "bench.replay")
        let stack = try LocalStack.start(.benchmark(partitions: 32))
        defer { stack.stop() }
        let postgres = stack.postgres!
        let db = try PGConnection(url: postgres.url)
        defer { db.close() }
        var kafka = KafkaConfig(bootstrapServers: stack.bootstrap, clientId: "bench-replay")
        kafka.sessionTimeout = .seconds(4)
        kafka.heartbeatInterval = .milliseconds(400)
        kafka.fetchMaxWait = .milliseconds(10)

        // Fill: the commands topic, and membership's state from the same commands.
        let producer = try KafkaProducer(config: kafka)
        var batch: [MembershipCommand] = []
        let writer = MembershipWriter(db)
        let fillStarted = ContinuousClock.now
        for index in 0..<subscriptions {
            for command in FoldBench.commands(subscription: index, renewals: 3, prefix: "bench") {
                let bytes = TopicRecords.encode(command)
                producer.send(topic: Topic.commands, key: Array(command.subscriptionKey.utf8), value: bytes) { _ in }
                batch.append(command)
            }
            if batch.count >= 500 || index == subscriptions - 1 {
                try db.transaction { _ in _ = try writer.apply(batch) }
                batch.removeAll(keepingCapacity: true)
            }
        }
        try producer.flush(timeout: .seconds(60))
        producer.close()
        // The stage is caught up: commit the membership group at the end of every partition.
        let group = try ConsumerGroupHold.join(config: kafka, groups: [(ReplayStage.membership.groupId, [Topic.commands], 32)],
                                               timeout: .seconds(30))
        let reader = try TopicRangeReader(config: kafka)
        var ends: [PartitionID: Int64] = [:]
        for partition in 0..<Int32(32) { ends[PartitionID(topic: Topic.commands, partition: partition)] = try reader.watermarks(topic: Topic.commands, partition: partition).high }
        try group[0].hold.consumer.commit(offsets: ends)
        group[0].hold.close()
        let fill = PipelineBench.seconds(ContinuousClock.now - fillStarted)
        let ledger = try InspectionQueries(db).ledgerCount()
        logger.info("prefilled", ["events": .of(subscriptions * 6), "ledger": .of(ledger)])

        let engine = ReplayEngine(kafka: kafka, databaseURL: postgres.url, catalog: Catalog(), decoder: nil)
        var results: [(String, ReplayReport, [String: Double])] = []
        for (label, dry) in [("replay", false), ("dry run", true)] {
            // When each phase ended (its last progress report), for the breakdown.
            var phases: [String: Double] = [:]
            let cpuBefore = CPUTime.processSeconds()
            let report = try engine.run(ReplayRequest(stage: .membership, from: .earliest, dryRun: dry)) { progress in
                phases[progress.phase] = progress.elapsedSeconds
            }
            phases["cpu"] = CPUTime.processSeconds() - cpuBefore
            results.append((label, report, phases))
        }
        let ledgerAfter = try InspectionQueries(db).ledgerCount()
        var text = "bench replay: \(subscriptions * 6) commands over \(subscriptions) subscriptions (fill + apply \(String(format: "%.1f", fill)) s)\n"
        for (label, report, phases) in results {
            text += "  \(label): \(report.recordsRead) records in \(String(format: "%.2f", report.seconds - report.joinSeconds)) s "
                + "after \(String(format: "%.1f", report.joinSeconds)) s of group joins = \(Int(report.recordsPerSecond)) records/s "
                + "through membership (goal >= 10,000); entries planned \(report.diff.entries)\n"
            let read = (phases["reading"] ?? 0) - report.joinSeconds, decode = (phases["replaying"] ?? 0) - (phases["reading"] ?? 0)
            text += "    read \(String(format: "%.2f", read)) s, decode commands \(String(format: "%.2f", decode)) s, "
                + "fold + compare + plan \(String(format: "%.2f", report.seconds - (phases["replaying"] ?? 0))) s; "
                + "CPU \(String(format: "%.2f", phases["cpu"] ?? 0)) s (this process, embedded broker included) = "
                + "\(Int(Double(report.recordsRead) / max(phases["cpu"] ?? 1, 0.001))) records per CPU-second\n"
        }
        text += "  ledger entries before/after: \(ledger)/\(ledgerAfter)\n"
        FileHandle.standardOutput.write(Data(text.utf8))
        return ledgerAfter == ledger ? 0 : 1
    }
}
