import Domain
import Foundation
import Kafka
import Postgres
import Runtime

/// Classify: what is new about a subscription → membership commands (R3, R5). Stateless.
public struct ClassifyStage: StageLogic {
    public let name = "classify"
    public let inputTopics = [Topic.unique]
    public let usesDatabase = false
    let catalog: Catalog
    /// Empty except in replay tests (`Setting.testWrongRule`).
    let wrongRules: WrongRules

    public init(catalog: Catalog, wrongRules: WrongRules = .none) {
        self.catalog = catalog
        self.wrongRules = wrongRules
    }

    public func process(_ records: [KafkaRecord], database: PGConnection?) throws -> StageBatchResult {
        var result = StageBatchResult()
        for record in records {
            let unique: UniqueEvent
            do {
                unique = try TopicRecords.decodeUniqueEvent(record.value)
            } catch {
                result.deadLetters.append(DeadLetter(stage: name, record: record,
                                                     failure: PermanentFailure("invalid_event", "not a UniqueEvent: \(error)")))
                continue
            }
            if let failure = EventBounds.check(unique) {
                result.deadLetters.append(DeadLetter(stage: name, record: record, failure: failure))
                continue
            }
            // The ingest time travels with each command, for the ingest -> ledger latency at membership.
            let receivedAt = [KafkaHeader(name: RecordHeader.receivedAt, value: Array(String(unique.event.receivedAtMs).utf8))]
            for command in wrongRules.applyToClassified(classify(unique, catalog: catalog)) {
                result.outputs.append(OutputRecord(topic: Topic.commands, key: command.subscriptionKey,
                                                   value: TopicRecords.encode(command), headers: receivedAt))
            }
        }
        return result
    }
}
