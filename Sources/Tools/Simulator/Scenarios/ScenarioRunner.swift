import Crypto
import Foundation
import Synchronization

/// Where scenarios run: the ingest URL, the shared store (the verifyReceipt endpoint answers from
/// it) and the emitter (the simulated App Store's keys).
public struct ScenarioContext: Sendable {
    public let ingestURL: String
    public let store: AppStore
    public let emitter: WireEmitter
    /// Seconds to wait for the pipeline before a scenario counts as failed.
    public var timeout: TimeInterval = 40
    /// The simulated verifyReceipt endpoint, when the workers validate receipts through it (S13).
    public var verifyReceipt: VerifyReceiptServer?
    /// The signer's public key, to verify promotional-offer signatures (S12).
    public var offerPublicKey: PublicKey?

    public init(ingestURL: String, store: AppStore, emitter: WireEmitter) {
        self.ingestURL = ingestURL
        self.store = store
        self.emitter = emitter
    }
}

/// A scripted journey (one of docs/domain.md's S1–S15): what happens in the store, what reaches the
/// wire in which order, and what must hold afterwards beyond the oracle.
public struct Scenario: Sendable {
    public let id: String
    public let title: String
    let script: @Sendable (inout ScenarioBuilder) throws -> Void

    public init(_ id: String, _ title: String, _ script: @escaping @Sendable (inout ScenarioBuilder) throws -> Void) {
        self.id = id
        self.title = title
        self.script = script
    }
}

public struct ScenarioResult: Sendable {
    public var id: String
    public var title: String
    public var users: [String]
    public var mismatches: [Mismatch]
    /// Extra checks that did not hold (ledger evidence, offers API answers).
    public var failures: [String]
    /// Facts about the run worth printing (what an API answered).
    public var notes: [String]
    public var journey: [String]
    public var sent: [String]
    public var seconds: Double

    public var passed: Bool { mismatches.isEmpty && failures.isEmpty }

    public var text: String {
        var lines = ["\(passed ? "PASS" : "FAIL") \(id) \(title) (\(String(format: "%.1f", seconds)) s)"]
        lines += notes.map { "     note: \($0)" }
        if !passed {
            lines += mismatches.map { "     mismatch: \($0.description.replacingOccurrences(of: "\n", with: "\n     "))" }
            lines += failures.map { "     check failed: \($0)" }
            lines.append("     journey:")
            lines += journey.map { "       \($0)" }
            lines.append("     sent:")
            lines += sent.map { "       \($0)" }
        }
        return lines.joined(separator: "\n")
    }
}

/// Builds a scenario's steps against its own slice of the store.
public struct ScenarioBuilder {
    public var state: StoreState
    public let emitter: WireEmitter
    public let verifyReceipt: VerifyReceiptServer?
    public let offerPublicKey: PublicKey?
    let seed: UInt64
    var steps: [Step] = []
    var users: [String] = []
    var checks: [(String, @Sendable (ScenarioAPI) throws -> String?)] = []

    enum Step {
        case deliver(Delivery)
        case wait(String, @Sendable (ScenarioAPI) throws -> Bool)
        case action(String, @Sendable (ScenarioAPI) throws -> String?)
    }

    /// A new user with one Apple ID.
    public mutating func newUser(_ environment: SimEnvironment = .production) throws -> String {
        let id = StoreState.userUUID(seed: seed, index: users.count + 1)
        state.addUser(id)
        try state.addAppleID(user: id, environment: environment)
        users.append(id)
        return id
    }

    public mutating func send(_ delivery: Delivery) { steps.append(.deliver(delivery)) }
    public mutating func send(_ deliveries: [Delivery]) { deliveries.forEach { send($0) } }

    /// Holds the next deliveries until `condition` holds (an earlier fact has been processed).
    public mutating func wait(_ what: String, _ condition: @escaping @Sendable (ScenarioAPI) throws -> Bool) {
        steps.append(.wait(what, condition))
    }

    /// An API call made at this point of the journey (e.g. ask which product to show); returns a
    /// failure text or nil.
    public mutating func act(_ what: String, _ body: @escaping @Sendable (ScenarioAPI) throws -> String?) {
        steps.append(.action(what, body))
    }

    /// Must hold once the pipeline settled; returns a failure text or nil.
    public mutating func expect(_ what: String, _ check: @escaping @Sendable (ScenarioAPI) throws -> String?) {
        checks.append((what, check))
    }

    /// Waits until the subscription is known to membership (a fact about it was processed).
    public mutating func waitUntilKnown(_ otid: String) {
        wait("subscription \(otid) is known") { api in try api.get("/v1/subscriptions/\(otid)").status == 200 }
    }
}

/// The read side of StoreLedger as scenarios see it.
public final class ScenarioAPI {
    let connection: HTTPConnection
    var notes: [String] = []

    init(ingestURL: String) throws { connection = try HTTPConnection(baseURL: ingestURL) }

    public func get(_ path: String) throws -> (status: Int, json: [String: Any]?) {
        let response = try connection.get(path)
        return (response.status, response.json)
    }

    public func post(_ path: String, json: [String: Any]) throws -> (status: Int, json: [String: Any]?) {
        let response = try connection.post(path, body: [UInt8](try JSONSerialization.data(withJSONObject: json)))
        return (response.status, response.json)
    }

    public func note(_ text: String) { if !notes.contains(text) { notes.append(text) } }

