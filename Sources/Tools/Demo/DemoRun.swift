import Configuration
import Domain
import Foundation
import Kafka
import Postgres
import Simulator
import Store

/// What `storeledger dev --demo` prepares before the workers start: the simulated App Store's
/// PKI and catalog, and the environment that makes the workers trust it.
public struct DemoSetup: Sendable {
    public let simulator: SimulatorSetup
    /// Merged into the environment of ingest and every worker.
    public let environment: [String: String]
}

/// Writes the simulator's files into a fresh directory (dev removes it when it stops).
public func prepareDemo() throws -> DemoSetup {
    let directory = NSTemporaryDirectory() + "storeledger-demo-\(getpid())"
    let setup = try SimulatorSetup.prepare(directory: directory)
    var environment = setup.environment
    // dev starts its own signer with its own key.
    environment.removeValue(forKey: Setting.signingKeys.name)
    environment.removeValue(forKey: Setting.signingDefaultKeyId.name)
    return DemoSetup(simulator: setup, environment: environment)
}

/// Drives a short stretch of simulated App Store life through the running StoreLedger and prints
/// what happened: a few scripted journeys (crossgrade, refund, upgrade, storefront change, a
/// refund that arrives before its purchase), a month of random customers with Apple's retries,
/// duplicates and reordering, and one forged notification; then events in, records per stage,
/// dead letters, the ledger by kind, the oracle's verdict, and a few users' membership and ledger.
/// A failure is printed, not thrown further: StoreLedger stays up for `curl` either way.
public func runDemo(_ demo: DemoSetup, ingestURL: String, bootstrap: String, databaseURL: String) throws {
    do {
        try driveDemo(demo, ingestURL: ingestURL, bootstrap: bootstrap, databaseURL: databaseURL)
    } catch {
        print("the demo stopped early: \(error)\nStoreLedger keeps running; Ctrl-C stops everything.")
        fflush(nil)
    }
}

private func driveDemo(_ demo: DemoSetup, ingestURL: String, bootstrap: String, databaseURL: String) throws {
    let setup = demo.simulator
    let store = AppStore(config: setup.config)
    let emitter = WireEmitter(pki: setup.pki, config: setup.config)
    @Sendable func say(_ text: String = "") {
        print(text)
        fflush(nil)
    }
    say("\n── Demo: the simulated App Store at work ─────────────────────────────────────")
    say("Scripted journeys (the scenarios of docs/domain.md), each checked against the simulator's own oracle:")
    let scripted = ScenarioRunner(context: ScenarioContext(ingestURL: ingestURL, store: store, emitter: emitter))
        .run(Scenarios.named(["S3", "S5", "S8", "S10", "S15"])) { result in
            say("  \(result.passed ? "✓" : "✗") \(result.id) \(result.title)")
        }

    var population = PopulationConfig()
    population.users = 80
    population.days = 30
    population.seed = UInt64(setup.config.runId)
    population.startMs = Int64(Date().timeIntervalSince1970 * 1000) - 30 * 86_400_000
    var driver = DriverConfig(ingestURL: ingestURL)
    driver.connections = 4
    driver.seed = population.seed
    say("\nA simulated month of \(population.users) customers (purchases, renewals, switches, refunds, restores,")
    say("billing retries; Apple's retries, duplicates and reordering), compressed into seconds...")
    let simulation = PopulationSimulation(pki: setup.pki, store: store, population: population, driver: driver, cohortSize: 80)
    let (report, _) = try simulation.run(check: false)

    // One notification signed by a chain StoreLedger does not trust: it must be dead-lettered.
    var forgedState = StoreState(config: setup.config, block: 9_999_999)
    let forger = "00000000-0000-4000-8000-00000000f0f0"
    forgedState.addUser(forger)
    try forgedState.addAppleID(user: forger)
    let forgedPurchase = try forgedState.purchase(user: forger, appleId: 0, productId: "vip.pro.1m", atMs: Int64(Date().timeIntervalSince1970 * 1000))
    let forged = try WireEmitter(pki: try SimulatorPKI.generate(), config: setup.config)
        .v2(forgedState, otid: forgedPurchase.originalTransactionId, type: "SUBSCRIBED", subtype: "INITIAL_BUY", atMs: forgedPurchase.purchaseMs)
    let forgedStatus = try SimpleHTTP.post(ingestURL, forged.path, body: forged.body).status

    let users = simulation.users + scripted.flatMap(\.users)
    let mismatches = simulation.settle(users: users, timeout: 30)
    let stats = report.driver
    let scriptedPosts = scripted.reduce(0) { $0 + $1.sent.count }
    say("""

        Events in      \(stats.attempts + scriptedPosts + 1) posts to ingest: the month's \(report.deliveries) deliveries (\(stats.byChannel["v1"] ?? 0) V1, \
        \(stats.byChannel["v2"] ?? 0) V2 notifications, \(stats.byChannel["receipt"] ?? 0) receipt uploads) plus \(stats.retries) Apple retries
                       and \(stats.duplicatesInjected) duplicates (\(stats.lostAcks) acks lost, \(stats.reordered) held back); \(scriptedPosts) scripted; \
        1 forged V2 (answered \(forgedStatus));
                       \(stats.expectedRejections) malformed upload(s) refused at the edge with 400
        Latency        ingest → ledger entry visible: \(report.latency)
        """)

    let counts = try countTopics(bootstrap: bootstrap)
    say("Per stage      records on each topic")
    for topic in [Topic.notificationsRaw, Topic.receiptsRaw, Topic.decoded, Topic.unique, Topic.commands, Topic.deadLetter] {
        say("                 \(topic.padding(toLength: 34, withPad: " ", startingAt: 0)) \(counts.records[topic] ?? 0)")
    }
    if !counts.deadLetters.isEmpty {
        say("Dead letters   " + counts.deadLetters.map { "\($0.key) ×\($0.value)" }.sorted().joined(separator: ", "))
    }
    let database = try PGConnection(url: databaseURL)
    let kinds = try InspectionQueries(database).ledgerKinds().map { "\($0.kind) \($0.count)" }
    say("Ledger         \(kinds.joined(separator: ", "))")
    say("Oracle         \(users.count - Set(mismatches.map(\.userId)).count)/\(users.count) users' membership equals the simulator's independent expectation")
    for mismatch in mismatches.prefix(5) { say("                 ✗ \(mismatch.description)") }

    say("\nA few users:")
    let showcase = [("S3 crossgrade A → B", scripted.first { $0.id == "S3" }?.users.first),
                    ("S5 refund mid-period", scripted.first { $0.id == "S5" }?.users.first),
                    ("S10 storefront change", scripted.first { $0.id == "S10" }?.users.first),
                    ("a random customer", busiestUser(simulation.users, database))]
    for (title, user) in showcase {
        guard let user else { continue }
        say("  \(user)  (\(title))")
        if let groups = try SimpleHTTP.get(ingestURL, "/v1/users/\(user)/membership").json?["groups"] as? [[String: Any]] {
            for group in groups {
                let intervals = (group["intervals"] as? [[String: Any]] ?? []).map(interval).joined(separator: " ")
                let product = group["currentProduct"] as? String ?? "-"
                let renew = (group["autoRenewStatus"] as? Bool).map { $0 ? "auto-renew on" : "auto-renew off" } ?? ""
                let balance = (group["balance"] as? NSNumber).map { " balance \($0)" } ?? ""
                say("    \((group["group"] as? String ?? "?").padding(toLength: 9, withPad: " ", startingAt: 0)) \(intervals) \(product) \(renew)\(balance)")
            }
        }
        let entries = ((try SimpleHTTP.get(ingestURL, "/v1/users/\(user)/ledger?limit=6").json?["entries"] as? [[String: Any]]) ?? []).reversed()
        for entry in entries {
            let kind = (entry["kind"] as? String ?? "?").padding(toLength: 7, withPad: " ", startingAt: 0)
            let what = (entry["interval"] as? [String: Any]).map(interval) ?? ""
            let reason = (entry["reason"] as? String ?? "").prefix(110)
            say("      \(kind) \(what) \(reason)")
        }
    }
    let sample = showcase.compactMap(\.1).first ?? "<user_id>"
    // The service key dev printed above (docs/security.md): every client route needs a credential.
    let key = IngestCredential.apiKey ?? "<API_KEY>"
    say("""

        Try:
          curl -H 'Authorization: Bearer \(key)' \(ingestURL)/v1/users/\(sample)/membership
          curl -H 'Authorization: Bearer \(key)' '\(ingestURL)/v1/users/\(sample)/ledger?limit=20'
          curl -H 'Authorization: Bearer \(key)' \(ingestURL)/v1/users/\(sample)/offers
          curl \(ingestURL)/metrics
        More: \(Setting.apiKey)=\(key) storeledger simulate scenarios --ingest \(ingestURL) --dir \(setup.directory)
        StoreLedger keeps running; Ctrl-C stops everything.
        """)
}

