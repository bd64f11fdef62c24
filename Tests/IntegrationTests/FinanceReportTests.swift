import Domain
import Foundation
import Simulator
import XCTest

/// Contract (issue 17): after a seeded simulated population went through the real pipeline,
/// `storeledger report reconcile` and `storeledger report metrics` agree with the simulator's ground
/// truth (what the App Store recorded) per UTC day, environment and product: purchases, renewals,
/// free trials, intro prices, promotional offers by id, offer codes, refunds with the time they cut;
/// new subscriptions, active subscriptions and trials at the end of each day, trial conversions.
final class FinanceReportTests: XCTestCase {
    func testReconciliationAndMetricsEqualTheSimulatorsGroundTruth() throws {
        let sim = try SimulationCluster()
        defer { sim.stop() }
        var population = PopulationConfig()
        population.users = Int(ProcessInfo.processInfo.environment["STORELEDGER_SIM_USERS"] ?? "") ?? 60
        population.seed = 2017
        var driver = DriverConfig(ingestURL: sim.ingestURL)
        driver.connections = 4
        let run = PopulationSimulation(pki: sim.setup.pki, store: sim.store, population: population, driver: driver, cohortSize: 30)
        let (report, _) = try run.run(check: true, settleTimeout: 60) { print("[finance] \($0)") }
        XCTAssertEqual(report.mismatchedUsers.count, 0, "membership itself differs from the oracle")

        let from = utcDay(population.startMs)
        // The journeys run `days` days from the start; late renewals and refunds fall in the margin.
        let to = utcDay(population.startMs + Int64(population.days + 60) * 86_400_000)
        let decoder = JSONDecoder()
        let reconciled = try storeledger(["report", "reconcile", "--from", from, "--to", to, "--format", "json",
                                          "--database-url", sim.cluster.databaseURL])
            .split(separator: "\n").map { try decoder.decode(ReconcileRow.self, from: Data($0.utf8)) }
        let metrics = try storeledger(["report", "metrics", "--from", from, "--to", to, "--format", "json",
                                       "--database-url", sim.cluster.databaseURL])
            .split(separator: "\n").map { try decoder.decode(MetricsRow.self, from: Data($0.utf8)) }
        let csv = try storeledger(["report", "reconcile", "--from", from, "--to", to, "--database-url", sim.cluster.databaseURL])
        XCTAssertEqual(csv.split(separator: "\n").first.map(String.init), ReconcileRow.csvHeader)
        XCTAssertEqual(csv.split(separator: "\n").count, reconciled.count + 1)

        let truth = sim.store.read { state in Array(state.subscriptions.values) }
        var expected: [String: Counts] = [:]
        var expectedMetrics: [String: MetricCounts] = [:]
        let dayMs: Int64 = 86_400_000
        for subscription in truth {
            for (index, t) in subscription.transactions.enumerated() {
                let key = "\(utcDay(t.purchaseMs))|\(t.environment.rawValue)|\(t.productId)"
                expected[key, default: Counts()].add(t)
                if let cut = t.cancellationMs, !t.isUpgraded {
                    let refundKey = "\(utcDay(cut))|\(t.environment.rawValue)|\(t.productId)"
                    expected[refundKey, default: Counts()].refunds += 1
                    if let end = t.paidEndMs { expected[refundKey, default: Counts()].timeCutMs += max(0, end - max(cut, t.purchaseMs)) }
                }
                guard t.kind == .autoRenewable else { continue }
                if index == 0 { expectedMetrics[key, default: MetricCounts()].newSubscriptions += 1 }
                if t.offer == .freeTrial, let end = t.expiresMs {
                    let trialKey = "\(utcDay(end))|\(t.environment.rawValue)|\(t.productId)"
                    expectedMetrics[trialKey, default: MetricCounts()].trialsEnded += 1
                    if subscription.transactions[(index + 1)...].contains(where: \.isRenewal) {
                        expectedMetrics[trialKey, default: MetricCounts()].trialsConverted += 1
                    }
                }
                // Entitled [purchase second, min(period end, cut)): active at each day's last millisecond it covers.
                let start = t.purchaseMs / 1000 * 1000
                guard let paidEnd = t.expiresMs else { continue }
                let end = min(paidEnd, t.cancellationMs ?? .max)
                var dayStart = start / dayMs * dayMs
                while dayStart < end {
                    let last = dayStart + dayMs - 1
                    if last >= start, last < end {
                        let activeKey = "\(utcDay(dayStart))|\(t.environment.rawValue)|\(t.productId)"
                        expectedMetrics[activeKey, default: MetricCounts()].active += 1
                        if t.offer == .freeTrial { expectedMetrics[activeKey, default: MetricCounts()].trials += 1 }
                    }
                    dayStart += dayMs
                }
            }
        }

        var actual: [String: Counts] = [:]
        for row in reconciled {
            let key = "\(row.day)|\(row.environment)|\(row.productId)"
            actual[key, default: Counts()].merge(row)
            if let currency = row.currency {
                // The simulated App Store prices every V2 transaction at 9.990 USD.
                XCTAssertEqual(currency, "USD")
                XCTAssertEqual(row.grossMilli, 9_990 * Int64(row.purchases + row.renewals), "\(key)")
            }
        }
        let keys = Set(expected.keys).union(actual.keys).filter { $0 >= from && $0 <= to + "~" }.sorted()
        let differing = keys.filter { !(expected[$0] ?? Counts()).matches(actual[$0] ?? Counts()) }
        for key in differing.prefix(15) {
            print("[finance] \(key): truth \(expected[key] ?? Counts()) report \(actual[key] ?? Counts())")
        }
        XCTAssertEqual(differing.count, 0, "\(differing.count) of \(keys.count) day/product rows differ")
        let totals = expected.values.reduce(into: Counts()) { $0.merge($1) }
        print("[finance] truth totals: \(totals)")
        XCTAssertGreaterThan(totals.renewals, 0)
        XCTAssertGreaterThan(totals.refunds, 0)
        XCTAssertTrue(reconciled.contains { $0.environment == "Sandbox" } || !truth.contains { $0.environment == .sandbox },
                      "sandbox rows are reported apart")

        var actualMetrics: [String: MetricCounts] = [:]
        for row in metrics {
            let key = "\(row.day)|\(row.environment)|\(row.productId)"
            actualMetrics[key] = MetricCounts(newSubscriptions: row.newSubscriptions, active: row.activeSubscriptions, trials: row.activeTrials,
                                              trialsEnded: row.trialsEnded, trialsConverted: row.trialsConverted)
        }
        let metricKeys = Set(expectedMetrics.keys).union(actualMetrics.keys).filter { $0 >= from && $0 <= to + "~" }.sorted()
        let differingMetrics = metricKeys.filter { (expectedMetrics[$0] ?? MetricCounts()) != (actualMetrics[$0] ?? MetricCounts()) }
        for key in differingMetrics.prefix(15) {
            print("[finance] metrics \(key): truth \(expectedMetrics[key] ?? MetricCounts()) report \(actualMetrics[key] ?? MetricCounts())")
        }
        XCTAssertEqual(differingMetrics.count, 0, "\(differingMetrics.count) of \(metricKeys.count) metric rows differ")
        XCTAssertGreaterThan(metrics.map(\.activeSubscriptions).reduce(0, +), 0)
        XCTAssertTrue(metrics.contains { !$0.mrrMilli.isEmpty }, "MRR from Apple's prices")
    }

