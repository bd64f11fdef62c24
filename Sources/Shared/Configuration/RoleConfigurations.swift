// Typed configuration per role, each read from a `ConfigurationReader` (which collects every
// problem). A value left `nil` means "not set": the consuming module keeps its own default, the
// one docs/configuration.md documents.

/// What every process applies once at start (logging, supervision, test hooks, PostgreSQL limits).
public struct ProcessConfiguration: Sendable, Equatable {
    public var logLevel: String?
    /// The supervising parent's pid (`storeledger dev`, the test cluster).
    public var parentPid: Int32?
    /// Overrides the built-in code version; longer than 100 bytes is ignored, as documented.
    public var codeVersion: String?
    public var failpoints = ""
    public var failpointLog: String?
    public var failpointMax: Int?
    public var pgBinDirectory: String?
    public var pgConnectTimeoutSeconds: Int?
    public var pgStatementTimeoutMs: Int?
    public var pgPrepareStatements: Bool?
    /// Deliberately wrong rules for the replay tests, comma-separated.
    public var testWrongRules = ""

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        logLevel = reader.choice(.logLevel)
        parentPid = reader.integer(.parentPid).map { Int32($0) }
        codeVersion = reader.text(.codeVersion).flatMap { $0.utf8.count <= 100 ? $0 : nil }
        failpoints = reader.text(.failpoint) ?? ""
        failpointLog = reader.text(.failpointLog)
        failpointMax = reader.integer(.failpointMax).map { Int($0) }
        pgBinDirectory = reader.text(.pgBin)
        pgConnectTimeoutSeconds = reader.integer(.pgConnectTimeoutSeconds).map { Int($0) }
        pgStatementTimeoutMs = reader.integer(.pgStatementTimeoutMs).map { Int($0) }
        pgPrepareStatements = reader.boolean(.pgPrepareStatements)
        testWrongRules = reader.text(.testWrongRule) ?? ""
    }
}

/// A Kafka client: bootstrap list, group timing, producer linger and the security properties.
public struct KafkaClientConfiguration: Sendable, Equatable {
    public var bootstrapServers: String?
    public var sessionTimeoutMs: Int64?
    public var fetchWaitMs: Int64?
    public var lingerMs: Int64?
    public var propertiesFile: String?
    /// `KAFKA_SECURITY_PROTOCOL`, `KAFKA_SASL_*`, `KAFKA_SSL_*` as set.
    public var securityVariables: [String: String] = [:]

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        bootstrapServers = reader.text(.kafkaBootstrapServers)
        sessionTimeoutMs = reader.integer(.kafkaSessionTimeoutMs)
        fetchWaitMs = reader.integer(.kafkaFetchWaitMs)
        lingerMs = reader.integer(.kafkaLingerMs)
        propertiesFile = reader.text(.kafkaPropertiesFile)
        securityVariables = reader.environment.filter { name, _ in
            name == Setting.kafkaSecurityProtocolVariable || Setting.kafkaSecurityVariablePrefixes.contains { name.hasPrefix($0) }
        }
    }
}

/// The consumer loop's retry policy of every stage and the signer.
public struct LoopConfiguration: Sendable, Equatable {
    public var maxAttempts: Int?
    public var baseBackoffMs: Int64?
    public var maxBackoffMs: Int64?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        maxAttempts = reader.integer(.loopMaxAttempts).map { Int($0) }
        baseBackoffMs = reader.integer(.loopBaseBackoffMs)
        maxBackoffMs = reader.integer(.loopMaxBackoffMs)
    }
}

/// The ingest edge's own settings (credentials and Apple's secrets are read by their modules'
/// parsers from the same environment).
public struct IngestConfiguration: Sendable, Equatable {
    public var port: Int?
    public var serverAPIRoutes = false
    public var maxConnectionsPerAddress: Int?
    public var maxConnections: Int?
    public var idleTimeoutSeconds: Int?
    public var bodyTimeoutSeconds: Int?
    public var catalogPath: String?
    public var bundleId: String?
    public var offerSignTimeoutMs: Int64 = 2000

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        port = reader.integer(.port).map { Int($0) }
        serverAPIRoutes = reader.choice(.ingestServerAPI) == "on"
        maxConnectionsPerAddress = reader.integer(.maxConnectionsPerAddress).map { Int($0) }
        maxConnections = reader.integer(.maxConnections).map { Int($0) }
        idleTimeoutSeconds = reader.integer(.httpIdleTimeoutSeconds).map { Int($0) }
        bodyTimeoutSeconds = reader.integer(.httpBodyTimeoutSeconds).map { Int($0) }
        catalogPath = reader.text(.catalog)
        bundleId = reader.text(.bundleId)
        offerSignTimeoutMs = reader.integer(.offerSignTimeoutMs) ?? offerSignTimeoutMs
    }
}

