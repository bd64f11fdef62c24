import Auth
import Configuration
import Foundation
import Runtime
import Simulator
import Synchronization

/// `simulate` (issue 5).
let simulatorCommands: [CLICommand] = [SimulateCommand()]

/// `storeledger simulate`: the simulated App Store. It writes the PKI and catalog the workers must
/// trust (`setup`), plays the scripted scenarios S1–S15, a random population checked against the
/// independent oracle, or a load run with a latency report; `--dev` starts a whole StoreLedger
/// (`storeledger dev`) configured for it first.
struct SimulateCommand: CLICommand {
    let name = "simulate"
    let summary = "Simulated App Store: setup | scenarios [S1..S15] | population [--check] | load | verify-receipt. --dev runs it against a fresh embedded StoreLedger."
    let usage = """
        setup|scenarios|population|load|verify-receipt [S1 S5 ...]
              (--ingest URL | --dev) [--dir DIR] [--users N] [--days D] [--seed S] [--rate R] [--seconds T]
              [--connections C] [--cohort N] [--max-lag S] [--check] [--verify-receipt] [--verify-receipt-port P]
              [--v1-only | --v2-only] [--show N]

          setup           write root.pem/keys, catalog.json and workers.env into --dir (default ~/.storeledger/simulator)
                          and print the environment the decode/classify workers and ingest need
          scenarios       run docs/domain.md's scenarios (all, or the ones named), each checked against the oracle
          population      a random population (--users, default 1000, over --days, default 365); --check compares
                          every user's membership with the oracle and prints each mismatch with the user's journey
          load            mixed traffic at --rate requests/s for --seconds, with ingest → ledger latency percentiles
          verify-receipt  only serve the simulated verifyReceipt (--verify-receipt-port) until Ctrl-C
        """
    let optionNames: Set<String> = ["ingest", "dir", "users", "days", "seed", "rate", "seconds", "connections", "cohort", "max-lag",
                                    "verify-receipt-port", "show", "partitions", "run-id"]
    let flagNames: Set<String> = ["check", "dev", "verify-receipt", "v1-only", "v2-only"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let mode = arguments.positionals.first ?? "population"
        guard ["setup", "scenarios", "population", "load", "verify-receipt"].contains(mode) else {
            throw UsageError("unknown mode \(mode)")
        }
        let directory = arguments.value("dir") ?? Self.defaultDirectory
        let setup = try SimulatorSetup.prepare(directory: directory, runId: try arguments.value("run-id").map { _ in try arguments.int("run-id", default: 0) })
        if mode == "setup" {
            print("Simulator PKI, catalog and worker environment written to \(directory) (workers.env):")
            for (key, value) in setup.environment.sorted(by: { $0.key < $1.key }) { print("export \(key)=\(value)") }
            print("\nStart StoreLedger with these variables (e.g. `set -a; . \(directory)/workers.env; set +a; storeledger dev`),")
            print("then run `storeledger simulate scenarios --ingest http://127.0.0.1:8080 --dir \(directory)` with \(Setting.apiKey)")
            print("set to one of that StoreLedger's service keys (dev prints its API_KEY).")
            return 0
        }

        let store = AppStore(config: setup.config)
        var verifyReceipt: VerifyReceiptServer?
        if arguments.has("verify-receipt") || arguments.value("verify-receipt-port") != nil || mode == "verify-receipt" {
            let server = try VerifyReceiptServer(store: store, pki: setup.pki, port: try arguments.int("verify-receipt-port", default: 0))
            try server.start()
            verifyReceipt = server
            print("verifyReceipt: \(server.url)/production/verifyReceipt and \(server.url)/sandbox/verifyReceipt")
        }
        defer { verifyReceipt?.stop() }
        if mode == "verify-receipt" {
            let stop = StopSignal()
            stop.installSignalHandlers(logger: Logger(component: "simulate"))
            print("serving until Ctrl-C; point the decode worker at it with:")
            for (key, value) in SimulatorSetup.verifyReceiptEnvironment(verifyReceipt!.url) { print("export \(key)=\(value)") }
            stop.wait()
            return 0
        }

        var dev: DevStack?
        defer { dev?.stop() }
        let ingestURL: String
        if arguments.has("dev") {
            var environment = setup.environment
            if let verifyReceipt { environment.merge(SimulatorSetup.verifyReceiptEnvironment(verifyReceipt.url)) { $1 } }
            print("starting storeledger dev for the simulator (broker, PostgreSQL, ingest, the signer and the workers)...")
            fflush(nil)
            let started = try DevStack.start(.simulator(environment: environment, partitions: try arguments.int("partitions", default: 12)))
            dev = started
            ingestURL = started.ingestURL
            print("StoreLedger is up at \(ingestURL)")
        } else {
            guard let given = try Environment.read(arguments, SimulatorConfiguration.init).ingestURL else {
                throw UsageError("pass --ingest URL (a running StoreLedger started with \(directory)/workers.env; set \(Setting.apiKey) to one of its service keys) or --dev")
            }
            ingestURL = given
        }

        switch mode {
        case "scenarios":
            return runScenarios(arguments, store: store, setup: setup, ingestURL: ingestURL, verifyReceipt: verifyReceipt)
        case "load":
            return try runPopulation(arguments, store: store, setup: setup, ingestURL: ingestURL, load: true)
        default:
            return try runPopulation(arguments, store: store, setup: setup, ingestURL: ingestURL, load: false)
        }
    }

