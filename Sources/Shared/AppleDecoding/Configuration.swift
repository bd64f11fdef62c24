import Crypto
import Foundation

/// Everything the decode stage needs to know, validated in one place (STYLE.md: typed config,
/// documented defaults; docs/configuration.md lists the variables). Root certificates are
/// configuration, never compiled in: production points them at Apple's published roots, tests and
/// the simulator at Apple's test CA or a generated chain.
public struct AppleDecodingConfiguration: Sendable {
    /// JWS trust anchors (V2 notifications, signed transactions): Apple Root CA - G3 in production.
    public var appleRoots: [X509Certificate] = []
    /// PKCS#7 receipt trust anchors: Apple Inc. Root CA (plus Xcode's StoreKit certificate for tests).
    public var receiptRoots: [X509Certificate] = []
    public var bundleId: String?
    public var appAppleId: Int64?
    /// Accepted environments, the first being the primary one.
    public var environments: [AppStoreEnvironment] = [.production, .sandbox]
    /// X.509 strict mode (Apple's default). `false` only for Apple's published test chain.
    public var strictX509 = true
    /// Skip JWS verification for Xcode/LocalTesting data; only with those environments alone.
    public var skipLocalVerification = false
    public var v1SharedSecrets: [String] = []
    public var receiptValidation: ReceiptValidation = .local
    public var verifyReceiptProductionURL: URL?
    public var verifyReceiptSandboxURL: URL?
    public var verifyReceiptPassword: String?
    public var excludeOldTransactions = false

    public init() {}

