import Crypto
import Foundation
import Synchronization

/// Apple's environments as its signed payloads spell them (`AppStoreEnvironment`).
public enum AppStoreEnvironment: String, Sendable, CaseIterable, Codable {
    case production = "Production"
    case sandbox = "Sandbox"
    case xcode = "Xcode"
    case localTesting = "LocalTesting"

    /// Accepts Apple's spellings case-insensitively, plus V1's "PROD".
    public init?(lenient text: String) {
        switch text.lowercased() {
        case "production", "prod": self = .production
        case "sandbox": self = .sandbox
        case "xcode": self = .xcode
        case "localtesting", "local-testing", "local_testing": self = .localTesting
        default: return nil
        }
    }

    /// Data that the App Store never signs (Xcode StoreKit testing, local tests).
    public var isLocal: Bool { self == .xcode || self == .localTesting }
}

/// A JWS whose signature, chain and app checks all passed.
public struct VerifiedSignedData {
    public let header: [String: Any]
    let signedPayload: SignedPayload
    /// The environment the payload was accepted for.
    public let environment: AppStoreEnvironment

    /// The fields the decoders read (`V2Facts`), without a dictionary when the payload reader read them.
    var fields: JSONFields { signedPayload.fields }

    /// The whole payload object, for callers that show or search it (the Server API client, the
    /// CLI); parsed again from its bytes on each use when the decoders did not need a dictionary.
    public var payload: [String: Any] { signedPayload.object }
}

/// Verifies App Store signed data (V2 notifications, signed transactions and renewal infos) with
/// the same verdicts as Apple's `SignedDataVerifier` with online checks off:
/// parse (PyJWT's rules) → `x5c` present → `alg` is ES256 → effective date = `signedDate`
/// (else `receiptCreationDate`, else now) → `x5c` has exactly 3 entries → leaf and intermediate
/// (the `x5c` root is ignored) chain to the *configured* roots at that date → the built chain's
/// leaf carries OID 1.2.840.113635.100.6.11.1 and its intermediate 1.2.840.113635.100.6.2.1 →
/// ES256 signature with the leaf's P-256 key → registered JWT claims as PyJWT checks them →
/// bundle id, app Apple id (Production) and environment.
///
/// Differences from Apple's library, on purpose:
/// - Several environments may be accepted (a backend receives Production and Sandbox); the
///   checks run against the payload's environment when it is accepted, else the first one.
///   With one environment the verdicts are Apple's.
/// - Xcode/LocalTesting data is verified like any other (and fails: Xcode signs with a single
///   self-signed certificate) unless `skipLocalVerification` is set, which configuration refuses
///   together with Production.
/// - Verified chains are cached with their validity window (Apple caches only with online checks).
public struct SignedDataVerifier: Sendable {
    public static let leafOID = "1.2.840.113635.100.6.11.1"
    public static let intermediateOID = "1.2.840.113635.100.6.2.1"

    public let bundleId: String
    public let appAppleId: Int64?
    public let environments: [AppStoreEnvironment]
    public let strictChecks: Bool
    public let skipLocalVerification: Bool
    private let trustStore: TrustStore?
    private let cache: VerifiedPathCache
    private let now: @Sendable () -> Date

    /// - Parameters:
    ///   - roots: the trust anchors (Apple Root CA - G3 in production). Empty = nothing verifies
    ///     (`INVALID_CERTIFICATE`, as in Apple's library).
    ///   - environments: accepted environments, the first being the primary.
    ///   - strictChecks: X.509 strict mode, as Apple's library defaults to; Apple's published
    ///     test chain lacks key identifiers and needs `false`.
    public init(roots: [X509Certificate], bundleId: String, appAppleId: Int64?,
                environments: [AppStoreEnvironment], strictChecks: Bool = true,
                skipLocalVerification: Bool = false, cacheCapacity: Int = 64,
                now: @escaping @Sendable () -> Date = { Date() }) throws {
        guard !environments.isEmpty else { throw ConfigurationError("at least one App Store environment must be accepted") }
        if environments.contains(.production), appAppleId == nil {
            throw ConfigurationError("the app's Apple id is required when Production data is accepted")
        }
        if skipLocalVerification, environments.contains(where: { !$0.isLocal }) {
            throw ConfigurationError("skipping signature verification is only allowed when every accepted environment is Xcode or LocalTesting")
        }
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environments = environments
        self.strictChecks = strictChecks
        self.skipLocalVerification = skipLocalVerification
        self.trustStore = roots.isEmpty ? nil : try TrustStore(roots: roots)
        self.cache = VerifiedPathCache(capacity: cacheCapacity)
        self.now = now
    }

    // MARK: - Public checks, one per kind of signed data

