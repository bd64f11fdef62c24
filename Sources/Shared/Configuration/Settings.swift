// Every setting StoreLedger reads, in the order of docs/configuration.md. A process reads them
// through `ConfigurationReader`; nothing outside this module names a variable as a literal.
extension Setting {
    // Decoding and verifying Apple inputs.
    public static let appleRoots = Setting("STORELEDGER_APPLE_ROOTS", .list, roles: ProcessRole.appleVerifiers,
                                           doc: "Certificate files trusted for JWS (V2 notifications, signed transactions and renewal info).")
    public static let receiptRoots = Setting("STORELEDGER_RECEIPT_ROOTS", .list, roles: [.decode, .tools],
                                             doc: "Certificate files trusted for PKCS#7 app receipts.")
    public static let bundleId = Setting("STORELEDGER_BUNDLE_ID", .text, roles: ProcessRole.appleVerifiers,
                                         doc: "The app's bundle id: V2 data and receipts for another bundle are refused; put into offer signatures.")
    public static let appAppleId = Setting("STORELEDGER_APP_APPLE_ID", .integer(Int64.min...Int64.max), roles: ProcessRole.appleVerifiers,
                                           doc: "The app's Apple id, required with V2 roots when Production is accepted.")
    public static let environment = Setting("STORELEDGER_ENVIRONMENT", .list, default: "Production,Sandbox", roles: ProcessRole.appleVerifiers,
                                            doc: "Environments accepted (Production, Sandbox, Xcode, LocalTesting).")
    public static let x509Strict = Setting("STORELEDGER_X509_STRICT", .boolean, default: "true", roles: ProcessRole.appleVerifiers,
                                           doc: "X.509 strict mode for JWS and receipt chains; false is refused with Production.")
    public static let skipLocalJWSVerification = Setting("STORELEDGER_SKIP_LOCAL_JWS_VERIFICATION", .boolean, default: "false",
                                                         roles: ProcessRole.appleVerifiers,
                                                         doc: "Accept unsigned Xcode/LocalTesting JWS (only with those environments alone).")
    public static let v1SharedSecrets = Setting("STORELEDGER_V1_SHARED_SECRETS", .list, roles: [.decode, .ingest, .dev], secret: true,
                                                doc: "Apple's V1 shared secrets, checked at the edge and by decode.")
    public static let receiptValidation = Setting("STORELEDGER_RECEIPT_VALIDATION", .choice(["local", "verify-receipt"]), default: "local",
                                                  roles: [.decode], doc: "local (PKCS#7, no network) or verify-receipt (Apple's legacy endpoint).")
    public static let verifyReceiptURLs = Setting("STORELEDGER_VERIFY_RECEIPT_URLS", .list, roles: [.decode],
                                                  doc: "<production URL>,<sandbox URL> of verifyReceipt.")
    public static let verifyReceiptURL = Setting("STORELEDGER_VERIFY_RECEIPT_URL", .list, roles: [.decode],
                                                 doc: "The older name of STORELEDGER_VERIFY_RECEIPT_URLS.")
    public static let verifyReceiptPassword = Setting("STORELEDGER_VERIFY_RECEIPT_PASSWORD", .text, roles: [.decode], secret: true,
                                                      doc: "The password sent to verifyReceipt (default: the first V1 shared secret).")
    public static let excludeOldTransactions = Setting("STORELEDGER_EXCLUDE_OLD_TRANSACTIONS", .boolean, default: "false", roles: [.decode],
                                                       doc: "Send exclude-old-transactions to verifyReceipt.")

