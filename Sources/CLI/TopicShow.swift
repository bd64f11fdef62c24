import Domain
import Foundation
import Kafka
import Runtime

/// `storeledger topics show`: records of a topic as JSON lines, whatever their encoding. The stages'
/// records are binary (`TopicRecords`); this is the readable way to look at them.
enum TopicShow {
    static let usage = "show <topic> [--partition P] [--offset O] [--count N] [--bootstrap B]"

    /// The stages' topics only: raw inputs have the support page's redacting view
    /// (`/support/raw/...`), dead letters `storeledger dlq show`.
    static let shownTopics = [Topic.decoded, Topic.unique, Topic.commands]

    static func run(_ arguments: Arguments, topic: String) throws -> Int32 {
        guard shownTopics.contains(topic) else { throw UsageError("show reads \(shownTopics.joined(separator: ", "))") }
        let count = try arguments.int("count", default: 10)
        guard count >= 1 else { throw UsageError("--count must be at least 1") }
        let reader = try TopicRangeReader(config: try Environment.kafka(arguments, clientId: "storeledger-topics-show"))
        let partitions: [Int32]
        if arguments.value("partition") != nil {
            partitions = [Int32(clamping: try arguments.int("partition", default: 0))]
        } else {
            partitions = Array(0..<(try reader.partitionCount(topic: topic)))
        }
        let from = arguments.value("offset") != nil ? Int64(try arguments.int("offset", default: 0)) : nil
        for partition in partitions {
            let marks = try reader.watermarks(topic: topic, partition: partition)
            let start = max(from ?? marks.low, marks.low)
            let end = min(marks.high, start + Int64(count))
            try reader.read(topic: topic, partition: partition, from: start, to: end) { records in
                for record in records { print(line(record)) }
                return true
            }
        }
        return 0
    }

    /// One record: where it sits, its key and its value as JSON (binary records decoded).
    static func line(_ record: KafkaRecord) -> String {
        var object: [String: Any] = ["partition": record.partition, "offset": record.offset, "timestamp": record.timestamp,
                                     "bytes": record.value.count]
        if let key = record.key { object["key"] = String(decoding: key, as: UTF8.self) }
        let binary = TopicRecords.isBinary(record.value)
        if let json = TopicRecords.json(record.value),
           let value = try? JSONSerialization.jsonObject(with: Data(json), options: [.fragmentsAllowed]) {
            object["encoding"] = binary ? "binary-v\(record.value.count > 1 ? record.value[1] : 0)" : "json"
            object["value"] = value
        } else {
            object["encoding"] = binary ? "binary (does not decode)" : "bytes"
            object["valueBase64"] = Data(record.value.prefix(64 * 1024)).base64EncodedString()
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
