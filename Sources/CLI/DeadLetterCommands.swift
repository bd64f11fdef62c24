import Domain
import Foundation
import Kafka
import Runtime

/// `storeledger dlq list|show|redrive`: the dead-letter topic for operators. Reads each partition up
/// to where it ended when the command started, without joining a group (it commits nothing, so it
/// never disturbs anyone), selects by stage, kind and time as it reads, and re-drives originals to
/// their source topic after a fix. A partition that stops answering fails the command: it never
/// reports a part of the topic as the whole.
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
            try Self.forEachSelected(kafka, filter) { id, letter in print(Self.summaryLine(id, letter)) }
        case "show":
            guard ids.count == 1 else { throw UsageError("show takes exactly one id (partition@offset)") }
            guard let letter = try Self.deadLetter(at: ids[0], kafka) else {
                FileHandle.standardError.write(Data("storeledger dlq: no dead letter \(ids[0])\n".utf8))
                return 1
            }
            print(Self.detail(ids[0], letter))
        case "redrive":
            let producer = try KafkaProducer(config: kafka)
            defer { producer.close() }
            var redriven = 0
            func redrive(_ id: String, _ letter: DeadLetterRecord) throws {
                let record = letter.redrive(from: "\(Topic.deadLetter)/\(id)")
                let report = try producer.sendAndWait(topic: record.topic, key: record.key, value: record.value,
                                                      headers: record.headers, timeout: .seconds(10))
                print(Self.json(["id": id, "redriven_to": "\(report.topic)/\(report.partition)@\(report.offset)"]))
                redriven += 1
            }
            var missing: [String] = []
            if !ids.isEmpty {
                for id in ids {
                    guard let letter = try Self.deadLetter(at: id, kafka) else { missing.append(id); continue }
                    try redrive(id, letter)
                }
            } else {
                try Self.forEachSelected(kafka, filter, redrive)
            }
            Logger(component: "dlq").info("dlq_redriven", ["count": .of(redriven)])
            if !missing.isEmpty {
                FileHandle.standardError.write(Data("storeledger dlq: no dead letter \(missing.joined(separator: ", "))\n".utf8))
                return 1
            }
        default:
            throw UsageError("unknown action \(action): list, show or redrive")
        }
        return 0
    }

    /// Hands every dead letter to `body`, partition by partition in offset order, each partition read
    /// up to its end when the read began (letters arriving meanwhile wait for the next command).
    static func forEachDeadLetter(_ kafka: KafkaConfig, _ body: (String, DeadLetterRecord) throws -> Void) throws {
        let reader = try TopicRangeReader(config: kafka, timeout: .seconds(30))
        for partition in 0..<(try reader.partitionCount(topic: Topic.deadLetter)) {
            let (low, high) = try reader.watermarks(topic: Topic.deadLetter, partition: partition)
            try reader.read(topic: Topic.deadLetter, partition: partition, from: low, to: high) { records in
                for record in records {
                    if let letter = DeadLetterRecord(record) { try body("\(partition)@\(record.offset)", letter) }
                }
                return true
            }
        }
    }

    /// Hands the letters `filter` selects to `body` in topic order per partition as they are read,
    /// or, with a limit, the `limit` latest by last failure once the whole topic is read.
    static func forEachSelected(_ kafka: KafkaConfig, _ filter: DeadLetterFilter,
                                _ body: (String, DeadLetterRecord) throws -> Void) throws {
        guard filter.limit != nil else {
            return try forEachDeadLetter(kafka) { id, letter in if filter.matches(letter) { try body(id, letter) } }
        }
        var selection = DeadLetterSelection<String>(filter)
        try forEachDeadLetter(kafka) { id, letter in selection.offer(id, letter) }
        for (id, letter) in selection.kept { try body(id, letter) }
    }

    /// The dead letter at `partition@offset`, read alone; nil when there is none.
    static func deadLetter(at id: String, _ kafka: KafkaConfig) throws -> DeadLetterRecord? {
        let parts = id.split(separator: "@")
        guard parts.count == 2, let partition = Int32(parts[0]), let offset = Int64(parts[1]) else {
            throw UsageError("\(id): a dead letter id is partition@offset")
        }
        let reader = try TopicRangeReader(config: kafka, timeout: .seconds(30))
        guard (0..<(try reader.partitionCount(topic: Topic.deadLetter))).contains(partition) else { return nil }
        let (low, high) = try reader.watermarks(topic: Topic.deadLetter, partition: partition)
        guard (low..<high).contains(offset) else { return nil }
        var found: DeadLetterRecord?
        try reader.read(topic: Topic.deadLetter, partition: partition, from: offset, to: offset + 1) { records in
            found = records.first { $0.offset == offset }.flatMap(DeadLetterRecord.init)
            return false
        }
        return found
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
