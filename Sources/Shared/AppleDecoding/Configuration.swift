import Configuration
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

    /// From the decode settings (`DecodingConfiguration`, docs/configuration.md): loads the
    /// certificates and throws on anything unusable.
    public init(_ settings: DecodingConfiguration) throws {
        appleRoots = try settings.appleRoots.map(Self.loadCertificate)
        receiptRoots = try settings.receiptRoots.map(Self.loadCertificate)
        bundleId = settings.bundleId
        appAppleId = settings.appAppleId
        if !settings.environments.isEmpty {
            environments = try settings.environments.map { name in
                guard let environment = AppStoreEnvironment(lenient: name) else {
                    throw ConfigurationError("\(Setting.environment): unknown environment \"\(name)\" (Production, Sandbox, Xcode, LocalTesting)")
                }
                return environment
            }
        }
        strictX509 = settings.strictX509 ?? strictX509
        skipLocalVerification = settings.skipLocalVerification ?? skipLocalVerification
        v1SharedSecrets = settings.v1SharedSecrets
        let urls = settings.verifyReceiptURLs
        if !urls.isEmpty {
            guard urls.count <= 2, let production = URL(string: urls[0]),
                  let sandbox = URL(string: urls.count == 2 ? urls[1] : Self.sandboxURL(pairedWith: urls[0])) else {
                throw ConfigurationError("\(Setting.verifyReceiptURLs) must be \"<production URL>,<sandbox URL>\"")
            }
            verifyReceiptProductionURL = production
            verifyReceiptSandboxURL = sandbox
        }
        verifyReceiptPassword = settings.verifyReceiptPassword ?? v1SharedSecrets.first
        excludeOldTransactions = settings.excludeOldTransactions ?? excludeOldTransactions
        if let mode = settings.receiptValidation {
            guard let parsed = ReceiptValidation(rawValue: mode.lowercased()) else {
                throw ConfigurationError("\(Setting.receiptValidation) must be local or verify-receipt, got \"\(mode)\"")
            }
            receiptValidation = parsed
        } else if verifyReceiptProductionURL != nil, receiptRoots.isEmpty {
            receiptValidation = .verifyReceipt
        }
        try validate()
    }

    /// The sandbox endpoint when only one URL is given: Apple's own for Apple's production one (a
    /// sandbox receipt's 21007 sent to the same URL again would come back 21007 and be refused);
    /// any other URL (a simulator, a proxy) serves both.
    static func sandboxURL(pairedWith production: String) -> String {
        production == "https://buy.itunes.apple.com/verifyReceipt" ? "https://sandbox.itunes.apple.com/verifyReceipt" : production
    }

    /// Rules that keep a production deployment honest.
    public func validate() throws {
        let production = environments.contains(.production)
        if production, !strictX509 {
            throw ConfigurationError("\(Setting.x509Strict)=false is refused when Production data is accepted: only Apple's test chain needs it")
        }
        if skipLocalVerification, environments.contains(where: { !$0.isLocal }) {
            throw ConfigurationError("\(Setting.skipLocalJWSVerification) is only allowed when \(Setting.environment) lists Xcode/LocalTesting alone")
        }
        if !appleRoots.isEmpty, bundleId == nil {
            throw ConfigurationError("\(Setting.appleRoots) is set but \(Setting.bundleId) is not: V2 data is checked against the app's bundle id")
        }
        if !appleRoots.isEmpty, production, appAppleId == nil {
            throw ConfigurationError("\(Setting.appAppleId) is required when Production data is accepted (or set \(Setting.environment)=Sandbox)")
        }
        if !receiptRoots.isEmpty || verifyReceiptProductionURL != nil, bundleId == nil {
            // Apple signs every app's receipts alike: without the bundle id any app's would be accepted.
            throw ConfigurationError("receipt validation (\(Setting.receiptRoots) or \(Setting.verifyReceiptURLs)) is configured but \(Setting.bundleId) is not: receipts are checked against the app's bundle id")
        }
        if receiptValidation == .verifyReceipt, verifyReceiptProductionURL == nil {
            throw ConfigurationError("\(Setting.receiptValidation)=verify-receipt needs \(Setting.verifyReceiptURLs)")
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
            receipts = ReceiptUploadDecoder(validation: receiptValidation, verifier: verifier, verifyReceipt: client,
                                            bundleIds: bundleId.map { [$0] } ?? [])
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
}