    static var defaultDirectory: String {
        ((try? Environment.read(SimulatorConfiguration.init).home) ?? NSTemporaryDirectory()) + "/.storeledger/simulator"
    }

    private func runScenarios(_ arguments: Arguments, store: AppStore, setup: SimulatorSetup, ingestURL: String,
                              verifyReceipt: VerifyReceiptServer?) -> Int32 {
        let names = Array(arguments.positionals.dropFirst())
        let scenarios = names.isEmpty ? Scenarios.all : Scenarios.named(names)
        var context = ScenarioContext(ingestURL: ingestURL, store: store, emitter: WireEmitter(pki: setup.pki, config: setup.config))
        context.verifyReceipt = verifyReceipt
        let results = ScenarioRunner(context: context).run(scenarios) { result in
            print(result.text)
            fflush(nil)
        }
        let failed = results.filter { !$0.passed }
        print("\n\(results.count - failed.count)/\(results.count) scenarios passed\(failed.isEmpty ? "" : "; failed: \(failed.map(\.id).joined(separator: " "))")")
        return failed.isEmpty ? 0 : 1
    }

    private func runPopulation(_ arguments: Arguments, store: AppStore, setup: SimulatorSetup, ingestURL: String, load: Bool) throws -> Int32 {
        var population = PopulationConfig()
        population.users = try arguments.int("users", default: load ? 10_000_000 : 1000)
        population.days = try arguments.int("days", default: 365)
        population.seed = UInt64(try arguments.int("seed", default: Int(setup.config.runId)))
        if arguments.has("v1-only") { population.v2 = false }
        if arguments.has("v2-only") { population.v1 = false }
        var driver = DriverConfig(ingestURL: ingestURL)
        driver.connections = try arguments.int("connections", default: 8)
        driver.seed = population.seed
        if let rate = arguments.value("rate") {
            guard let value = Double(rate), value > 0 else { throw UsageError("--rate must be a positive number") }
            driver.ratePerSecond = value
            if load { driver.maxQueued = max(200, Int(value * 2)) }
        } else if load {
            throw UsageError("load needs --rate (requests per second)")
        }
        driver.recordPerUser = population.users <= 20_000
        let seconds = try arguments.int("seconds", default: 60)
        let maxLag = Double(try arguments.int("max-lag", default: 8))
        let cohort = try arguments.int("cohort", default: load ? 50 : 250)
        let simulation = PopulationSimulation(pki: setup.pki, store: store, population: population, driver: driver,
                                              cohortSize: cohort, maxLag: maxLag)
        let check = arguments.has("check")
        print(load ? "load: \(driver.ratePerSecond!) requests/s for \(seconds) s against \(ingestURL)"
                   : "population: \(population.users) users over \(population.days) days (seed \(population.seed)) against \(ingestURL)")
        let lastPrint = Mutex(Date.distantPast)
        let (report, sent) = try simulation.run(check: check, settleTimeout: 180, duration: load ? Double(seconds) : nil) { line in
            let now = Date()
            let due = lastPrint.withLock { last -> Bool in
                guard now.timeIntervalSince(last) >= 2 || line.hasPrefix("checked") || line.hasPrefix("re-checked") else { return false }
                last = now
                return true
            }
            if due { print("  \(line)"); fflush(nil) }
        }
        let rate = Double(report.driver.attempts) / max(report.sendSeconds, 0.001)
        print("""

            users            \(report.users)
            deliveries       \(report.deliveries) (\(report.driver))
            sending          \(String(format: "%.1f", report.sendSeconds)) s, \(String(format: "%.0f", rate)) posts/s (generation \(String(format: "%.1f", report.generationSeconds)) s)
            ingest → ledger  \(report.latency)
            """)
        guard check else { return 0 }
        let users = report.mismatchedUsers.sorted()
        print("checked          \(report.checked) users: \(users.count) mismatched (settled in \(String(format: "%.1f", report.settleSeconds)) s)")
        let show = try arguments.int("show", default: 20)
        for user in users.prefix(show) { print(simulation.explain(user, mismatches: report.mismatches, driver: sent)) }
        if users.count > show { print("... and \(users.count - show) more (--show N prints more)") }
        // Ingest refusing what Apple or the app sent (a 4xx other than the deliberately malformed
        // inputs' 400) fails the check even where another path carried the same facts through.
        let refused = report.driver.unexpectedStatus.filter { (400..<500).contains($0.key) }
        if !refused.isEmpty {
            print("refused          \(refused.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: ", ")) valid deliveries")
        }
        return users.isEmpty && refused.isEmpty ? 0 : 1
    }
}

extension DevStack.Options {
    /// `storeledger dev`'s stack configured for the simulator (in this process; stopped with `DevStack.stop`).
    static func simulator(environment: [String: String], partitions: Int) throws -> DevStack.Options {
        var options = DevStack.Options()
        options.ingestPort = 0
        options.partitions = partitions
        options.environment = environment
        // A load generator is one service key at any rate asked for: lift that key's limit only.
        options.environment[Setting.rateLimitServicePerSecond.name] = Environment.given(.rateLimitServicePerSecond) ?? "1000000"
        options.environment[Setting.logLevel.name] = Environment.given(.logLevel) ?? "warning"
        // dev takes this key as its service key; the simulator presents it.
        let key = try APIKeyRing.generateKey(prefix: "slk_sim")
        options.apiKey = key
        IngestCredential.apiKey = key
        return options
    }
}
