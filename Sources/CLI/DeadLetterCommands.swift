import Domain
import Foundation
import Kafka
import Runtime

/// `storeledger dlq list|show|redrive`: the dead-letter topic for operators. Reads the whole topic
/// with a throwaway consumer group (it commits nothing, so it never disturbs anyone), selects by
/// stage, kind and time, and re-drives originals to their source topic after a fix.
struct DeadLetterCommand: CLICommand {
    let name = "dlq"
    let summary = "Dead letters: `list` them with provenance (JSON lines), `show` one with its original bytes, `redrive` selected ones to their source topic (re-driving twice is harmless: the stages are idempotent)."
    let usage = "list|show ID|redrive [ID...] [--stage S] [--kind K] [--since T] [--limit N] [--bootstrap B]   (ID = partition@offset on storeledger.deadletter; T = ISO 8601 or ms since 1970)"
    let optionNames: Set<String> = ["stage", "kind", "since", "limit", "bootstrap"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let action = arguments.positionals.first else { throw UsageError("name an action: list, show or redrive") }
        let ids = Array(arguments.positionals.dropFirst())
        var filter = DeadLetterFilter(stage: arguments.value("stage"), kind: arguments.value("kind"))
        if let since = arguments.value("since") { filter.sinceMs = try Self.parseTime(since) }
        if arguments.value("limit") != nil {
            let limit = try arguments.int("limit", default: 0)
            guard limit >= 1 else { throw UsageError("--limit must be at least 1") }
            filter.limit = limit
        }
        let kafka = try Environment.kafka(arguments, clientId: "storeledger-dlq")
        switch action {
        case "list":
            guard ids.isEmpty else { throw UsageError("list takes no ids") }
            for (position, letter) in filter.select(try Self.readDeadLetters(kafka)) { print(Self.summaryLine(position, letter)) }
        case "show":
            guard ids.count == 1 else { throw UsageError("show takes exactly one id (partition@offset)") }
            guard let found = try Self.readDeadLetters(kafka).first(where: { $0.0 == ids[0] }) else {
                FileHandle.standardError.write(Data("storeledger dlq: no dead letter \(ids[0])\n".utf8))
                return 1
            }
            print(Self.detail(found.0, found.1))
        case "redrive":
            let all = try Self.readDeadLetters(kafka)
            let chosen = ids.isEmpty ? filter.select(all) : all.filter { ids.contains($0.0) }
            let producer = try KafkaProducer(config: kafka)
            defer { producer.close() }
            for (position, letter) in chosen {
                let record = letter.redrive(from: "\(Topic.deadLetter)/\(position)")
                let report = try producer.sendAndWait(topic: record.topic, key: record.key, value: record.value,
                                                      headers: record.headers, timeout: .seconds(10))
                print(Self.json(["id": position, "redriven_to": "\(report.topic)/\(report.partition)@\(report.offset)"]))
            }
            Logger(component: "dlq").info("dlq_redriven", ["count": .of(chosen.count)])
        default:
            throw UsageError("unknown action \(action): list, show or redrive")
        }
        return 0
    }

    /// Every dead letter on the topic, in topic order per partition, with its `partition@offset` id.
    static func readDeadLetters(_ kafka: KafkaConfig, timeout: Duration = .seconds(30)) throws -> [(String, DeadLetterRecord)] {
        let consumer = try KafkaConsumer(config: kafka, groupId: "storeledger-dlq-\(UUID().uuidString)", topics: [Topic.deadLetter])
        defer { consumer.close() }
        var records: [KafkaRecord] = []
        let deadline = ContinuousClock.now + timeout
        var quietSince: ContinuousClock.Instant?
        // Read until the partitions are assigned and nothing more arrives for a second.
        while ContinuousClock.now < deadline {
            let batch = try consumer.poll(maxRecords: 1000, timeout: .milliseconds(200))
            records += batch
            if !batch.isEmpty || consumer.assignment.isEmpty {
                quietSince = nil
            } else if let since = quietSince {
                if ContinuousClock.now - since > .seconds(1) { break }
            } else {
                quietSince = .now
            }
        }
        return records.sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }
            .compactMap { record in DeadLetterRecord(record).map { ("\(record.partition)@\(record.offset)", $0) } }
    }

    static func summaryLine(_ id: String, _ letter: DeadLetterRecord) -> String {
        json(["id": id, "stage": letter.stage, "kind": letter.kind, "message": letter.message,
              "source": "\(letter.source)@\(letter.sourceOffset)", "attempts": letter.attempts,
              "first_failure": TimeText.iso(letter.firstFailureMs), "last_failure": TimeText.iso(letter.lastFailureMs),
              "bytes": letter.value.count])
    }

    static func detail(_ id: String, _ letter: DeadLetterRecord) -> String {
        var object: [String: Any] = [
            "id": id, "stage": letter.stage, "kind": letter.kind, "message": letter.message,
            "source": "\(letter.source)@\(letter.sourceOffset)", "attempts": letter.attempts,
            "first_failure": TimeText.iso(letter.firstFailureMs), "last_failure": TimeText.iso(letter.lastFailureMs),
            "headers": letter.headers.map { header -> [String: String] in
                String(validating: header.value, as: UTF8.self).map { ["name": header.name, "value": $0] }
                    ?? ["name": header.name, "value_base64": Data(header.value).base64EncodedString()]
            },
        ]
        if let key = letter.key { object["key"] = String(decoding: key, as: UTF8.self) }
        if let text = letter.printableValue {
            object["value"] = text
        } else {
            object["value_base64"] = Data(letter.value).base64EncodedString()
        }
        return json(object, pretty: true)
    }

    static func json(_ object: [String: Any], pretty: Bool = false) -> String {
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: options) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    static func parseTime(_ text: String) throws -> Int64 {
        if let ms = Int64(text) { return ms }
        let formatter = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate]] {
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return Int64(date.timeIntervalSince1970 * 1000) }
        }
        throw UsageError("--since \(text): not ISO 8601 (2026-12-01T10:00:00Z, 2026-12-01) or ms since 1970")
    }
}
