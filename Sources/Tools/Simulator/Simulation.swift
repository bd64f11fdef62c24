import Foundation
import Synchronization

/// The result of driving a population (or scenarios) through StoreLedger and checking it.
public struct SimulationReport: Sendable {
    public var users = 0
    public var deliveries = 0
    public var generationSeconds = 0.0
    public var sendSeconds = 0.0
    public var settleSeconds = 0.0
    public var driver = DriverStats()
    public var latency = LagProbe.Report(samples: [], timeouts: 0, pausedSeconds: 0)
    public var checked = 0
    public var mismatches: [Mismatch] = []
    public var mismatchedUsers: Set<String> { Set(mismatches.map(\.userId)) }
}

/// A random population run: users are generated in cohorts (each user's whole simulated year at
/// once, then merged into the shared store), their deliveries are posted by the driver while
/// the next cohort is generated, and at the end the oracle is compared with the membership API.
public final class PopulationSimulation: Sendable {
    public let store: AppStore
    public let emitter: WireEmitter
    public let population: PopulationConfig
    public let driverConfig: DriverConfig
    public let cohortSize: Int
    public let maxLag: TimeInterval
    /// The environments the oracle counts; nil: those the store's catalog grants (R18).
    public let environments: Set<SimEnvironment>?
    private let userIds = Mutex<[String]>([])

    public init(pki: SimulatorPKI, store: AppStore, population: PopulationConfig, driver: DriverConfig,
                cohortSize: Int = 250, maxLag: TimeInterval = 8, environments: Set<SimEnvironment>? = nil) {
        self.store = store
        self.emitter = WireEmitter(pki: pki, config: store.config)
        self.population = population
        self.driverConfig = driver
        self.cohortSize = max(1, cohortSize)
        self.maxLag = maxLag
        self.environments = environments
    }

    public var users: [String] { userIds.withLock { $0 } }

    /// Generates and sends the population, waits for the pipeline to catch up; with `check`,
    /// compares every user until the answers stop changing (or `settleTimeout` passes).
    /// - Parameter duration: stop generating new users after this long (load mode); nil plays all.
    public func run(check: Bool, settleTimeout: TimeInterval = 120, duration: TimeInterval? = nil,
                    progress: @escaping @Sendable (String) -> Void = { _ in }) throws -> (SimulationReport, Driver) {
        var report = SimulationReport()
        let driver = Driver(config: driverConfig)
        try driver.start()
        defer { driver.stop() }
        let probe = LagProbe(ingestURL: driverConfig.ingestURL, emitter: emitter, driver: driver, maxLag: maxLag)
        probe.start()
        let started = Date()
        var generation = 0.0
        var index = 0
        while index < population.users, duration.map({ Date().timeIntervalSince(started) < $0 }) ?? true {
            let upper = min(population.users, index + cohortSize)
            let cohortStart = Date()
            var deliveries: [Delivery] = []
            var ids: [String] = []
            for userIndex in index..<upper {
                var player = JourneyPlayer(config: population, emitter: emitter, userIndex: userIndex)
                let (truth, sent) = try player.play()
                store.mutate { $0.absorb(truth) }
                deliveries += sent
                ids += player.accounts
            }
            userIds.withLock { $0 += ids }
            // Within a cohort the users' years interleave in simulated time.
            deliveries.sort { $0.simMs < $1.simMs }
            generation += Date().timeIntervalSince(cohortStart)
            report.deliveries += deliveries.count
            driver.submit(deliveries)
            index = upper
            progress("generated \(upper)\(duration == nil ? "/\(population.users)" : "") users, \(report.deliveries) deliveries; \(driver.snapshot.accepted) accepted, \(driver.pending) pending; \(probe.snapshot)")
        }
        driver.drain()
        report.sendSeconds = Date().timeIntervalSince(started)
        report.generationSeconds = generation
        probe.stop()
        let settleStart = Date()
        _ = probe.waitForCatchUp()
        report.latency = probe.snapshot
        report.driver = driver.snapshot
        report.users = index
        if check {
            report.mismatches = settle(users: users, timeout: settleTimeout, progress: progress)
            report.checked = users.count
        }
        report.settleSeconds = Date().timeIntervalSince(settleStart)
        return (report, driver)
    }

    /// Checks everyone once, then re-checks the mismatched users until none is left or the set
    /// has not changed for 10 s (the pipeline is done; what remains is a real difference).
    public func settle(users: [String], timeout: TimeInterval, progress: @escaping @Sendable (String) -> Void = { _ in }) -> [Mismatch] {
        let checker = MembershipChecker(ingestURL: driverConfig.ingestURL)
        let expectations = store.read { state in users.compactMap { state.users[$0] }.map { Oracle.expectation(for: $0, in: state, environments: environments) } }
        var mismatches = checker.check(expectations)
        progress("checked \(expectations.count) users: \(Set(mismatches.map(\.userId)).count) mismatched")
        let deadline = Date().addingTimeInterval(timeout)
        var lastChange = Date()
        var previous = mismatches.map(\.description)
        while !mismatches.isEmpty, Date() < deadline, Date().timeIntervalSince(lastChange) < 10 {
            Thread.sleep(forTimeInterval: 1)
            let again = Set(mismatches.map(\.userId))
            mismatches = checker.check(expectations.filter { again.contains($0.userId) })
            let now = mismatches.map(\.description)
            if now != previous {
                lastChange = Date()
                previous = now
                progress("re-checked: \(Set(mismatches.map(\.userId)).count) users still mismatched")
            }
        }
        return mismatches
    }

    /// The text printed for one mismatched user: the differences, the journey, what was sent.
    public func explain(_ userId: String, mismatches: [Mismatch], driver: Driver?) -> String {
        var lines = ["── user \(userId)"]
        lines += mismatches.filter { $0.userId == userId }.map { "  " + $0.description }
        lines.append("  journey:")
        // Each line starts with its simulated time; some facts are decided ahead (a refund scheduled at purchase).
        lines += store.read { $0.users[userId]?.journey ?? [] }.sorted().map { "    " + $0 }
        if let driver {
            let sent = driver.sent(to: userId)
            if !sent.isEmpty {
                lines.append("  deliveries (simulated time, what, ingest answer):")
                lines += sent.sorted().map { "    " + $0 }
            }
        }
        return lines.joined(separator: "\n")
    }
}
