import Configuration
import Crypto
import Foundation

/// A receipt whose PKCS#7 signature chained to a configured root at its creation date.
public struct VerifiedAppReceipt: Sendable {
    public let receipt: AppReceipt
    /// The certificate that signed the receipt (Apple's "Mac App Store and iTunes Store Receipt
    /// Signing" leaf, or Xcode's StoreKit certificate).
    public let signer: X509Certificate
}

/// Why a receipt was refused. `kind` is the dead-letter kind.
public struct ReceiptFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var kind: String
    public var reason: String
    public init(_ kind: String, _ reason: String) { self.kind = kind; self.reason = reason }
    public var description: String { "\(kind): \(reason)" }

    public static let invalidReceipt = "invalid_receipt"
    public static let verificationFailure = "RECEIPT_VERIFICATION_FAILURE"
    public static let legacyTransactionReceipt = "legacy_transaction_receipt"
    public static let notConfigured = "receipt_roots_not_configured"
    public static let wrongBundle = "INVALID_APP_IDENTIFIER"
}

/// Verifies app receipts locally: PKCS#7 SignedData (DER or BER), signature and signer chain to the
/// configured roots (Apple Inc. Root CA; the Xcode StoreKit certificate only when configured) at the
/// receipt's creation date, since the signing certificates of old receipts have expired.
public struct AppReceiptVerifier: Sendable {
    private let trustStore: TrustStore?
    public let strictChecks: Bool
    /// Accepted bundle ids; empty accepts any (the CLI decoding someone's receipt).
    public let bundleIds: Set<String>
    private let now: @Sendable () -> Date
    private let signerCache = ReceiptSignerCache()
    /// Off: always verify with OpenSSL's CMS_verify (tests compare both paths).
    let fastPath: Bool

    public init(roots: [X509Certificate], bundleIds: Set<String> = [], strictChecks: Bool = true,
                now: @escaping @Sendable () -> Date = { Date() }) throws {
        try self.init(roots: roots, bundleIds: bundleIds, strictChecks: strictChecks, fastPath: true, now: now)
    }

    init(roots: [X509Certificate], bundleIds: Set<String>, strictChecks: Bool, fastPath: Bool,
         now: @escaping @Sendable () -> Date) throws {
        self.fastPath = fastPath
        self.trustStore = roots.isEmpty ? nil : try TrustStore(roots: roots)
        self.bundleIds = bundleIds
        self.strictChecks = strictChecks
        self.now = now
    }

    /// Decodes without verifying (support tooling: show what a refused receipt says).
    public static func decodeUnverified(_ der: [UInt8]) -> Result<AppReceipt, ReceiptFailure> {
        let message: PKCS7SignedData
        do {
            message = try PKCS7SignedData.parse(der: der)
        } catch {
            return .failure(.init(ReceiptFailure.invalidReceipt, "not a PKCS#7 SignedData receipt: \(error.message)"))
        }
        return payload(message)
    }

    public func verify(_ der: [UInt8]) -> Result<VerifiedAppReceipt, ReceiptFailure> {
        if fastPath, let message = SignedReceiptMessage.parse(der) { return verify(message) }
        return verifyWithOpenSSL(der)
    }