    /// A V2 notification's `signedPayload`. The app is identified from `data`, else `summary`,
    /// else `externalPurchaseToken` (environment from the id's SANDBOX prefix), else `appData`.
    public func verifyNotification(_ signedPayload: String) -> Result<VerifiedSignedData, JWSVerificationFailure> {
        decode(signedPayload).flatMap { jws in
            let root = jws.payload.fields
            var bundle: String?, appId: Int64?, environment: String?
            if let data = root.object("data") ?? root.object("summary") {
                bundle = data.string("bundleId")
                appId = data.int64("appAppleId")
                environment = data.string("environment")
            } else if let token = root.object("externalPurchaseToken") {
                bundle = token.string("bundleId")
                appId = token.int64("appAppleId")
                let id = token.string("externalPurchaseId") ?? ""
                environment = id.hasPrefix("SANDBOX") ? AppStoreEnvironment.sandbox.rawValue : AppStoreEnvironment.production.rawValue
            } else if let appData = root.object("appData") {
                bundle = appData.string("bundleId")
                appId = appData.int64("appAppleId")
                environment = appData.string("environment")
            }
            let target = chooseEnvironment(environment)
            if bundle != bundleId || (target == .production && appId != appAppleId) {
                return .failure(.init(.invalidAppIdentifier, "notification is for app \(bundle ?? "<none>") / \(appId.map(String.init) ?? "<none>"), expected \(bundleId)\(target == .production ? " / \(appAppleId.map(String.init) ?? "<none>")" : "")"))
            }
            guard environment == target.rawValue else {
                return .failure(.init(.invalidEnvironment, "notification environment \(environment ?? "<none>") is not accepted (\(environments.map(\.rawValue).joined(separator: ", ")))"))
            }
            return .success(VerifiedSignedData(header: jws.header, signedPayload: jws.payload, environment: target))
        }
    }

    /// A JWS transaction (`signedTransactionInfo`): bundle id, then environment.
    public func verifyTransaction(_ signedTransaction: String) -> Result<VerifiedSignedData, JWSVerificationFailure> {
        decode(signedTransaction).flatMap { jws in
            let fields = jws.payload.fields
            let environment = fields.string("environment")
            let target = chooseEnvironment(environment)
            guard fields.string("bundleId") == bundleId else {
                return .failure(.init(.invalidAppIdentifier, "transaction is for bundle \(fields.string("bundleId") ?? "<none>"), expected \(bundleId)"))
            }
            guard environment == target.rawValue else {
                return .failure(.init(.invalidEnvironment, "transaction environment \(environment ?? "<none>") is not accepted"))
            }
            return .success(VerifiedSignedData(header: jws.header, signedPayload: jws.payload, environment: target))
        }
    }

    /// A JWS renewal info (`signedRenewalInfo`): Apple checks only the environment (it has no bundle id).
    public func verifyRenewalInfo(_ signedRenewalInfo: String) -> Result<VerifiedSignedData, JWSVerificationFailure> {
        decode(signedRenewalInfo).flatMap { jws in
            let environment = jws.payload.fields.string("environment")
            let target = chooseEnvironment(environment)
            guard environment == target.rawValue else {
                return .failure(.init(.invalidEnvironment, "renewal info environment \(environment ?? "<none>") is not accepted"))
            }
            return .success(VerifiedSignedData(header: jws.header, signedPayload: jws.payload, environment: target))
        }
    }

    /// The payload's environment when accepted, else the primary one (whose check then fails).
    private func chooseEnvironment(_ raw: String?) -> AppStoreEnvironment {
        if let raw, let environment = AppStoreEnvironment(rawValue: raw), environments.contains(environment) { return environment }
        return environments[0]
    }

    // MARK: - Signature and chain (Apple's `_decode_signed_object`)

    struct DecodedJWS {
        let header: [String: Any]
        let payload: SignedPayload
    }