    // Credentials and edge limits (ingest).
    public static let insecureAcceptV1WithoutSharedSecret = Setting("STORELEDGER_INSECURE_ACCEPT_V1_WITHOUT_SHARED_SECRET", .boolean,
                                                                    default: "false", roles: [.ingest],
                                                                    doc: "Let ingest start without a V1 shared secret (test setups only).")
    public static let apiKeys = Setting("STORELEDGER_API_KEYS", .list, roles: [.ingest], doc: "Service keys as name=<SHA-256 hex>.")
    public static let adminKeys = Setting("STORELEDGER_ADMIN_KEYS", .list, roles: [.ingest], doc: "Support/operator keys as name=<SHA-256 hex>.")
    public static let jwtIssuer = Setting("STORELEDGER_JWT_ISSUER", .text, roles: [.ingest], doc: "Required iss of end-user tokens.")
    public static let jwtAudience = Setting("STORELEDGER_JWT_AUDIENCE", .text, roles: [.ingest], doc: "Required aud of end-user tokens.")
    public static let jwtUserClaim = Setting("STORELEDGER_JWT_USER_CLAIM", .text, default: "sub", roles: [.ingest], doc: "The claim that names the user.")
    public static let jwtJWKSFile = Setting("STORELEDGER_JWT_JWKS_FILE", .path, roles: [.ingest], doc: "JWKS with ES256 and RS256 keys.")
    public static let jwtPublicKeyFiles = Setting("STORELEDGER_JWT_PUBLIC_KEY_FILES", .list, roles: [.ingest], doc: "PEM public keys.")
    public static let jwtHS256SecretFiles = Setting("STORELEDGER_JWT_HS256_SECRET_FILES", .list, roles: [.ingest],
                                                    doc: "Files holding HS256 secrets (32+ bytes each).")
    public static let jwtLeewaySeconds = Setting("STORELEDGER_JWT_LEEWAY_S", .integer(0...300), default: "0", roles: [.ingest],
                                                 doc: "Clock skew allowed on exp/nbf (0: an expired token is refused at once).")
    public static let metricsAccess = Setting("STORELEDGER_METRICS_ACCESS", .choice(["public", "admin"]), default: "public", roles: [.ingest],
                                              doc: "admin: /metrics needs an admin key.")
    public static let rateLimitServicePerSecond = Setting("STORELEDGER_RATE_LIMIT_SERVICE_PER_S", .decimal(0.01...1_000_000), default: "10000",
                                                          roles: [.ingest], doc: "Requests/s per service key (burst twice that).")
    public static let rateLimitUserPerSecond = Setting("STORELEDGER_RATE_LIMIT_USER_PER_S", .decimal(0.01...1_000_000), default: "20",
                                                       roles: [.ingest], doc: "Requests/s per user.")
    public static let rateLimitAdminPerSecond = Setting("STORELEDGER_RATE_LIMIT_ADMIN_PER_S", .decimal(0.01...1_000_000), default: "50",
                                                        roles: [.ingest], doc: "Requests/s per admin key.")
    public static let maxConnectionsPerAddress = Setting("STORELEDGER_MAX_CONNECTIONS_PER_ADDRESS", .integer(0...100_000), default: "256",
                                                         roles: [.ingest], doc: "Connections one client address may hold.")
    public static let maxConnections = Setting("STORELEDGER_MAX_CONNECTIONS", .integer(64...1_000_000), default: "8192",
                                               roles: [.ingest], doc: "Connections ingest holds in all (256 of them kept for Apple's 17.0.0.0/8).")
    public static let httpIdleTimeoutSeconds = Setting("STORELEDGER_HTTP_IDLE_TIMEOUT_S", .integer(1...3600), default: "10", roles: [.ingest],
                                                       doc: "Idle (and header-pause) timeout of a connection.")
    public static let httpBodyTimeoutSeconds = Setting("STORELEDGER_HTTP_BODY_TIMEOUT_S", .integer(1...3600), default: "30", roles: [.ingest],
                                                       doc: "The longest a request body may take to arrive.")
    public static let kafkaPropertiesFile = Setting("STORELEDGER_KAFKA_PROPERTIES_FILE", .path, roles: ProcessRole.kafkaClients,
                                                    doc: "security.protocol, sasl.*, ssl.* for librdkafka as name=value lines.")
    public static let devAPIKey = Setting("STORELEDGER_DEV_API_KEY", .text, default: "generated", roles: [.dev, .simulator], secret: true,
                                          doc: "storeledger dev: the service key to use instead of a new one.")
    public static let apiKey = Setting("STORELEDGER_API_KEY", .text, roles: [.simulator], secret: true,
                                       doc: "The service key the simulator presents to ingest.")

