import Configuration
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store
import Synchronization

/// One boot sequence for everything that runs StoreLedger on one machine (`storeledger dev`, the
/// simulator's `--dev`, the benches, the integration tests): the embedded broker (a child, or in process), the
/// embedded PostgreSQL (in process), the migrations (a one-shot child), then ingest and the workers
/// (children). Each step starts only when the one before is ready, observed through the child's
/// `/readyz` on a port the caller chose (or 0: a free loopback port this sequence picks and
/// reports); nothing is read from a child's standard output. `stop()` stops them in reverse order.
public final class LocalStack: Sendable {
    /// The children (`supervisor.pid(of:)`, members added later with `add`).
    public let supervisor: Supervisor
    /// `127.0.0.1:port`: what every client uses as `bootstrap.servers`.
    public let bootstrap: String
    /// The broker's fault channel (`StackPlan.brokerControl`), else nil.
    public let controlURL: String?
    /// nil with `StackPlan.Database.none`.
    public let databaseURL: String?
    public let postgres: EmbeddedPostgres?
    /// The streaming standby (`.embedded(standby: true)`); `databaseURL` then names both servers.
    public let standby: EmbeddedPostgres?
    /// The broker with `StackPlan.Broker.inProcess`.
    public let embeddedBroker: EmbeddedBroker?
    private let plan: StackPlan
    /// Each role's readiness port (the broker's and the workers' admin ports, ingest's own port).
    private let ports = Mutex<[String: Int]>([:])
    private let stopped = Atomic<Bool>(false)

    private init(plan: StackPlan, supervisor: Supervisor, bootstrap: String, controlURL: String?, databaseURL: String?,
                 postgres: EmbeddedPostgres?, standby: EmbeddedPostgres?, embeddedBroker: EmbeddedBroker?) {
        self.embeddedBroker = embeddedBroker
        self.plan = plan
        self.supervisor = supervisor
        self.bootstrap = bootstrap
        self.controlURL = controlURL
        self.databaseURL = databaseURL
        self.postgres = postgres
        self.standby = standby
    }

    /// Boots `plan` and returns once every child with a readiness port answers `/readyz` with 200.
    /// Throws `BootFailure` naming the first component that did not come up (with the end of its
    /// standard error); whatever had started is stopped again.
    /// - Parameter onCriticalExit: called with the role of a `.stopAll` child that exited on its own.
    /// - Parameter cancel: when set during the boot, it ends with a `BootFailure` ("interrupted").
    public static func start(_ plan: StackPlan, cancel: StopSignal? = nil,
                             onCriticalExit: @escaping @Sendable (String) -> Void = { _ in }) throws -> LocalStack {
        let supervisor = Supervisor(executable: plan.executable, onCriticalExit: onCriticalExit)
        var postgres: EmbeddedPostgres?
        var standby: EmbeddedPostgres?
        var embedded: EmbeddedBroker?
        do {
            // 1. The broker: everything else needs it. Ready means its topics exist and a client got their metadata.
            var controlURL: String?
            let bootstrap: String
            var brokerAdminPort: Int?
            switch plan.broker {
            case .given(let servers):
                bootstrap = servers
            case .inProcess:
                let broker = try EmbeddedBroker(port: plan.brokerPort == 0 ? nil : plan.brokerPort)
                embedded = broker
                for topic in Topic.all { try broker.createTopic(topic, partitions: Int32(plan.partitions)) }
                try BrokerReadiness.confirmTopics(bootstrap: broker.bootstrapServers, partitions: Int32(plan.partitions), stop: cancel ?? StopSignal())
                bootstrap = broker.bootstrapServers
            case .child:
                let brokerPort = try plan.brokerPort == 0 ? FreePort.loopback() : plan.brokerPort
                let adminPort = try plan.brokerAdminPort == 0 ? FreePort.loopback() : plan.brokerAdminPort
                var arguments = ["broker", "--partitions", String(plan.partitions), "--port", String(brokerPort), "--admin-port", String(adminPort)]
                if plan.brokerControl {
                    let port = try FreePort.loopback()
                    arguments += ["--control-port", String(port)]
                    controlURL = "http://127.0.0.1:\(port)"
                }
                try supervisor.start(.init(role: StackPlan.brokerRole, arguments: arguments,
                                           environment: plan.environment.merging(plan.brokerEnvironment) { $1 },
                                           onExit: plan.brokerExit, stderr: plan.stderr))
                try waitUntilReady([(StackPlan.brokerRole, adminPort)], supervisor: supervisor, timeout: plan.readinessTimeout, cancel: cancel)
                bootstrap = "127.0.0.1:\(brokerPort)"
                brokerAdminPort = adminPort
            }

            // 2. PostgreSQL (in process: EmbeddedPostgres.start returns once it accepts connections), 3. the migrations.
            var databaseURL: String?
            switch plan.database {
            case .none: break
            case .given(let url): databaseURL = url
            case .embedded(let withStandby):
                let server = try EmbeddedPostgres.start()
                postgres = server
                databaseURL = server.url
                if withStandby {
                    let copy = try server.startStandby(streams: ReplicationQueries.standbyStreams)
                    standby = copy
                    databaseURL = EmbeddedPostgres.failoverURL([server, copy])
                }
            }
            if let databaseURL { try migrate(plan, databaseURL: databaseURL) }

            let stack = LocalStack(plan: plan, supervisor: supervisor, bootstrap: bootstrap, controlURL: controlURL,
                                   databaseURL: databaseURL, postgres: postgres, standby: standby, embeddedBroker: embedded)
            if let brokerAdminPort { stack.ports.withLock { $0[StackPlan.brokerRole] = brokerAdminPort } }
            // 4. Ingest and the workers, all at once (each joins its group in parallel), then every one ready.
            do {
                var started: [(String, Int)] = []
                for child in plan.children {
                    if let port = try stack.launch(child) { started.append((child.role, port)) }
                }
                try waitUntilReady(started, supervisor: supervisor, timeout: plan.readinessTimeout, cancel: cancel)
            } catch {
                stack.stop()
                throw error
            }
            return stack
        } catch {
            supervisor.stopAll()
            standby?.stop()
            postgres?.stop()
            embedded?.close()
            throw error
        }
    }