    func decode(_ token: String) -> Result<DecodedJWS, JWSVerificationFailure> {
        let jws: CompactJWS
        switch CompactJWS.parse(token) {
        case .success(let parsed): jws = parsed
        case .failure(let failure): return .failure(failure)
        }
        if skipLocalVerification { return .success(DecodedJWS(header: jws.header, payload: jws.payload)) }
        guard let x5c = jws.header["x5c"], !isNull(x5c) else {
            return .failure(.init(.verificationFailure, "JWS header has no x5c certificate chain"))
        }
        // Apple's library takes `len()` of whatever x5c holds: a string or an object has one too, and
        // fails later as a chain of the wrong length or of unreadable certificates; the same verdicts here.
        let count: Int
        switch x5c {
        case let list as [Any]: count = list.count
        case let text as String: count = text.unicodeScalars.count
        case let object as [String: Any]: count = object.count
        default: return .failure(.init(.verificationFailure, "JWS x5c header is not a list"))
        }
        guard count > 0 else { return .failure(.init(.verificationFailure, "JWS x5c header is empty")) }
        guard (jws.header["alg"] as? String) == "ES256" else {
            return .failure(.init(.verificationFailure, "JWS algorithm is not ES256"))
        }
        let effectiveDate: Date
        switch Self.effectiveDate(jws.payload.fields, now: now) {
        case .success(let date): effectiveDate = date
        case .failure(let failure): return .failure(failure)
        }
        guard count == 3 else {
            return .failure(.init(.invalidChainLength, "x5c holds \(count) certificates, expected 3"))
        }
        guard let chain = x5c as? [Any] else {
            return .failure(.init(.invalidCertificate, "JWS x5c header is not a list of certificates"))
        }
        let leafKey: PublicKey
        switch verifiedLeafKey(chain, at: effectiveDate) {
        case .success(let key): leafKey = key
        case .failure(let failure): return .failure(failure)
        }
        guard leafKey.type == .p256 else {
            return .failure(.init(.verificationFailure, "signing certificate key is not EC P-256, as ES256 requires"))
        }
        guard jws.signatureVerifies(with: leafKey) else {
            return .failure(.init(.verificationFailure, "ES256 signature does not verify with the signing certificate"))
        }
        if let problem = Self.claimProblem(jws.payload.fields, now: now()) {
            return .failure(.init(.verificationFailure, problem))
        }
        return .success(DecodedJWS(header: jws.header, payload: jws.payload))
    }