    // Every process.
    public static let kafkaBootstrapServers = Setting("KAFKA_BOOTSTRAP_SERVERS", .text, flag: "bootstrap", roles: ProcessRole.kafkaClients,
                                                      doc: "Kafka bootstrap list.")
    public static let databaseURL = Setting("DATABASE_URL", .url, flag: "database-url", roles: ProcessRole.databaseClients, secret: true,
                                            doc: "PostgreSQL URL or conninfo string (its password is never printed).")
    public static let logLevel = Setting("STORELEDGER_LOG_LEVEL", .choice(["debug", "info", "warning", "warn", "error"]), default: "info",
                                         roles: ProcessRole.everyProcess.union([.fuzz]), doc: "Lowest level logged (JSON lines on standard error).")
    public static let kafkaSessionTimeoutMs = Setting("STORELEDGER_KAFKA_SESSION_TIMEOUT_MS", .integer(1...3_600_000), default: "10000",
                                                      roles: ProcessRole.kafkaClients.union([.dev]), doc: "Consumer-group session timeout.")
    public static let kafkaFetchWaitMs = Setting("STORELEDGER_KAFKA_FETCH_WAIT_MS", .integer(0...300_000), default: "100",
                                                 roles: ProcessRole.kafkaClients.union([.dev]), doc: "fetch.wait.max.ms.")
    public static let kafkaLingerMs = Setting("STORELEDGER_KAFKA_LINGER_MS", .integer(0...1_000), default: "5",
                                              roles: ProcessRole.kafkaClients.union([.dev]), doc: "Producer linger.ms.")
    public static let port = Setting("STORELEDGER_PORT", .integer(0...65_535), flag: "port", default: "8080", roles: [.ingest],
                                     doc: "Ingest's port.")
    public static let catalog = Setting("STORELEDGER_CATALOG", .path, flag: "catalog", roles: [.classify, .ingest, .replay, .dev, .tools],
                                        doc: "Product catalog JSON.")
    public static let pgConnectTimeoutSeconds = Setting("STORELEDGER_PG_CONNECT_TIMEOUT_S", .integer(2...300), default: "5",
                                                        roles: ProcessRole.databaseClients, doc: "libpq connect_timeout of every connection.")
    public static let pgStatementTimeoutMs = Setting("STORELEDGER_PG_STATEMENT_TIMEOUT_MS", .integer(0...3_600_000), default: "30000",
                                                     roles: ProcessRole.databaseClients, doc: "statement_timeout of every session (0 = none).")
    public static let pgPrepareStatements = Setting("STORELEDGER_PG_PREPARE_STATEMENTS", .boolean, default: "true",
                                                    roles: ProcessRole.databaseClients,
                                                    doc: "Prepare statements a connection runs twice (false behind PgBouncer's transaction mode before 1.21).")

    // The consumer loop.
    public static let loopMaxAttempts = Setting("STORELEDGER_LOOP_MAX_ATTEMPTS", .integer(1...1000), default: "8", roles: ProcessRole.loopMembers,
                                                doc: "Attempts of one retryable record before retry_exhausted.")
    public static let loopBaseBackoffMs = Setting("STORELEDGER_LOOP_BASE_BACKOFF_MS", .integer(1...60_000), default: "100", roles: ProcessRole.loopMembers,
                                                  doc: "Backoff before the second attempt; doubles per attempt.")
    public static let loopMaxBackoffMs = Setting("STORELEDGER_LOOP_MAX_BACKOFF_MS", .integer(1...600_000), default: "10000", roles: ProcessRole.loopMembers,
                                                 doc: "Cap of the backoff.")
    public static let failpoint = Setting("STORELEDGER_FAILPOINT", .list, roles: [.decode, .dedupe, .classify, .membership, .consumption],
                                          doc: "Tests only: crash points of a stage.")
    public static let failpointLog = Setting("STORELEDGER_FAILPOINT_LOG", .path, roles: [.decode, .dedupe, .classify, .membership, .consumption],
                                             doc: "Tests only: each failpoint crash first appends a line to this file.")
    public static let failpointMax = Setting("STORELEDGER_FAILPOINT_MAX", .integer(0...Int64(Int32.max)),
                                             roles: [.decode, .dedupe, .classify, .membership, .consumption],
                                             doc: "Tests only: failpoints stop once the log holds this many crashes.")
    public static let relayCrashFlag = Setting("STORELEDGER_RELAY_CRASH_FLAG", .path, roles: [.relay],
                                               doc: "Tests only: the relay SIGKILLs itself after publishing when this file exists.")
    public static let outboxRetentionHours = Setting("STORELEDGER_OUTBOX_RETENTION_HOURS", .integer(0...87_600), default: "168", roles: [.relay],
                                                     doc: "How long a published membership event stays in the outbox, with its finished webhook deliveries and their attempts; 0 keeps them for ever.")
    public static let webhooks = Setting("STORELEDGER_WEBHOOKS", .path, flag: "webhooks", roles: [.webhooks, .dev],
                                         doc: "Webhook endpoints JSON.")