    /// The user's ledger lines, oldest first.
    public func ledger(_ user: String) throws -> [[String: Any]] {
        let (status, json) = try get("/v1/users/\(user)/ledger?limit=1000")
        guard status == 200 else { return [] }
        return ((json?["entries"] as? [[String: Any]]) ?? []).reversed()
    }

    /// One group of the user's membership view.
    public func group(_ user: String, _ group: String) throws -> [String: Any]? {
        let (status, json) = try get("/v1/users/\(user)/membership")
        guard status == 200 else { return nil }
        return (json?["groups"] as? [[String: Any]])?.first { $0["group"] as? String == group }
    }

    /// R2: no purchase of the user was granted twice.
    public func doubleGrants(_ user: String) throws -> String? {
        var grants: [String: Int] = [:]
        for entry in try ledger(user) where entry["kind"] as? String == "grant" {
            grants[(entry["purchaseId"] as? String) ?? "?", default: 0] += 1
        }
        let twice = grants.filter { $0.value > 1 }
        return twice.isEmpty ? nil : "purchases granted more than once: \(twice.map { "\($0.key) ×\($0.value)" }.sorted().joined(separator: ", "))"
    }
}

/// Runs scenarios one after the other: deliveries in the scripted order (one connection, so
/// ingest receives them in that order), waits where the script says a fact must be processed
/// first, then polls the oracle and the extra checks until they hold or the timeout passes.
public struct ScenarioRunner: Sendable {
    public let context: ScenarioContext
    private static let blocks = Atomic<Int>(8_000_000)
    /// How long a scenario's checks must keep holding before it passes.
    static let holdSeconds = 1.5

    public init(context: ScenarioContext) { self.context = context }

    public func run(_ scenarios: [Scenario], progress: @Sendable (ScenarioResult) -> Void = { _ in }) -> [ScenarioResult] {
        scenarios.map { scenario in
            let result = run(scenario)
            progress(result)
            return result
        }
    }

    public func run(_ scenario: Scenario) -> ScenarioResult {
        let started = Date()
        var result = ScenarioResult(id: scenario.id, title: scenario.title, users: [], mismatches: [], failures: [], notes: [],
                                    journey: [], sent: [], seconds: 0)
        let block = Self.blocks.add(1, ordering: .relaxed).newValue
        var builder = ScenarioBuilder(state: StoreState(config: context.store.config, block: block), emitter: context.emitter,
                                      verifyReceipt: context.verifyReceipt, offerPublicKey: context.offerPublicKey, seed: 0x5CE_0000_0000 &+ UInt64(context.store.config.runId) << 24 &+ UInt64(block))
        do {
            try scenario.script(&builder)
        } catch {
            result.failures.append("script failed: \(error)")
            return result
        }
        let scripted = builder.state
        context.store.mutate { $0.absorb(scripted) }
        result.users = builder.users
        result.journey = builder.users.flatMap { user in (builder.state.users[user]?.journey ?? []).map { "\(user)  \($0)" } }
        do {
            let api = try ScenarioAPI(ingestURL: context.ingestURL)
            for step in builder.steps {
                switch step {
                case .deliver(let delivery):
                    let response = try api.connection.post(delivery.path, body: delivery.body)
                    result.sent.append("\(AppleDates.readable(delivery.simMs))  \(delivery.label) -> \(response.status)")
                    if !(200...206).contains(response.status), !(delivery.expectsRejection && response.status == 400) {
                        result.failures.append("ingest answered \(response.status) to \(delivery.label)")
                    }
                case .wait(let what, let condition):
                    let deadline = Date().addingTimeInterval(context.timeout)
                    while try !condition(api) {
                        guard Date() < deadline else {
                            result.failures.append("timed out waiting until \(what)")
                            break
                        }
                        Thread.sleep(forTimeInterval: 0.05)
                    }
                case .action(let what, let body):
                    if let failure = try body(api) { result.failures.append("\(what): \(failure)") }
                }
            }
            // Settle: the oracle and the checks, until they hold, and still hold a moment later. A 200
            // from ingest only means the broker has a delivery: the copies a scenario is about (S1's
            // restore, S2's duplicates) may still be on their way when the first copy already matches.
            let expectations = builder.users.compactMap { user in builder.state.users[user].map { Oracle.expectation(for: $0, in: builder.state) } }
            let checker = MembershipChecker(ingestURL: context.ingestURL, connections: 1)
            let deadline = Date().addingTimeInterval(context.timeout)
            var checkFailures: [String] = []
            var heldSince: Date?
            repeat {
                result.mismatches = checker.check(expectations)
                checkFailures = []
                if result.mismatches.isEmpty {
                    for user in builder.users {
                        if let double = try api.doubleGrants(user) { checkFailures.append("R2: \(double)") }
                    }
                    for (what, check) in builder.checks {
                        if let failure = try check(api) { checkFailures.append("\(what): \(failure)") }
                    }
                }
                if result.mismatches.isEmpty, checkFailures.isEmpty {
                    if let heldSince, Date().timeIntervalSince(heldSince) >= Self.holdSeconds { break }
                    heldSince = heldSince ?? Date()
                } else {
                    heldSince = nil
                }
                Thread.sleep(forTimeInterval: 0.25)
            } while Date() < deadline
            result.failures += checkFailures
            result.notes = api.notes
        } catch {
            result.failures.append("API error: \(error)")
        }
        result.seconds = Date().timeIntervalSince(started)
        return result
    }
}