/// A pipeline stage (`storeledger worker decode|dedupe|classify|membership|consumption`).
public struct StageConfiguration: Sendable, Equatable {
    public var databaseURL: String?
    public var catalogPath: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        databaseURL = reader.text(.databaseURL)
        catalogPath = reader.text(.catalog)
    }
}

/// The membership-events relay and webhook delivery.
public struct RelayConfiguration: Sendable, Equatable {
    public var databaseURL: String?
    /// Tests only: a file whose presence makes the relay crash after publishing.
    public var crashFlag: String?
    /// Hours a published outbox row is kept (0: every row); nil: the relay's default.
    public var outboxRetentionHours: Int?
    public var webhooksPath: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        databaseURL = reader.text(.databaseURL)
        crashFlag = reader.text(.relayCrashFlag)
        outboxRetentionHours = reader.integer(.outboxRetentionHours).map { Int($0) }
        webhooksPath = reader.text(.webhooks)
    }
}

/// The offer signer: the only process that reads the App Store Connect keys.
public struct SignerConfiguration: Sendable, Equatable {
    public var keys: String?
    public var defaultKeyId: String?
    public var issuerId: String?
    public var metricsFile: String?
    public var noncesPerHour: Int?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        keys = reader.text(.signingKeys)
        defaultKeyId = reader.text(.signingDefaultKeyId)
        issuerId = reader.text(.signingIssuerId)
        metricsFile = reader.text(.signerMetricsFile)
        noncesPerHour = reader.integer(.noncesPerHour).map { Int($0) }
    }
}

/// Benchmarks (`storeledger bench ...`).
public struct BenchConfiguration: Sendable, Equatable {
    public var fixtures = "../shared/fixtures"
    public var only: String?
    public var members = 1
    public var batch = 500
    public var connections = 64
    public var sessionTimeoutMs = 6_000

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        fixtures = reader.text(.fixtures) ?? fixtures
        only = reader.choice(.benchOnly)
        members = max(1, reader.integer(.benchMembers).map { Int($0) } ?? members)
        batch = reader.integer(.benchBatch).map { Int($0) } ?? batch
        connections = reader.integer(.benchConnections).map { Int($0) } ?? connections
        sessionTimeoutMs = reader.integer(.kafkaSessionTimeoutMs).map { Int($0) } ?? sessionTimeoutMs
    }
}

/// The fuzz targets' replay builds and seed writer.
public struct FuzzConfiguration: Sendable, Equatable {
    public var fixtures = "../shared/fixtures"
    public var jwsRoot = "../shared/fixtures/apple-lib/certs/testCA.der"
    public var receiptRoot = "../shared/fixtures/certs/apple-real/AppleIncRootCertificate.cer"
    public var writeSeeds: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        fixtures = reader.text(.fuzzFixtures) ?? reader.text(.fixtures) ?? fixtures
        jwsRoot = reader.text(.fuzzJWSRoot) ?? jwsRoot
        receiptRoot = reader.text(.fuzzReceiptRoot) ?? receiptRoot
        writeSeeds = reader.raw(.fuzzWriteSeeds)
    }

    /// The environment of this process, read once.
    public static var process: FuzzConfiguration {
        var reader = ConfigurationReader(environment: ProcessEnvironment.current)
        return FuzzConfiguration(&reader)
    }
}

/// The simulator's client side (`storeledger simulate`).
public struct SimulatorConfiguration: Sendable, Equatable {
    public var ingestURL: String?
    public var apiKey: String?
    public var home: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        ingestURL = reader.text(.ingestURL)
        apiKey = reader.text(.apiKey)
        home = reader.text(.home)
    }
}