    // Offers: ingest endpoints and the signer.
    public static let signingKeys = Setting("STORELEDGER_SIGNING_KEYS", .list, flag: "keys", roles: [.signer], secret: true,
                                            doc: "KEYID=/path/AuthKey.p8,...: App Store Connect keys.")
    public static let signingDefaultKeyId = Setting("STORELEDGER_SIGNING_DEFAULT_KEY_ID", .text, flag: "default-key-id", default: "the first key",
                                                    roles: [.signer], doc: "Key used when a request names none.")
    public static let signingIssuerId = Setting("STORELEDGER_SIGNING_ISSUER_ID", .text, flag: "issuer-id", roles: [.signer, .dev],
                                                doc: "App Store Connect issuer id (iss of JWS signatures and API tokens).")
    public static let signerMetricsFile = Setting("STORELEDGER_SIGNER_METRICS_FILE", .path, flag: "metrics-file", roles: [.signer],
                                                  doc: "Where the signer writes its Prometheus metrics.")
    public static let noncesPerHour = Setting("STORELEDGER_NONCES_PER_HOUR", .integer(1...Int64(Int32.max)), default: "1000000", roles: [.signer],
                                              doc: "Sizing of the 24-hour nonce memory.")
    public static let offerSignTimeoutMs = Setting("STORELEDGER_OFFER_SIGN_TIMEOUT_MS", .integer(1...600_000), default: "2000", roles: [.ingest],
                                                   doc: "How long ingest waits for the signer before answering 504.")

    // Talking to Apple (App Store Server API).
    public static let apiProductionURL = Setting("STORELEDGER_API_PRODUCTION_URL", .url, default: "https://api.storekit.apple.com",
                                                 roles: [.recover, .refresh, .support, .doctor, .consumption, .ingest, .tools],
                                                 doc: "Base URL of the App Store Server API for Production.")
    public static let apiSandboxURL = Setting("STORELEDGER_API_SANDBOX_URL", .url, default: "https://api.storekit-sandbox.apple.com",
                                              roles: [.recover, .refresh, .support, .doctor, .consumption, .ingest, .tools],
                                              doc: "Base URL of the App Store Server API for Sandbox.")
    public static let apiKeyId = Setting("STORELEDGER_API_KEY_ID", .text, flag: "key-id", default: "the signer's default key",
                                         roles: [.recover, .refresh, .support, .doctor, .consumption, .ingest, .tools],
                                         doc: "Which of the signer's keys signs API tokens.")
    public static let ingestServerAPI = Setting("STORELEDGER_INGEST_SERVER_API", .choice(["on", "off"]), default: "off", roles: [.ingest],
                                                doc: "on serves ingest's App Store Server API admin routes.")
    public static let consumptionConsent = Setting("STORELEDGER_CONSUMPTION_CONSENT", .boolean, default: "true", roles: [.consumption, .ingest],
                                                   doc: "The app's terms record consent to share consumption data.")
    public static let consumptionGrantFullBelowPercent = Setting("STORELEDGER_CONSUMPTION_GRANT_FULL_BELOW_PERCENT", .integer(0...100), default: "10",
                                                                 roles: [.consumption, .ingest], doc: "Below this share consumed: GRANT_FULL.")
    public static let consumptionDeclineFromPercent = Setting("STORELEDGER_CONSUMPTION_DECLINE_FROM_PERCENT", .integer(0...100), default: "50",
                                                              roles: [.consumption, .ingest], doc: "From this share consumed on: DECLINE.")
    public static let consumptionDeclineAfterRefunds = Setting("STORELEDGER_CONSUMPTION_DECLINE_AFTER_REFUNDS", .integer(0...1000), default: "2",
                                                               roles: [.consumption, .ingest], doc: "A customer with this many refunds gets DECLINE.")
    public static let consumptionPolicyName = Setting("STORELEDGER_CONSUMPTION_POLICY_NAME", .text, default: "ledger-v1", roles: [.consumption, .ingest],
                                                      doc: "Recorded with every answer (at most 64 characters kept).")