    /// The cached-chain path (see `SignedReceiptMessage`): same checks as CMS_verify.
    func verify(_ message: SignedReceiptMessage) -> Result<VerifiedAppReceipt, ReceiptFailure> {
        let parsed: AppReceipt
        switch AppReceipt.parse(payload: message.content) {
        case .success(let value): parsed = value
        case .failure(let failure): return .failure(failure)
        }
        guard let trustStore else {
            return .failure(.init(ReceiptFailure.notConfigured, "no receipt root certificates are configured (\(Setting.receiptRoots))"))
        }
        let date = parsed.creationDateMs.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) } ?? now()
        let key = ReceiptSignerCache.Key(certificates: message.certificates, signerIndex: message.signerIndex, strict: strictChecks)
        let signer: X509Certificate
        if let cached = signerCache.lookup(key, at: date) {
            signer = cached
        } else {
            let certificates: [X509Certificate]
            do {
                certificates = try message.certificates.map { try X509Certificate(der: $0) }
            } catch {
                return .failure(.init(ReceiptFailure.invalidReceipt, "embedded certificate does not parse: \(error)"))
            }
            var untrusted = certificates
            untrusted.remove(at: message.signerIndex)
            switch trustStore.buildPath(leaf: certificates[message.signerIndex], untrusted: untrusted, at: date, strict: strictChecks) {
            case .invalid(let reason):
                return .failure(.init(ReceiptFailure.verificationFailure, "receipt signer does not chain to a configured root at its creation date: \(reason)"))
            case .valid(let path):
                if let refusal = Self.signerRefusal(path) { return .failure(refusal) }
                signer = path.leaf
                signerCache.insert(key, signer: signer, validFrom: path.validFrom, validUntil: path.validUntil)
            }
        }
        if let expected = message.messageDigest, message.digest.hash(message.content) != expected {
            return .failure(.init(ReceiptFailure.verificationFailure, "receipt content does not match its signed digest"))
        }
        guard signer.publicKey.verify(signature: message.signature, message: message.signedBytes, digest: message.digest) else {
            return .failure(.init(ReceiptFailure.verificationFailure, "receipt signature does not verify with its signing certificate"))
        }
        if !bundleIds.isEmpty, !bundleIds.contains(parsed.bundleId) {
            return .failure(.init(ReceiptFailure.wrongBundle, "receipt is for bundle \(parsed.bundleId), not \(bundleIds.sorted().joined(separator: ", "))"))
        }
        return .success(VerifiedAppReceipt(receipt: parsed, signer: signer))
    }

    /// OpenSSL's CMS_verify, for every receipt the fast path does not recognise.
    func verifyWithOpenSSL(_ der: [UInt8]) -> Result<VerifiedAppReceipt, ReceiptFailure> {
        let message: PKCS7SignedData
        do {
            message = try PKCS7SignedData.parse(der: der)
        } catch {
            return .failure(.init(ReceiptFailure.invalidReceipt, "not a PKCS#7 SignedData receipt: \(error.message)"))
        }
        let parsed: AppReceipt
        switch Self.payload(message) {
        case .success(let value): parsed = value
        case .failure(let failure): return .failure(failure)
        }
        guard let trustStore else {
            return .failure(.init(ReceiptFailure.notConfigured, "no receipt root certificates are configured (\(Setting.receiptRoots))"))
        }
        let date = parsed.creationDateMs.map { Date(timeIntervalSince1970: TimeInterval($0) / 1000) } ?? now()
        switch message.verify(trustStore: trustStore, at: date, strict: strictChecks) {
        case .invalid(let reason):
            return .failure(.init(ReceiptFailure.verificationFailure, "receipt signature or chain does not verify at its creation date: \(reason)"))
        case .valid(let signer):
            // CMS_verify checked the chain but not whose certificate signed: build the path again to see.
            let others = message.certificates.filter { $0.der != signer.der }
            switch trustStore.buildPath(leaf: signer, untrusted: others, at: date, strict: strictChecks) {
            case .invalid(let reason):
                return .failure(.init(ReceiptFailure.verificationFailure, "receipt signer does not chain to a configured root at its creation date: \(reason)"))
            case .valid(let path):
                if let refusal = Self.signerRefusal(path) { return .failure(refusal) }
            }
            if !bundleIds.isEmpty, !bundleIds.contains(parsed.bundleId) {
                return .failure(.init(ReceiptFailure.wrongBundle, "receipt is for bundle \(parsed.bundleId), not \(bundleIds.sorted().joined(separator: ", "))"))
            }
            return .success(VerifiedAppReceipt(receipt: parsed, signer: signer))
        }
    }

    /// Apple signs receipts with its receipt-signing certificate (marked `…100.6.11.1`) under its WWDR
    /// intermediate (marked `…100.6.2.1`), as the JWS verifier also requires. A chain to Apple's root
    /// alone is not enough: Apple issues every developer a certificate under that root, and its
    /// holder could sign a receipt of their own. A signer that is itself a configured root (Xcode's
    /// StoreKit certificate, trusted only when configured) stands as it is.
    static func signerRefusal(_ path: CertificatePath) -> ReceiptFailure? {
        guard path.certificates.count > 1 else { return nil }
        guard path.certificates[0].hasExtension(oid: SignedDataVerifier.leafOID) else {
            return .init(ReceiptFailure.verificationFailure, "receipt signer lacks Apple's receipt-signing OID \(SignedDataVerifier.leafOID)")
        }
        guard path.certificates[1].hasExtension(oid: SignedDataVerifier.intermediateOID) else {
            return .init(ReceiptFailure.verificationFailure, "receipt signer's issuer lacks Apple's WWDR OID \(SignedDataVerifier.intermediateOID)")
        }
        return nil
    }

    private static func payload(_ message: PKCS7SignedData) -> Result<AppReceipt, ReceiptFailure> {
        do {
            return .success(try ReceiptPayloadParser.parse(message.content))
        } catch {
            return .failure(.init(ReceiptFailure.invalidReceipt, "receipt payload does not decode: \(error.description)"))
        }
    }

    /// The optional device check: SHA-1(device identifier ‖ opaque value ‖ bundle id DER) must
    /// equal the receipt's hash. `deviceIdentifier` is the 16 bytes of identifierForVendor (iOS)
    /// or the MAC address (macOS).
    public static func matchesDevice(_ receipt: AppReceipt, deviceIdentifier: [UInt8]) -> Bool {
        let digest = SHA1.hash(deviceIdentifier + receipt.opaqueValue + receipt.bundleIdDER)
        return !receipt.sha1Hash.isEmpty && digest == receipt.sha1Hash
    }

    /// identifierForVendor text ("956328D9-CC6A-47F4-BE40-6953FB0AB6C7") as its 16 bytes.
    public static func uuidBytes(_ text: String) -> [UInt8]? {
        guard let uuid = UUID(uuidString: text) else { return nil }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }
}