    /// `signedDate` (else `receiptCreationDate`) in ms, floored to seconds as Apple does; now when
    /// neither is present. A value that is not a number is a verification failure.
    static func effectiveDate(_ payload: JSONFields, now: () -> Date) -> Result<Date, JWSVerificationFailure> {
        func present(_ key: String) -> JSONFields.Value? {
            guard let value = payload.value(key) else { return nil }
            if case .null = value { return nil }
            return value
        }
        guard let raw = present("signedDate") ?? present("receiptCreationDate") else { return .success(now()) }
        guard let ms = pythonInt(raw) else {
            return .failure(.init(.verificationFailure, "signedDate is not a number"))
        }
        let (quotient, remainder) = ms.quotientAndRemainder(dividingBy: 1000)
        let seconds = remainder < 0 ? quotient - 1 : quotient
        return .success(Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    /// Python's `int(x)` for JSON values: numbers truncate, integer strings parse, booleans are 0/1.
    static func pythonInt(_ value: JSONFields.Value) -> Int64? {
        switch value {
        case .number(let number):
            if isBool(number) { return (number as Any as? Bool) == true ? 1 : 0 }
            let double = number.doubleValue
            guard double.isFinite, abs(double) < 9.2e18 else { return nil }
            let type = number.objCType.pointee
            let isFloating = number is NSDecimalNumber || type == CChar(UInt8(ascii: "d")) || type == CChar(UInt8(ascii: "f"))
            return isFloating ? Int64(double) : number.int64Value
        case .integer(let integer): return integer
        case .bool(let bool): return bool ? 1 : 0
        case .text(let text): return Int64(text.trimmingCharacters(in: .whitespaces))
        case .null, .list, .object, .other: return nil
        }
    }

    /// PyJWT's checks of registered claims (Apple's payloads carry none of them): iat/nbf not in
    /// the future, exp in the future, no audience (none is expected), sub/jti strings.
    static func claimProblem(_ payload: JSONFields, now: Date) -> String? {
        let current = now.timeIntervalSince1970
        if let iat = payload.value("iat") {
            guard let value = pythonInt(iat) else { return "iat claim is not an integer" }
            if Double(value) > current { return "iat claim is in the future" }
        }
        if let nbf = payload.value("nbf") {
            guard let value = pythonInt(nbf) else { return "nbf claim is not an integer" }
            if Double(value) > current { return "token is not valid yet (nbf)" }
        }
        if let exp = payload.value("exp") {
            guard let value = pythonInt(exp) else { return "exp claim is not an integer" }
            if Double(value) <= current { return "token has expired (exp)" }
        }
        if let aud = payload.value("aud"), pythonTruthy(aud) { return "token names an audience, none is expected" }
        if let sub = payload.value("sub"), !isText(sub) { return "sub claim is not a string" }
        if let jti = payload.value("jti"), !isText(jti) { return "jti claim is not a string" }
        return nil
    }

    private static func isText(_ value: JSONFields.Value) -> Bool {
        if case .text = value { return true }
        return false
    }

    private static func pythonTruthy(_ value: JSONFields.Value) -> Bool {
        switch value {
        case .null: return false
        case .text(let text): return !text.isEmpty
        case .list(let isEmpty): return !isEmpty
        case .object(let object): return !object.isEmpty
        case .number(let number): return number.doubleValue != 0
        case .integer(let integer): return integer != 0
        case .bool(let bool): return bool
        case .other: return true
        }
    }

    /// Leaf key of `x5c[0]` chained through `x5c[1]` to a configured root at `date`, OIDs checked.
    private func verifiedLeafKey(_ chain: [Any], at date: Date) -> Result<PublicKey, JWSVerificationFailure> {
        guard let trustStore else {
            return .failure(.init(.invalidCertificate, "no trusted root certificates are configured"))
        }
        guard let leafText = chain[0] as? String, let intermediateText = chain[1] as? String else {
            return .failure(.init(.invalidCertificate, "x5c entries are not strings"))
        }
        let cacheKey = VerifiedPathCache.Key(leaf: leafText, intermediate: intermediateText, strict: strictChecks)
        if let key = cache.lookup(cacheKey, at: date) { return .success(key) }
        guard let leafDER = strictBase64(leafText), let intermediateDER = strictBase64(intermediateText) else {
            return .failure(.init(.invalidCertificate, "x5c certificate is not valid base64"))
        }
        let leaf: X509Certificate, intermediate: X509Certificate
        do {
            leaf = try X509Certificate(der: leafDER)
            intermediate = try X509Certificate(der: intermediateDER)
        } catch {
            return .failure(.init(.invalidCertificate, "x5c certificate does not parse: \(error.message)"))
        }
        switch trustStore.buildPath(leaf: leaf, untrusted: [intermediate], at: date, strict: strictChecks) {
        case .invalid(let reason):
            return .failure(.init(.verificationFailure, "certificate chain does not verify: \(reason)"))
        case .valid(let path):
            guard path.certificates.count >= 2, path.certificates[0].hasExtension(oid: Self.leafOID) else {
                return .failure(.init(.verificationFailure, "signing certificate lacks Apple's OID \(Self.leafOID)"))
            }
            guard path.certificates[1].hasExtension(oid: Self.intermediateOID) else {
                return .failure(.init(.verificationFailure, "intermediate certificate lacks Apple's OID \(Self.intermediateOID)"))
            }
            cache.insert(cacheKey, leafKey: path.leaf.publicKey, validFrom: path.validFrom, validUntil: path.validUntil)
            return .success(path.leaf.publicKey)
        }
    }

    /// Python's `b64decode(text, validate=True)`: standard alphabet, full padding, no whitespace.
    private func strictBase64(_ text: String) -> [UInt8]? {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count % 4 == 0 else { return nil }
        var seenPadding = 0
        for char in utf8 {
            if char == UInt8(ascii: "=") { seenPadding += 1; continue }
            guard seenPadding == 0 else { return nil }
            switch char {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"): continue
            default: return nil
            }
        }
        guard seenPadding <= 2 else { return nil }
        return Base64.decode(text)
    }
}

/// Chains that verified (OIDs included), with the window in which every certificate of the built
/// path is valid. Sound because, without CRL/OCSP, the verdict for fixed roots depends on the time
/// only through validity periods. Failures are never cached.
final class VerifiedPathCache: Sendable {
    struct Key: Hashable, Sendable {
        let leaf: String
        let intermediate: String
        let strict: Bool

        /// Hashes the lengths and the last bytes of the two base64 texts (their certificates'
        /// signatures, distinct per certificate), not ~3 KB of text per JWS; equality still
        /// compares every byte (and the texts of a cached header are the very same strings).
        func hash(into hasher: inout Hasher) {
            func combine(_ text: String.UTF8View) {
                hasher.combine(text.count)
                let hashed: Void? = text.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: $0.suffix(32)))) }
                if hashed == nil { for byte in text.suffix(32) { hasher.combine(byte) } }
            }
            hasher.combine(strict)
            combine(leaf.utf8)
            combine(intermediate.utf8)
        }
    }

    private struct Entry: Sendable {
        let leafKey: PublicKey
        let validFrom: Date
        let validUntil: Date
    }

    private let capacity: Int
    private let entries = Mutex<[Key: Entry]>([:])

    init(capacity: Int) { self.capacity = max(0, capacity) }

    func lookup(_ key: Key, at date: Date) -> PublicKey? {
        guard capacity > 0 else { return nil }
        return entries.withLock { entries in
            guard let entry = entries[key], entry.validFrom <= date, date < entry.validUntil else { return nil }
            return entry.leafKey
        }
    }

    func insert(_ key: Key, leafKey: PublicKey, validFrom: Date, validUntil: Date) {
        guard capacity > 0 else { return }
        entries.withLock { entries in
            // Apple rotates signing certificates yearly: a full cache means abuse; start over.
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(leafKey: leafKey, validFrom: validFrom, validUntil: validUntil)
        }
    }
}

/// A configuration that cannot work (reported at startup, never per message).
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
