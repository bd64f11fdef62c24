import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Synchronization

/// `storeledger worker recover --interval S --lookback-hours H`: the scheduled mode of
/// `recover notifications --only-failures`. Every interval it pages Apple's failed notifications of
/// the last H hours (default 168: Apple's V2 retries span 157 h) and feeds the ones the dedupe
/// stage never saw, with provenance `recovered`; each pass logs its report (`recovery_pass`) and
/// counts `storeledger_recovery_fed_total{environment}`. Readiness is false after a failed pass.
public final class RecoveryService: Service {
    public let name = "recover"
    private let client: AppStoreServerAPIClient
    private let environments: [AppStoreEnvironment]
    private let producer: KafkaProducer
    private let databaseURL: String
    private let interval: Duration
    private let lookbackMs: Int64
    private let lastProblem = Mutex<String?>(nil)
    private let logger = Logger(component: "worker.recover")

    public init(client: AppStoreServerAPIClient, environments: [AppStoreEnvironment], producer: KafkaProducer, databaseURL: String,
         interval: Duration, lookbackMs: Int64) {
        self.client = client
        self.environments = environments
        self.producer = producer
        self.databaseURL = databaseURL
        self.interval = interval
        self.lookbackMs = lookbackMs
    }

    public var problem: String? { lastProblem.withLock { $0 } }
    public var isReady: Bool { problem == nil }

    public func run(until stop: StopSignal) throws -> Int32 {
        while !stop.isStopped {
            pass(nowMs: currentTimeMs())
            _ = stop.wait(timeout: interval)
        }
        return 0
    }

    /// One window `[now - lookback, now)`; a failure is logged and retried at the next interval.
    func pass(nowMs: Int64) {
        do {
            let database = try PGConnection(url: databaseURL)
            defer { database.close() }
            let reports = try RecoveryPass.recover(client: client, environments: environments, from: nowMs - lookbackMs, to: nowMs,
                                                     onlyFailures: true, producer: producer, database: database)
            for report in reports {
                Metrics.shared.increment("storeledger_recovery_fed_total", ["environment": report.environment], by: Double(report.fed))
                logger.info("recovery_pass", ["environment": .string(report.environment), "found": .of(report.found),
                                              "already_ingested": .of(report.alreadyIngested), "fed": .of(report.fed),
                                              "failed": .of(report.failed), "truncated": .string(String(report.truncated)),
                                              "error": .string(report.error ?? "")])
            }
            let failed = reports.filter { !$0.complete }.map(\.summary)
            lastProblem.withLock { $0 = failed.isEmpty ? nil : failed.joined(separator: "; ") }
        } catch {
            logger.warning("recovery_pass_failed", ["error": .string("\(error)")])
            lastProblem.withLock { $0 = "last pass failed: \(error)" }
        }
    }
}