    /// Reads `STORELEDGER_*` variables (see docs/configuration.md). Throws on anything unusable.
    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) throws -> AppleDecodingConfiguration {
        func value(_ name: String) -> String? {
            env[name].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        func list(_ name: String) -> [String] {
            (value(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        var config = AppleDecodingConfiguration()
        config.appleRoots = try list("STORELEDGER_APPLE_ROOTS").map(loadCertificate)
        config.receiptRoots = try list("STORELEDGER_RECEIPT_ROOTS").map(loadCertificate)
        config.bundleId = value("STORELEDGER_BUNDLE_ID")
        if let id = value("STORELEDGER_APP_APPLE_ID") {
            guard let number = Int64(id) else { throw ConfigurationError("STORELEDGER_APP_APPLE_ID must be an integer, got \"\(id)\"") }
            config.appAppleId = number
        }
        let environments = list("STORELEDGER_ENVIRONMENT")
        if !environments.isEmpty {
            config.environments = try environments.map { name in
                guard let environment = AppStoreEnvironment(lenient: name) else {
                    throw ConfigurationError("STORELEDGER_ENVIRONMENT: unknown environment \"\(name)\" (Production, Sandbox, Xcode, LocalTesting)")
                }
                return environment
            }
        }
        if let strict = value("STORELEDGER_X509_STRICT") { config.strictX509 = try flag(strict, "STORELEDGER_X509_STRICT") }
        if let skip = value("STORELEDGER_SKIP_LOCAL_JWS_VERIFICATION") {
            config.skipLocalVerification = try flag(skip, "STORELEDGER_SKIP_LOCAL_JWS_VERIFICATION")
        }
        config.v1SharedSecrets = list("STORELEDGER_V1_SHARED_SECRETS")
        let urls = list("STORELEDGER_VERIFY_RECEIPT_URLS") + list("STORELEDGER_VERIFY_RECEIPT_URL")
        if !urls.isEmpty {
            guard urls.count <= 2, let production = URL(string: urls[0]), let sandbox = URL(string: urls.count == 2 ? urls[1] : urls[0]) else {
                throw ConfigurationError("STORELEDGER_VERIFY_RECEIPT_URLS must be \"<production URL>,<sandbox URL>\"")
            }
            config.verifyReceiptProductionURL = production
            config.verifyReceiptSandboxURL = sandbox
        }
        config.verifyReceiptPassword = value("STORELEDGER_VERIFY_RECEIPT_PASSWORD") ?? config.v1SharedSecrets.first
        if let exclude = value("STORELEDGER_EXCLUDE_OLD_TRANSACTIONS") {
            config.excludeOldTransactions = try flag(exclude, "STORELEDGER_EXCLUDE_OLD_TRANSACTIONS")
        }
        if let mode = value("STORELEDGER_RECEIPT_VALIDATION") {
            guard let parsed = ReceiptValidation(rawValue: mode.lowercased()) else {
                throw ConfigurationError("STORELEDGER_RECEIPT_VALIDATION must be local or verify-receipt, got \"\(mode)\"")
            }
            config.receiptValidation = parsed
        } else if config.verifyReceiptProductionURL != nil, config.receiptRoots.isEmpty {
            config.receiptValidation = .verifyReceipt
        }
        try config.validate()
        return config
    }

    /// Rules that keep a production deployment honest.
    public func validate() throws {
        let production = environments.contains(.production)
        if production, !strictX509 {
            throw ConfigurationError("STORELEDGER_X509_STRICT=false is refused when Production data is accepted: only Apple's test chain needs it")
        }
        if skipLocalVerification, environments.contains(where: { !$0.isLocal }) {
            throw ConfigurationError("STORELEDGER_SKIP_LOCAL_JWS_VERIFICATION is only allowed when STORELEDGER_ENVIRONMENT lists Xcode/LocalTesting alone")
        }
        if !appleRoots.isEmpty, bundleId == nil {
            throw ConfigurationError("STORELEDGER_APPLE_ROOTS is set but STORELEDGER_BUNDLE_ID is not: V2 data is checked against the app's bundle id")
        }
        if !appleRoots.isEmpty, production, appAppleId == nil {
            throw ConfigurationError("STORELEDGER_APP_APPLE_ID is required when Production data is accepted (or set STORELEDGER_ENVIRONMENT=Sandbox)")
        }
        if receiptValidation == .verifyReceipt, verifyReceiptProductionURL == nil {
            throw ConfigurationError("STORELEDGER_RECEIPT_VALIDATION=verify-receipt needs STORELEDGER_VERIFY_RECEIPT_URLS")
        }
    }

    /// The decoder this configuration describes. V2 decoding is on when JWS roots and a bundle id
    /// are set (or local verification is skipped); receipts when roots or verifyReceipt are set.
    public func makeDecoder(now: @escaping @Sendable () -> Date = { Date() }) throws -> AppleInputDecoder {
        var v2: NotificationV2Decoder?
        if let bundleId, !appleRoots.isEmpty || skipLocalVerification {
            v2 = NotificationV2Decoder(verifier: try SignedDataVerifier(
                roots: appleRoots, bundleId: bundleId, appAppleId: appAppleId, environments: environments,
                strictChecks: strictX509, skipLocalVerification: skipLocalVerification, now: now))
        }
        var receipts: ReceiptUploadDecoder?
        let verifier = receiptRoots.isEmpty ? nil
            : try AppReceiptVerifier(roots: receiptRoots, bundleIds: bundleId.map { [$0] } ?? [], strictChecks: strictX509, now: now)
        let client = verifyReceiptProductionURL.map { production in
            VerifyReceiptClient(productionURL: production, sandboxURL: verifyReceiptSandboxURL ?? production,
                                password: verifyReceiptPassword, excludeOldTransactions: excludeOldTransactions)
        }
        if verifier != nil || client != nil {
            receipts = ReceiptUploadDecoder(validation: receiptValidation, verifier: verifier, verifyReceipt: client)
        }
        return AppleInputDecoder(v1: NotificationV1Decoder(sharedSecrets: v1SharedSecrets), v2: v2, receipts: receipts)
    }

    /// DER (`.cer`, `.der`) or PEM (`.pem`, possibly with `openssl x509 -text` output before it).
    public static func loadCertificate(_ path: String) throws -> X509Certificate {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read certificate file \(path)")
        }
        let bytes = [UInt8](data)
        do {
            let text = String(decoding: bytes, as: UTF8.self)
            if text.contains("-----BEGIN CERTIFICATE-----") { return try X509Certificate(pem: text) }
            return try X509Certificate(der: bytes)
        } catch {
            throw ConfigurationError("certificate file \(path) is not a DER or PEM certificate: \(error.message)")
        }
    }

    private static func flag(_ text: String, _ name: String) throws -> Bool {
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ConfigurationError("\(name) must be true or false, got \"\(text)\"")
        }
    }
}
