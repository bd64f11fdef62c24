import Domain
import Foundation
import Simulator
import XCTest

/// Contract (issue 17): after a seeded simulated population went through the real pipeline,
/// `storeledger report reconcile` and `storeledger report metrics` agree with the simulator's ground
/// truth (what the App Store recorded) per UTC day, environment and product: purchases, renewals,
/// free trials, intro prices, promotional offers by id, offer codes, refunds with the time they cut,
/// and the amounts Apple charged per currency (the simulated App Store prices each product per
/// storefront, USD and CAD, with discounted offers); new subscriptions, active subscriptions and
/// trials at the end of each day, trial conversions, MRR per currency, voluntary and billing churn,
/// refunds and charges (the refund rate). Ingest's `/v1/admin/reports/...` answers the same rows.
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
        let metricsLines = try storeledger(["report", "metrics", "--from", from, "--to", to, "--format", "json",
                                            "--database-url", sim.cluster.databaseURL]).split(separator: "\n")
        let metrics = try metricsLines.map { try decoder.decode(MetricsRow.self, from: Data($0.utf8)) }
        // Each JSON line states its rates too, as the CSV does.
        for (line, row) in zip(metricsLines, metrics) where row.charges > 0 {
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            XCTAssertEqual(try XCTUnwrap(object["refundRate"] as? Double), try XCTUnwrap(row.refundRate), accuracy: 1e-9)
        }
        // An environment in any case is Apple's; the same rows as its proper spelling.
        let environment = try XCTUnwrap(metrics.first?.environment)
        let named = try storeledger(["report", "metrics", "--from", from, "--to", to, "--format", "json", "--environment", environment,
                                     "--database-url", sim.cluster.databaseURL])
        XCTAssertEqual(try storeledger(["report", "metrics", "--from", from, "--to", to, "--format", "json",
                                        "--environment", environment.uppercased(), "--database-url", sim.cluster.databaseURL]), named)
        XCTAssertFalse(named.isEmpty)
        // A report starting later says the same of the days both cover: a resubscription is no new
        // subscription and a lapse before one is no churn, wherever the report starts.
        let laterFrom = utcDay(population.startMs + Int64(max(1, population.days / 2)) * 86_400_000)
        let later = try storeledger(["report", "metrics", "--from", laterFrom, "--to", to, "--format", "json",
                                     "--database-url", sim.cluster.databaseURL])
            .split(separator: "\n").map { try decoder.decode(MetricsRow.self, from: Data($0.utf8)) }
        XCTAssertEqual(later, metrics.filter { $0.day >= laterFrom })
        let csv = try storeledger(["report", "reconcile", "--from", from, "--to", to, "--database-url", sim.cluster.databaseURL])
        XCTAssertEqual(csv.split(separator: "\n").first.map(String.init), ReconcileRow.csvHeader)
        XCTAssertEqual(csv.split(separator: "\n").count, reconciled.count + 1)

        let truth = sim.store.read { state in Array(state.subscriptions.values) }
        var expected: [String: Counts] = [:]
        var expectedMetrics: [String: MetricCounts] = [:]
        // Amounts from the simulated App Store's own price list (not from our ledger): per day,
        // environment, product and currency, the sum of what Apple charged.
        var expectedGross: [String: Int64] = [:]
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let dayMs: Int64 = 86_400_000
        for subscription in truth {
            for (index, t) in subscription.transactions.enumerated() {
                let key = "\(utcDay(t.purchaseMs))|\(t.environment.rawValue)|\(t.productId)"
                expected[key, default: Counts()].add(t)
                expectedGross["\(key)|\(t.price.currency)", default: 0] += t.price.milli
                if let cut = t.cancellationMs, !t.isUpgraded {
                    let refundKey = "\(utcDay(cut))|\(t.environment.rawValue)|\(t.productId)"
                    expected[refundKey, default: Counts()].refunds += 1
                    if let end = t.paidEndMs { expected[refundKey, default: Counts()].timeCutMs += max(0, end - max(cut, t.purchaseMs)) }
                    if t.kind == .autoRenewable { expectedMetrics[refundKey, default: MetricCounts()].refunds += 1 }
                }
                guard t.kind == .autoRenewable else { continue }
                if t.offer != .freeTrial { expectedMetrics[key, default: MetricCounts()].charges += 1 }
                if index == 0 { expectedMetrics[key, default: MetricCounts()].newSubscriptions += 1 }
                if t.offer == .freeTrial, let end = t.expiresMs {
                    let trialKey = "\(utcDay(end))|\(t.environment.rawValue)|\(t.productId)"
                    expectedMetrics[trialKey, default: MetricCounts()].trialsEnded += 1
                    // Converted: the next period is paid and follows the trial (not a purchase after a lapse).
                    let next = subscription.transactions.indices.contains(index + 1) ? subscription.transactions[index + 1] : nil
                    if let next, next.offer != .freeTrial, next.isRenewal || next.purchaseMs <= end + 86_400_000 {
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
                        if t.offer == .freeTrial {
                            expectedMetrics[activeKey, default: MetricCounts()].trials += 1
                        } else if let days = Self.durationDays[t.productId] {
                            // MRR: the period's price brought to 30 days, in the currency Apple charged.
                            expectedMetrics[activeKey, default: MetricCounts()].mrrMilli[t.price.currency, default: 0] += t.price.milli * 30 / Int64(days)
                        }
                    }
                    dayStart += dayMs
                }
            }
            // Churn: the day the subscription's last entitlement ended, if that is past; billing when
            // Apple was still retrying the charge or gave up on it (expiration intent 2).
            guard subscription.kind == .autoRenewable else { continue }
            let ends = subscription.transactions.compactMap { t in t.expiresMs.map { (t, min($0, t.cancellationMs ?? .max)) } }
            if let (last, end) = ends.max(by: { $0.1 < $1.1 }), end <= nowMs {
                let churnKey = "\(utcDay(end))|\(last.environment.rawValue)|\(last.productId)"
                let billing: Bool = switch subscription.billing {
                case .paid: false
                case .retrying: true
                case .expired(let intent): intent == "2"
                }
                if billing { expectedMetrics[churnKey, default: MetricCounts()].churnedBilling += 1 }
                else { expectedMetrics[churnKey, default: MetricCounts()].churnedVoluntary += 1 }
            }
        }

        var actual: [String: Counts] = [:]
        var actualGross: [String: Int64] = [:]
        for row in reconciled {
            let key = "\(row.day)|\(row.environment)|\(row.productId)"
            actual[key, default: Counts()].merge(row)
            if let currency = row.currency, row.purchases + row.renewals > 0 {
                actualGross["\(key)|\(currency)", default: 0] += row.grossMilli
            }
            XCTAssertFalse(row.currency == nil && row.purchases + row.renewals > 0, "a charge without Apple's price: \(row)")
        }
        let currencies = Set(truth.flatMap { $0.transactions.map(\.price.currency) })
        let prices = Set(truth.flatMap { $0.transactions.map(\.price.milli) })
        print("[finance] truth: currencies \(currencies.sorted()), \(prices.count) distinct prices, gross \(expectedGross.values.reduce(0, +)) milli")
        XCTAssertEqual(currencies, ["USD", "CAD"], "the population pays in two currencies")
        XCTAssertGreaterThanOrEqual(prices.count, 5, "at several prices")
        let grossKeys = Set(expectedGross.keys).union(actualGross.keys).filter { $0 >= from && $0 <= to + "~" }.sorted()
        let differingGross = grossKeys.filter { expectedGross[$0] != actualGross[$0] }
        for key in differingGross.prefix(15) {
            print("[finance] gross \(key): truth \(expectedGross[key].map(String.init) ?? "-") report \(actualGross[key].map(String.init) ?? "-")")
        }
        XCTAssertEqual(differingGross.count, 0, "\(differingGross.count) of \(grossKeys.count) day/product/currency amounts differ")
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
                                              trialsEnded: row.trialsEnded, trialsConverted: row.trialsConverted, mrrMilli: row.mrrMilli,
                                              churnedVoluntary: row.churnedVoluntary, churnedBilling: row.churnedBilling,
                                              refunds: row.refunds, charges: row.charges)
        }
        let metricKeys = Set(expectedMetrics.keys).union(actualMetrics.keys).filter { $0 >= from && $0 <= to + "~" }.sorted()
        let differingMetrics = metricKeys.filter { (expectedMetrics[$0] ?? MetricCounts()) != (actualMetrics[$0] ?? MetricCounts()) }
        for key in differingMetrics.prefix(15) {
            print("[finance] metrics \(key): truth \(expectedMetrics[key] ?? MetricCounts()) report \(actualMetrics[key] ?? MetricCounts())")
        }
        XCTAssertEqual(differingMetrics.count, 0, "\(differingMetrics.count) of \(metricKeys.count) metric rows differ")
        XCTAssertGreaterThan(metrics.map(\.activeSubscriptions).reduce(0, +), 0)
        XCTAssertTrue(metrics.contains { !$0.mrrMilli.isEmpty }, "MRR from Apple's prices")
        let truthTotals = expectedMetrics.values.reduce(into: MetricCounts()) { $0.merge($1) }
        print("[finance] truth metrics totals: \(truthTotals)")
        XCTAssertEqual(Set(truthTotals.mrrMilli.keys), ["USD", "CAD"], "MRR in both currencies")
        XCTAssertGreaterThan(truthTotals.churnedVoluntary, 0)
        XCTAssertGreaterThan(truthTotals.refunds, 0)
        // The rates are the counts' quotients, per row.
        for row in metrics where row.charges > 0 {
            XCTAssertEqual(try XCTUnwrap(row.refundRate), Double(row.refunds) / Double(row.charges), accuracy: 1e-12)
        }

        // Ingest's operator route answers the same rows (plus the rates) to the admin key.
        let answer = try HTTP.get("\(sim.ingestURL)/v1/admin/reports/metrics?from=\(from)&to=\(to)",
                                  authorization: TestCredentials.bearer(TestCredentials.adminKey))
        XCTAssertEqual(answer.status, 200, answer.text)
        let served = try XCTUnwrap(answer.json?["rows"] as? [[String: Any]])
        let servedRows = try served.map { try decoder.decode(MetricsRow.self, from: JSONSerialization.data(withJSONObject: $0)) }
        XCTAssertEqual(servedRows, metrics, "the HTTP report is the CLI's")
        for (object, row) in zip(served, servedRows) {
            XCTAssertEqual(object["refundRate"] as? Double, row.refundRate)
            XCTAssertEqual(object["trialConversionRate"] as? Double, row.trialConversionRate)
        }
        let reconcileAnswer = try HTTP.get("\(sim.ingestURL)/v1/admin/reports/reconcile?from=\(from)&to=\(to)",
                                           authorization: TestCredentials.bearer(TestCredentials.adminKey))
        let servedReconcile = try XCTUnwrap(reconcileAnswer.json?["rows"] as? [[String: Any]])
            .map { try decoder.decode(ReconcileRow.self, from: JSONSerialization.data(withJSONObject: $0)) }
        XCTAssertEqual(servedReconcile, reconciled)
    }

    /// Period length per product, from the simulator's catalog (for MRR).
    static let durationDays: [String: Int] = Dictionary(uniqueKeysWithValues: SimulatorCatalog.standard.products.compactMap { product in
        product.durationDays.map { (product.id, $0) }
    })

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
        var mrrMilli: [String: Int64] = [:]
        var churnedVoluntary = 0, churnedBilling = 0, refunds = 0, charges = 0

        mutating func merge(_ other: MetricCounts) {
            newSubscriptions += other.newSubscriptions; active += other.active; trials += other.trials
            trialsEnded += other.trialsEnded; trialsConverted += other.trialsConverted
            mrrMilli.merge(other.mrrMilli, uniquingKeysWith: +)
            churnedVoluntary += other.churnedVoluntary; churnedBilling += other.churnedBilling
            refunds += other.refunds; charges += other.charges
        }
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
