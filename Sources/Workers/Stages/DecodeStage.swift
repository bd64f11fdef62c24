import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Decode: raw notification/receipt bytes → verified, normalized `AppleEvent`s keyed by subscription.
/// Permanent failures (bad signature, wrong app, undecodable bytes) are dead-lettered with the
/// original bytes and the exact reason; retryable ones (verifyReceipt 21005, Apple unreachable)
/// fail the batch: the consumer loop isolates the record and retries it with backoff (then `retry_exhausted`).
/// Every record counts once in `storeledger_decode_total{source, outcome}`.
public struct DecodeStage: StageLogic {
    public let name = "decode"
    public let inputTopics = [Topic.notificationsRaw, Topic.receiptsRaw]
    public let usesDatabase = false
    let decoder: AppleInputDecoder

    public init(decoder: AppleInputDecoder) { self.decoder = decoder }

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        var result = StageBatchResult()
        for record in records {
            let receivedAt = record.header(RecordHeader.receivedAt).flatMap { Int64($0) } ?? record.timestamp
            let source = Self.source(of: record)
            let provenance = record.header(RecordHeader.provenance)
            let input = RawInput(source: source, body: record.value, receivedAtMs: receivedAt, position: record.position,
                                 v1SecretVerifiedAtEdge: record.header(RecordHeader.v1SecretVerified) == "true")
            switch decoder.decode(input) {
            case .success(var events):
                if let provenance { for index in events.indices { events[index].provenance = provenance } }
                // Every id, date and number against docs/limits.md before anything reaches a key or a table.
                if let failure = events.lazy.compactMap(EventBounds.check).first {
                    result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                    count(source, failure.kind)
                    continue
                }
                for event in events {
                    result.outputs.append(OutputRecord(topic: Topic.decoded, key: event.subscriptionKey,
                                                       value: TopicRecords.encode(event)))
                }
                count(source, events.isEmpty ? "decoded_empty" : "decoded")
            case .failure(.permanent(let failure)):
                result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                count(source, failure.kind)
            case .failure(.retryable(let reason)):
                count(source, "retryable")
                throw DecodeRetry(position: record.position, reason: reason)
            }
        }
        return result
    }

    /// Receipts by topic; on the notification topic, refresh records by the source header StoreLedger's own producer sets.
    static func source(of record: KafkaRecord) -> RawSource {
        if record.topic == Topic.receiptsRaw { return .appReceipt }
        return record.header(RecordHeader.source) == RawSource.appStoreServerAPI.rawValue ? .appStoreServerAPI : .appStoreNotification
    }

    private func count(_ source: RawSource, _ outcome: String) {
        Metrics.shared.increment("storeledger_decode_total", ["source": source.rawValue, "outcome": outcome])
    }
}

/// A record that may decode later (Apple's verifyReceipt is down): retried by the consumer loop.
public struct DecodeRetry: Error, CustomStringConvertible {
    public let position: RecordPosition
    public let reason: String
    public var description: String { "retryable decode failure at \(position.description): \(reason)" }
}
