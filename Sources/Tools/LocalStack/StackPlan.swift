import Runtime

/// What `LocalStack.start` boots: the broker's settings, where PostgreSQL comes from, and the
/// children after the migrations (ingest, the workers, the signer) in start order.
public struct StackPlan: Sendable {
    public static let brokerRole = "broker"
    public static let ingestRole = "ingest"
    static let tailLines = 20

    public enum Broker: Sendable {
        /// `storeledger broker`, supervised; ready by its admin `/readyz`.
        case child
        /// An `EmbeddedBroker` in this process (benches whose CPU figures include the broker's).
        case inProcess
        /// A broker the caller runs (its topics exist).
        case given(String)
    }

    public enum Database: Sendable {
        /// A private PostgreSQL (and optionally a synchronous streaming standby), removed on stop.
        case embedded(standby: Bool)
        /// A server the caller runs (migrated, never stopped).
        case given(String)
        /// No database at all (a broker-only stack).
        case none
    }

    /// The `storeledger` executable every child runs.
    public var executable: String
    public var broker: Broker = .child
    public var partitions = 12
    /// The broker's Kafka port and its admin port (0: a free loopback port, reported by the stack).
    public var brokerPort = 0
    public var brokerAdminPort = 0
    /// Open the broker's fault channel on a free port (`LocalStack.controlURL`; `.child` only).
    public var brokerControl = false
    public var brokerEnvironment: [String: String] = [:]
    /// The in-memory broker cannot be rebuilt: by default its exit stops the whole set.
    public var brokerExit: Supervisor.ExitPolicy = .stopAll
    public var database: Database = .embedded(standby: false)
    /// Given to every child and to the migrations (the stack adds KAFKA_BOOTSTRAP_SERVERS and DATABASE_URL).
    public var environment: [String: String] = [:]
    public var children: [StackChild] = []
    /// How long each step may take to become ready.
    public var readinessTimeout: Duration = .seconds(60)
    /// Where the children's standard error goes (relayed: the stack keeps each one's last lines for its errors).
    public var stderr: Supervisor.StderrRoute = .relay(to: nil)

    public init(executable: String) { self.executable = executable }
}

/// One child after the migrations. With a `portOption`, the stack appends `portOption port` to the
/// arguments (0: a free loopback port) and waits for `/readyz` on that port.
public struct StackChild: Sendable {
    public var role: String
    public var arguments: [String]
    /// On top of the stack's environment.
    public var environment: [String: String]
    public var portOption: String?
    public var port: Int
    public var onExit: Supervisor.ExitPolicy
    /// nil: the plan's.
    public var stderr: Supervisor.StderrRoute?

    public init(role: String, arguments: [String], environment: [String: String] = [:], portOption: String? = nil, port: Int = 0,
                onExit: Supervisor.ExitPolicy = .restart, stderr: Supervisor.StderrRoute? = nil) {
        self.role = role
        self.arguments = arguments
        self.environment = environment
        self.portOption = portOption
        self.port = port
        self.onExit = onExit
        self.stderr = stderr
    }

    /// `storeledger ingest --port P`: its own port answers `/readyz` (PostgreSQL reachable).
    public static func ingest(port: Int = 0, arguments: [String] = [], environment: [String: String] = [:],
                              onExit: Supervisor.ExitPolicy = .restart) -> StackChild {
        StackChild(role: StackPlan.ingestRole, arguments: ["ingest"] + arguments, environment: environment, portOption: "--port", port: port,
                   onExit: onExit)
    }

    /// `storeledger worker STAGE --admin-port P` as `role` (a second member: `decode-2`): ready once it holds partitions.
    public static func worker(_ stage: String, role: String? = nil, adminPort: Int = 0, arguments: [String] = [],
                              environment: [String: String] = [:], onExit: Supervisor.ExitPolicy = .restart) -> StackChild {
        StackChild(role: role ?? stage, arguments: ["worker", stage] + arguments, environment: environment, portOption: "--admin-port",
                   port: adminPort, onExit: onExit)
    }

    /// `storeledger signer`, with an admin port only when asked (it listens nowhere otherwise; nothing to wait for then).
    public static func signer(adminPort: Int? = nil, environment: [String: String] = [:], onExit: Supervisor.ExitPolicy = .restart,
                              stderr: Supervisor.StderrRoute? = nil) -> StackChild {
        StackChild(role: "signer", arguments: ["signer"], environment: environment, portOption: adminPort == nil ? nil : "--admin-port",
                   port: adminPort ?? 0, onExit: onExit, stderr: stderr)
    }
}