    /// The environment every role process gets: the plan's, with the broker and the database.
    public var environment: [String: String] {
        var environment = plan.environment
        environment[Setting.kafkaBootstrapServers.name] = bootstrap
        if let databaseURL { environment[Setting.databaseURL.name] = databaseURL }
        return environment
    }

    /// `http://127.0.0.1:port` where `role` answers `/readyz` (the broker's and workers' admin
    /// servers, ingest itself); nil for a role without one.
    public func url(of role: String) -> String? { ports.withLock { $0[role] }.map { "http://127.0.0.1:\($0)" } }

    /// Ingest's base URL (when the plan has an `ingest` child).
    public var ingestURL: String? { url(of: StackPlan.ingestRole) }

    /// Every role with a readiness port, with its URL.
    public var readinessURLs: [String: String] { ports.withLock { $0 }.mapValues { "http://127.0.0.1:\($0)" } }

    /// Starts one more child (a member added later, a worker a test needs) with the stack's
    /// environment; returns its readiness port (nil: it has none). Does not wait: `waitUntilReady`.
    @discardableResult
    public func add(_ child: StackChild) throws -> Int? { try launch(child) }

    /// Stops one child for good (SIGTERM, then SIGKILL after `grace`); returns its exit status.
    @discardableResult
    public func remove(_ role: String, grace: Duration = .seconds(10)) -> Int32? {
        _ = ports.withLock { $0.removeValue(forKey: role) }
        return supervisor.stop(role: role, grace: grace)
    }

    /// Waits until each of `roles` answers `/readyz` with 200 (every role with a port when nil).
    public func waitUntilReady(_ roles: [String]? = nil, timeout: Duration) throws {
        let known = ports.withLock { $0 }
        let wanted = (roles ?? known.keys.sorted()).compactMap { role in known[role].map { (role, $0) } }
        try Self.waitUntilReady(wanted, supervisor: supervisor, timeout: timeout, cancel: nil)
    }

    /// The roles whose `/readyz` does not answer 200 now.
    public func notReady() -> [String] {
        ports.withLock { $0 }.filter { ReadinessProbe.status(port: $0.value) != 200 }.keys.sorted()
    }

    /// Stops everything in reverse start order: the children after the broker (newest first), PostgreSQL, the broker. Idempotent.
    public func stop(grace: Duration = .seconds(10)) {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for role in supervisor.roles.reversed() where role != StackPlan.brokerRole { supervisor.stop(role: role, grace: grace) }
        standby?.stop()
        postgres?.stop()
        supervisor.stopAll(grace: grace)
        embeddedBroker?.close()
    }