    struct Counts: Equatable, CustomStringConvertible {
        var purchases = 0, renewals = 0, trials = 0, intro = 0, refunds = 0
        var timeCutMs: Int64 = 0
        var promotional: [String: Int] = [:]
        var codes: [String: Int] = [:]

        mutating func add(_ t: SimTransaction) {
            if t.isRenewal { renewals += 1 } else { purchases += 1 }
            switch t.offer {
            case .none: break
            case .freeTrial: trials += 1
            case .introPrice: intro += 1
            case .promotional(let id): promotional[id, default: 0] += 1
            case .offerCode(let name): codes[name, default: 0] += 1
            }
        }

        mutating func merge(_ row: ReconcileRow) {
            purchases += row.purchases
            renewals += row.renewals
            trials += row.freeTrials
            intro += row.introPayAsYouGo + row.introPayUpFront + row.introOther
            refunds += row.refunds + row.revocations
            timeCutMs += row.refundTimeCutMs + row.revocationTimeCutMs
            promotional.merge(row.promotionalOffers, uniquingKeysWith: +)
            codes.merge(row.offerCodes, uniquingKeysWith: +)
        }

        mutating func merge(_ other: Counts) {
            purchases += other.purchases; renewals += other.renewals; trials += other.trials; intro += other.intro
            refunds += other.refunds; timeCutMs += other.timeCutMs
            promotional.merge(other.promotional, uniquingKeysWith: +)
            codes.merge(other.codes, uniquingKeysWith: +)
        }

        /// Equal counts; the time cut within a second per refund (StoreLedger keeps the purchase second, R1).
        func matches(_ other: Counts) -> Bool {
            var a = self, b = other
            a.timeCutMs = 0
            b.timeCutMs = 0
            return a == b && abs(timeCutMs - other.timeCutMs) <= Int64(max(refunds, 1)) * 1000
        }

        var description: String {
            "purchases \(purchases) renewals \(renewals) trials \(trials) intro \(intro) promo \(promotional) codes \(codes) refunds \(refunds) cut \(timeCutMs) ms"
        }
    }

    struct MetricCounts: Equatable {
        var newSubscriptions = 0, active = 0, trials = 0, trialsEnded = 0, trialsConverted = 0
    }

    private func storeledger(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Cluster.binary())
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        while process.isRunning { usleep(10_000) }
        XCTAssertEqual(process.terminationStatus, 0, "storeledger \(arguments.joined(separator: " "))")
        return String(decoding: data, as: UTF8.self)
    }
}
