import Configuration
import Foundation
import Ingest
import Kafka
import Postgres
import Runtime
import Stages
import Store

/// Builds ingest's Server API admin routes (`Setting.ingestServerAPI=on`): a refresh per
/// request with its own PostgreSQL connection (requests run concurrently on the HTTP threads),
/// one token exchange with the signer and one producer for the life of the process.
enum AdminRefresh {
    static func routes(kafka: KafkaConfig, databaseURL: String?, keyId: String?) throws -> ServerAPIAdminRoutes {
        let session = try ServerAPISession(kafka: kafka, keyId: keyId)
        let producer = try KafkaProducer(config: kafka)
        let refresh: ServerAPIAdminRoutes.Answer = { transactionId in
            let database = databaseURL.flatMap { try? PGConnection(url: $0) }
            defer { database?.close() }
            let report = TransactionRefresh(client: session.client, producer: producer, database: database)
                .refresh(transactionId: transactionId, environment: nil)
            guard let error = report.error else { return (200, encoded("refresh", report)) }
            // A refusal says why at the top, as every refusal of ingest does; the report beside it.
            return (report.errorStatus ?? 502, encodedObject(RefreshFailure(error: error, refresh: report)))
        }
        guard let databaseURL else { return ServerAPIAdminRoutes(refresh: refresh) }
        let consumption: ServerAPIAdminRoutes.Answer = { userId in consumptionAnswers(userId, databaseURL) }
        return ServerAPIAdminRoutes(refresh: refresh, consumption: consumption)
    }

    static func consumptionAnswers(_ userId: String, _ databaseURL: String) -> (status: Int, json: Data) {
        do {
            let database = try PGConnection(url: databaseURL)
            defer { database.close() }
            return (200, encoded("consumptionAnswers", try ServerAPIStore.consumptionAnswers(user: userId, limit: 100, db: database)))
        } catch {
            return (503, encoded("error", "consumption answers could not be read"))
        }
    }

    struct RefreshFailure: Encodable {
        let error: String
        let refresh: RefreshReport
    }

    static func encodedObject<Value: Encodable>(_ value: Value) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(value)) ?? Data()
    }

    static func encoded<Value: Encodable>(_ key: String, _ value: Value) -> Data {
        encodedObject([key: value])
    }
}