    private func launch(_ child: StackChild) throws -> Int? {
        var arguments = child.arguments
        var port: Int?
        if let option = child.portOption {
            let chosen = try child.port == 0 ? FreePort.loopback() : child.port
            arguments += [option, String(chosen)]
            port = chosen
        }
        if let port { ports.withLock { $0[child.role] = port } }
        try supervisor.start(.init(role: child.role, arguments: arguments, environment: environment.merging(child.environment) { $1 },
                                   onExit: child.onExit, stderr: child.stderr ?? plan.stderr))
        return port
    }

    /// `storeledger migrate` to completion; its standard error is relayed like a child's.
    private static func migrate(_ plan: StackPlan, databaseURL: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: plan.executable)
        process.arguments = ["migrate"]
        // The URL travels in the environment, not in the argument list every `ps` shows.
        process.environment = ProcessEnvironment.current.merging(plan.environment) { $1 }.merging([Setting.databaseURL.name: databaseURL]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        while process.isRunning { usleep(10_000) }
        if case .relay(let path) = plan.stderr, !text.isEmpty {
            if let path, let handle = FileHandle(forWritingAtPath: path) {
                handle.seekToEndOfFile()
                handle.write(Data(text.utf8))
                try? handle.close()
            } else if path == nil {
                FileHandle.standardError.write(Data(text.utf8))
            }
        }
        guard process.terminationStatus == 0 else {
            throw BootFailure(component: "migrate", reason: "exited with status \(process.terminationStatus)",
                              stderrTail: Array(text.split(separator: "\n").suffix(StackPlan.tailLines).map(String.init)))
        }
    }

    /// Polls each role's `/readyz` every 100 ms until all answer 200; a role that never does (or a
    /// child that exits meanwhile and is not restarted) fails the boot with its stderr's end.
    private static func waitUntilReady(_ roles: [(role: String, port: Int)], supervisor: Supervisor, timeout: Duration,
                                       cancel: StopSignal?) throws {
        let deadline = ContinuousClock.now + timeout
        var pending = roles
        var lastStatus: [String: Int] = [:]
        var gone: Set<String> = []
        while !pending.isEmpty {
            pending.removeAll { entry in
                let status = ReadinessProbe.status(port: entry.port)
                if let status { lastStatus[entry.role] = status }
                return status == 200
            }
            guard !pending.isEmpty else { return }
            // A child that crashes while starting will not get ready: say so now, not at the deadline.
            for entry in pending {
                let restarts = supervisor.restarts(of: entry.role)
                let down = !supervisor.isRunning(entry.role) && restarts == 0
                if restarts >= 3 || down && gone.contains(entry.role) {
                    let what = restarts >= 3 ? "kept exiting while starting (restarted \(restarts) times)" : "exited while starting"
                    throw BootFailure(component: entry.role, reason: what, stderrTail: supervisor.stderrTail(of: entry.role))
                }
                if down { gone.insert(entry.role) } else { gone.remove(entry.role) }
            }
            if cancel?.isStopped == true { throw BootFailure(component: pending[0].role, reason: "was not ready when the boot was interrupted", stderrTail: []) }
            if ContinuousClock.now >= deadline { break }
            if let cancel { _ = cancel.wait(timeout: .milliseconds(100)) } else { Thread.sleep(forTimeInterval: 0.1) }
        }
        guard let first = pending.first else { return }
        let answer = lastStatus[first.role].map { "/readyz answered \($0)" } ?? "nothing answered on port \(first.port)"
        let others = pending.dropFirst().map(\.role)
        let restarts = supervisor.restarts(of: first.role)
        var reason = "did not become ready within \(timeout) (\(answer)\(restarts > 0 ? ", restarted \(restarts) times" : ""))"
        if !others.isEmpty { reason += "; not ready either: \(others.joined(separator: ", "))" }
        throw BootFailure(component: first.role, reason: reason, stderrTail: supervisor.stderrTail(of: first.role))
    }
}

/// A component that did not come up: which one, why, and the last lines it wrote to standard error.
public struct BootFailure: Error, CustomStringConvertible {
    public let component: String
    public let reason: String
    public let stderrTail: [String]

    public var description: String {
        let head = "\(component) \(reason)"
        guard !stderrTail.isEmpty else { return head }
        return head + "; the end of its standard error:\n  " + stderrTail.joined(separator: "\n  ")
    }
}
