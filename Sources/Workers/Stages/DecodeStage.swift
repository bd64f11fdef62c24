import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Decode: raw notification/receipt bytes → verified, normalized `AppleEvent`s keyed by subscription.
public struct DecodeStage: StageLogic {
    public let name = "decode"
    public let inputTopics = [Topic.notificationsRaw, Topic.receiptsRaw]
    public let usesDatabase = false
    let decoder: AppleInputDecoder

    public init(decoder: AppleInputDecoder) { self.decoder = decoder }

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        var result = StageBatchResult()
        let encoder = JSONEncoder.pipeline
        for record in records {
            let receivedAt = record.header(RecordHeader.receivedAt).flatMap { Int64($0) } ?? record.timestamp
            let input = RawInput(
                source: record.topic == Topic.receiptsRaw ? .appReceipt : .appStoreNotification,
                body: record.value, receivedAtMs: receivedAt, position: record.position)
            switch decoder.decode(input) {
            case .success(let events):
                for event in events {
                    result.outputs.append(OutputRecord(topic: Topic.decoded, key: event.subscriptionKey,
                                                       value: try encoder.encode(event).bytes))
                }
                Metrics.shared.increment("storeledger_decode_total", ["outcome": "decoded"])
            case .failure(let failure):
                result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                Metrics.shared.increment("storeledger_decode_total", ["outcome": failure.kind])
            }
        }
        return result
    }
}