/// `[2025-03-01 10:00, 2025-03-31 10:00)` from the API's interval JSON.
private func interval(_ json: [String: Any]) -> String {
    func text(_ value: Any?) -> String {
        guard let ms = (value as? NSNumber)?.int64Value else { return "∞" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withSpaceBetweenDateAndTime]
        return String(formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)).prefix(16))
    }
    return "[\(text(json["startMs"])), \(text(json["endMs"])))"
}

/// The population user with the most ledger lines (the most eventful story).
private func busiestUser(_ users: [String], _ database: PGConnection) -> String? {
    guard !users.isEmpty else { return nil }
    return (try? InspectionQueries(database).busiestUser(among: users)) ?? users.first
}

/// Records per topic, read from the beginning by one fresh consumer, and dead letters by kind.
private func countTopics(bootstrap: String) throws -> (records: [String: Int], deadLetters: [String: Int]) {
    var config = KafkaConfig(bootstrapServers: bootstrap, clientId: "storeledger-demo")
    config.sessionTimeout = .seconds(6)
    config.heartbeatInterval = .milliseconds(500)
    let topics = [Topic.notificationsRaw, Topic.receiptsRaw, Topic.decoded, Topic.unique, Topic.commands, Topic.deadLetter]
    let consumer = try KafkaConsumer(config: config, groupId: "storeledger-demo-\(UUID().uuidString)", topics: topics)
    defer { consumer.close() }
    var records: [String: Int] = [:]
    var deadLetters: [String: Int] = [:]
    let deadline = Date().addingTimeInterval(30)
    var lastRecord = Date()
    var seen = false
    while Date() < deadline {
        let batch = try consumer.poll(maxRecords: 5000, timeout: .milliseconds(250))
        if batch.isEmpty {
            if seen, Date().timeIntervalSince(lastRecord) > 1.5 { break }
            continue
        }
        seen = true
        lastRecord = Date()
        for record in batch {
            records[record.topic, default: 0] += 1
            if record.topic == Topic.deadLetter, let letter = DeadLetterRecord(record) {
                deadLetters["\(letter.stage)/\(letter.kind)", default: 0] += 1
            }
        }
    }
    return (records, deadLetters)
}