    // Tests, benchmarks and tools.
    public static let parentPid = Setting("STORELEDGER_PARENT_PID", .integer(1...Int64(Int32.max)), default: "set by the supervisor",
                                          roles: ProcessRole.everyProcess, doc: "A supervised child stops itself when this pid is gone.")
    public static let pgBin = Setting("STORELEDGER_PG_BIN", .path, roles: [.dev, .bench, .tools], doc: "Where the embedded PostgreSQL's binaries are.")
    public static let ingestURL = Setting("STORELEDGER_INGEST_URL", .url, flag: "ingest", roles: [.simulator], doc: "The running ingest to post to.")
    public static let fixtures = Setting("STORELEDGER_FIXTURES", .path, roles: [.bench], doc: "Folder of Apple's published sample data.")
    public static let benchOnly = Setting("STORELEDGER_BENCH_ONLY", .choice(["notifications", "receipts"]), default: "both", roles: [.bench],
                                          doc: "bench decode: one part alone.")
    public static let benchMembers = Setting("STORELEDGER_BENCH_MEMBERS", .integer(Int64.min...Int64.max), default: "1", roles: [.bench],
                                             doc: "bench pipeline: members per stage (at least 1).")
    public static let benchBatch = Setting("STORELEDGER_BENCH_BATCH", .integer(Int64.min...Int64.max), default: "500", roles: [.bench],
                                           doc: "bench pipeline: records per PostgreSQL transaction.")
    public static let benchConnections = Setting("STORELEDGER_BENCH_CONNECTIONS", .integer(Int64.min...Int64.max), default: "64", roles: [.bench],
                                                 doc: "bench e2e: keep-alive connections of the load client.")
    public static let fuzzFixtures = Setting("STORELEDGER_FUZZ_FIXTURES", .path, roles: [.fuzz], doc: "Fuzz targets: where to find seed inputs.")
    public static let fuzzJWSRoot = Setting("STORELEDGER_FUZZ_JWS_ROOT", .path, roles: [.fuzz], doc: "FuzzJWS: root certificate trusted while fuzzing.")
    public static let fuzzReceiptRoot = Setting("STORELEDGER_FUZZ_RECEIPT_ROOT", .path, roles: [.fuzz],
                                                doc: "FuzzReceipt: root certificate trusted while fuzzing.")
    public static let fuzzWriteSeeds = Setting("STORELEDGER_FUZZ_WRITE_SEEDS", .path, roles: [.fuzz],
                                               doc: "FuzzPipeline: write the synthetic seed corpus to this folder and exit.")
    public static let testWrongRule = Setting("STORELEDGER_TEST_WRONG_RULE", .list, roles: [.dedupe, .classify, .replay],
                                              doc: "Tests only: deliberately wrong rules for the replay tests.")
    public static let codeVersion = Setting("STORELEDGER_CODE_VERSION", .text, default: "the built-in version", roles: [.replay],
                                            doc: "The code version named in compensating entries (at most 100 bytes).")
    public static let home = Setting("HOME", .path, roles: [.simulator], doc: "The simulator's default directory lives under it.")

    /// The one list, in documentation order.
    public static let all: [Setting] = [
        appleRoots, receiptRoots, bundleId, appAppleId, environment, x509Strict, skipLocalJWSVerification, v1SharedSecrets,
        receiptValidation, verifyReceiptURLs, verifyReceiptURL, verifyReceiptPassword, excludeOldTransactions,
        insecureAcceptV1WithoutSharedSecret, apiKeys, adminKeys, jwtIssuer, jwtAudience, jwtUserClaim, jwtJWKSFile, jwtPublicKeyFiles,
        jwtHS256SecretFiles, jwtLeewaySeconds, metricsAccess, rateLimitServicePerSecond, rateLimitUserPerSecond, rateLimitAdminPerSecond,
        maxConnectionsPerAddress, maxConnections, httpIdleTimeoutSeconds, httpBodyTimeoutSeconds, kafkaPropertiesFile, devAPIKey, apiKey,
        kafkaBootstrapServers, databaseURL, logLevel, kafkaSessionTimeoutMs, kafkaFetchWaitMs, kafkaLingerMs, port, catalog,
        pgConnectTimeoutSeconds, pgStatementTimeoutMs, pgPrepareStatements,
        loopMaxAttempts, loopBaseBackoffMs, loopMaxBackoffMs, failpoint, failpointLog, failpointMax, relayCrashFlag, outboxRetentionHours, webhooks,
        signingKeys, signingDefaultKeyId, signingIssuerId, signerMetricsFile, noncesPerHour, offerSignTimeoutMs,
        apiProductionURL, apiSandboxURL, apiKeyId, ingestServerAPI, consumptionConsent, consumptionGrantFullBelowPercent,
        consumptionDeclineFromPercent, consumptionDeclineAfterRefunds, consumptionPolicyName,
        parentPid, pgBin, ingestURL, fixtures, benchOnly, benchMembers, benchBatch, benchConnections, fuzzFixtures, fuzzJWSRoot,
        fuzzReceiptRoot, fuzzWriteSeeds, testWrongRule, codeVersion, home,
    ]

    public static func named(_ name: String) -> Setting? { all.first { $0.name == name } }

    /// Librdkafka security properties come from a family of variables rather than fixed names
    /// (`KAFKA_SSL_CA_LOCATION` -> `ssl.ca.location`).
    public static let kafkaSecurityProtocolVariable = "KAFKA_SECURITY_PROTOCOL"
    public static let kafkaSecurityVariablePrefixes = ["KAFKA_SASL_", "KAFKA_SSL_"]
}