/// How Apple's signed data and receipts are verified: decode, and whoever checks Apple's answers
/// with its settings. Certificate files are loaded by AppleDecoding (`AppleDecodingConfiguration`).
public struct DecodingConfiguration: Sendable, Equatable {
    public var appleRoots: [String] = []
    public var receiptRoots: [String] = []
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environments: [String] = []
    public var strictX509: Bool?
    public var skipLocalVerification: Bool?
    public var v1SharedSecrets: [String] = []
    public var receiptValidation: String?
    /// Both names' values, the newer first.
    public var verifyReceiptURLs: [String] = []
    public var verifyReceiptPassword: String?
    public var excludeOldTransactions: Bool?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        appleRoots = reader.list(.appleRoots)
        receiptRoots = reader.list(.receiptRoots)
        bundleId = reader.trimmed(.bundleId)
        appAppleId = reader.integer(.appAppleId)
        environments = reader.list(.environment)
        strictX509 = reader.boolean(.x509Strict)
        skipLocalVerification = reader.boolean(.skipLocalJWSVerification)
        v1SharedSecrets = reader.list(.v1SharedSecrets)
        receiptValidation = reader.choice(.receiptValidation)
        verifyReceiptURLs = reader.list(.verifyReceiptURLs) + reader.list(.verifyReceiptURL)
        verifyReceiptPassword = reader.trimmed(.verifyReceiptPassword)
        excludeOldTransactions = reader.boolean(.excludeOldTransactions)
    }
}

/// Client credentials at the edge: API keys (as `name=sha256` lists) and end-user token keys.
public struct ClientAuthConfiguration: Sendable, Equatable {
    public var apiKeys = ""
    public var adminKeys = ""
    public var jwtIssuer: String?
    public var jwtAudience: String?
    public var jwtUserClaim = "sub"
    public var jwtLeewaySeconds: Int64 = 0
    public var jwtJWKSFile: String?
    public var jwtPublicKeyFiles: [String] = []
    public var jwtHS256SecretFiles: [String] = []

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        apiKeys = reader.trimmed(.apiKeys) ?? ""
        adminKeys = reader.trimmed(.adminKeys) ?? ""
        jwtIssuer = reader.trimmed(.jwtIssuer)
        jwtAudience = reader.trimmed(.jwtAudience)
        jwtUserClaim = reader.trimmed(.jwtUserClaim) ?? jwtUserClaim
        jwtLeewaySeconds = reader.integer(.jwtLeewaySeconds) ?? jwtLeewaySeconds
        jwtJWKSFile = reader.trimmed(.jwtJWKSFile)
        jwtPublicKeyFiles = reader.list(.jwtPublicKeyFiles)
        jwtHS256SecretFiles = reader.list(.jwtHS256SecretFiles)
    }
}

/// Ingest's access policy: client credentials, Apple's V1 secrets, metrics access, rate limits.
public struct EdgeConfiguration: Sendable, Equatable {
    public var auth = ClientAuthConfiguration()
    public var v1SharedSecrets: [String] = []
    /// Exactly `true` lets ingest start without a V1 secret (anything else keeps refusing).
    public var insecureAcceptV1WithoutSharedSecret = false
    public var metricsAccess = "public"
    public var serviceRatePerSecond: Double?
    public var userRatePerSecond: Double?
    public var adminRatePerSecond: Double?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        auth = ClientAuthConfiguration(&reader)
        v1SharedSecrets = reader.list(.v1SharedSecrets)
        insecureAcceptV1WithoutSharedSecret = reader.trimmed(.insecureAcceptV1WithoutSharedSecret) == "true"
        metricsAccess = reader.choice(.metricsAccess) ?? metricsAccess
        serviceRatePerSecond = reader.decimal(.rateLimitServicePerSecond)
        userRatePerSecond = reader.decimal(.rateLimitUserPerSecond)
        adminRatePerSecond = reader.decimal(.rateLimitAdminPerSecond)
    }
}

/// How `worker consumption` answers Apple's CONSUMPTION_REQUEST.
public struct ConsumptionConfiguration: Sendable, Equatable {
    public var customerConsented: Bool?
    public var grantFullBelowPercent: Int?
    public var declineFromPercent: Int?
    public var declineAfterRefunds: Int?
    public var policyName: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        customerConsented = reader.boolean(.consumptionConsent)
        grantFullBelowPercent = reader.integer(.consumptionGrantFullBelowPercent).map { Int($0) }
        declineFromPercent = reader.integer(.consumptionDeclineFromPercent).map { Int($0) }
        declineAfterRefunds = reader.integer(.consumptionDeclineAfterRefunds).map { Int($0) }
        policyName = reader.text(.consumptionPolicyName)
    }
}

/// Where the App Store Server API is (Apple's unless set: the simulator's in tests) and which key signs for it.
public struct ServerAPIConfiguration: Sendable, Equatable {
    public var productionURL: String?
    public var sandboxURL: String?
    public var keyId: String?

    public init() {}

    public init(_ reader: inout ConfigurationReader) {
        productionURL = reader.text(.apiProductionURL)
        sandboxURL = reader.text(.apiSandboxURL)
        keyId = reader.text(.apiKeyId)
    }
}
