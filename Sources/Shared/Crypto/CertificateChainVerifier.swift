import COpenSSL
import Foundation
import Synchronization

/// Verifies `[leaf, intermediate...]` against configured roots at a given time, the check
/// Apple's libraries apply to a JWS `x5c` (pass x5c without its root: the root is never
/// trusted from the message). Returns the leaf's public key when the chain is valid.
///
/// Successful verifications are cached (see `VerifiedChainCache`): Apple signs with a handful
/// of certificates, and a full check costs about 1 ms (two P-384 signatures, plus ~0.1 ms
/// per certificate parse in OpenSSL 3.0), versus ~50 µs for the ES256 signature itself.
public struct CertificateChainVerifier: Sendable {
    public let trustStore: TrustStore
    private let cache: VerifiedChainCache

    /// - Parameter cacheCapacity: distinct valid chains remembered; 0 disables the cache.
    public init(trustStore: TrustStore, cacheCapacity: Int = 64) {
        self.trustStore = trustStore
        self.cache = VerifiedChainCache(capacity: cacheCapacity)
    }

    public init(trustedRoots: [X509Certificate], cacheCapacity: Int = 64) throws(CryptoError) {
        self.init(trustStore: try TrustStore(roots: trustedRoots), cacheCapacity: cacheCapacity)
    }

    /// - Parameters:
    ///   - chain: leaf first, then intermediates; all are untrusted.
    ///   - date: the verification time (a JWS's `signedDate` when online checks are off).
    ///   - strict: RFC 5280 strict checks (X509_V_FLAG_X509_STRICT). Real Apple chains pass;
    ///     Apple's test PKI lacks key identifiers and needs `strict: false`.
    public func verify(chain: [X509Certificate], at date: Date, strict: Bool = true) -> VerificationResult<PublicKey> {
        guard !chain.isEmpty else { return .invalid(reason: "empty certificate chain") }
        let key = VerifiedChainCache.Key(ders: chain.map(\.der), strict: strict)
        if let leafKey = cache.lookup(key, at: date) { return .valid(leafKey) }
        return verifyWithOpenSSL(chain, key: key, at: date, strict: strict)
    }

    /// The same check from DER certificates (base64-decoded `x5c` entries); a cached chain
    /// skips parsing. A certificate that does not parse makes the chain invalid.
    public func verify(derChain: [[UInt8]], at date: Date, strict: Bool = true) -> VerificationResult<PublicKey> {
        guard !derChain.isEmpty else { return .invalid(reason: "empty certificate chain") }
        let key = VerifiedChainCache.Key(ders: derChain, strict: strict)
        if let leafKey = cache.lookup(key, at: date) { return .valid(leafKey) }
        var chain: [X509Certificate] = []
        for (index, der) in derChain.enumerated() {
            do {
                chain.append(try X509Certificate(der: der))
            } catch {
                return .invalid(reason: "certificate \(index) is not valid X.509: \(error)")
            }
        }
        return verifyWithOpenSSL(chain, key: key, at: date, strict: strict)
    }

    private func verifyWithOpenSSL(_ chain: [X509Certificate], key: VerifiedChainCache.Key, at date: Date, strict: Bool) -> VerificationResult<PublicKey> {
        let leaf = chain[0]
        defer { OpenSSLErrorQueue.clear() }
        guard let context = X509_STORE_CTX_new() else {
            return .invalid(reason: "cannot allocate X509_STORE_CTX: \(OpenSSLErrorQueue.drain())")
        }
        defer { X509_STORE_CTX_free(context) }
        guard let untrusted = storeledger_sk_X509_new_null() else {
            return .invalid(reason: "cannot allocate certificate stack")
        }
        // Shallow stack: the certificates stay owned by `chain`, kept alive below.
        defer { storeledger_sk_X509_free(untrusted) }
        for certificate in chain.dropFirst() where storeledger_sk_X509_push(untrusted, certificate.x509) <= 0 {
            return .invalid(reason: "cannot build certificate stack")
        }
        return withExtendedLifetime(chain) {
            trustStore.withStore { store in
                guard X509_STORE_CTX_init(context, store, leaf.x509, untrusted) == 1,
                      let param = X509_STORE_CTX_get0_param(context) else {
                    return .invalid(reason: "cannot initialise verification: \(OpenSSLErrorQueue.drain())")
                }
                VerificationPolicy(time: date, strict: strict).apply(to: param)
                guard X509_verify_cert(context) == 1 else { return .invalid(reason: Self.failureReason(context)) }
                if let window = Self.validityWindow(context) {
                    cache.insert(key, leafKey: leaf.publicKey, window: window)
                }
                return .valid(leaf.publicKey)
            }
        }
    }

    /// The times at which every certificate of the built chain (root included) is valid, as
    /// OpenSSL checks it: notBefore <= t < notAfter (X509_cmp_time treats equality as past).
    private static func validityWindow(_ context: OpaquePointer) -> Range<time_t>? {
        guard let built = X509_STORE_CTX_get0_chain(context) else { return nil }
        var lower = time_t.min
        var upper = time_t.max
        for index in 0..<storeledger_sk_X509_num(built) {
            guard let x509 = storeledger_sk_X509_value(built, index),
                  let notBefore = OpenSSLBridge.date(X509_get0_notBefore(x509)),
                  let notAfter = OpenSSLBridge.date(X509_get0_notAfter(x509)) else { return nil }
            lower = max(lower, OpenSSLBridge.timeT(notBefore))
            upper = min(upper, OpenSSLBridge.timeT(notAfter))
        }
        return lower < upper ? lower..<upper : nil
    }

    /// OpenSSL's verify error text plus where in the chain it happened.
    static func failureReason(_ context: OpaquePointer) -> String {
        let code = X509_STORE_CTX_get_error(context)
        let text = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
        let depth = X509_STORE_CTX_get_error_depth(context)
        var subject = ""
        if let current = X509_STORE_CTX_get_current_cert(context), let name = X509_get_subject_name(current) {
            let bytes = OpenSSLBridge.collectingBIO { bio in
                X509_NAME_print_ex(bio, name, 0, storeledger_XN_FLAG_ONELINE_UTF8()) >= 0
            }
            subject = bytes.map { ", " + String(decoding: $0, as: UTF8.self) } ?? ""
        }
        return "\(text) (depth \(depth)\(subject))"
    }
}

/// Chains that verified, with the time window in which they stay valid. Sound because, with
/// a fixed trust store and no CRL/OCSP, X509_verify_cert depends on the time only through
/// the certificates' validity periods. Only successes are cached; a lookup outside the
/// window falls through to a full verification (which then reports the real error).
final class VerifiedChainCache: Sendable {
    struct Key: Hashable, Sendable {
        let ders: [[UInt8]]
        let strict: Bool

        // Hash and compare the DER bytes as memory: the synthesized versions go byte by byte.
        func hash(into hasher: inout Hasher) {
            hasher.combine(strict)
            for der in ders { der.withUnsafeBytes { hasher.combine(bytes: $0) } }
        }

        static func == (lhs: Key, rhs: Key) -> Bool {
            guard lhs.strict == rhs.strict, lhs.ders.count == rhs.ders.count else { return false }
            return zip(lhs.ders, rhs.ders).allSatisfy { a, b in
                a.count == b.count && a.withUnsafeBytes { x in
                    b.withUnsafeBytes { y in
                        guard let p = x.baseAddress, let q = y.baseAddress else { return true }  // both empty
                        return memcmp(p, q, x.count) == 0
                    }
                }
            }
        }
    }

    private struct Entry: Sendable {
        let leafKey: PublicKey
        let window: Range<time_t>
    }

    private let capacity: Int
    private let entries = Mutex<[Key: Entry]>([:])

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    func lookup(_ key: Key, at date: Date) -> PublicKey? {
        guard capacity > 0 else { return nil }
        let time = OpenSSLBridge.timeT(date)
        return entries.withLock { entries in
            guard let entry = entries[key], entry.window.contains(time) else { return nil }
            return entry.leafKey
        }
    }

    func insert(_ key: Key, leafKey: PublicKey, window: Range<time_t>) {
        guard capacity > 0 else { return }
        entries.withLock { entries in
            // Apple rotates signing certificates yearly: a full cache means churn or abuse,
            // so start over rather than track recency.
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(leafKey: leafKey, window: window)
        }
    }

    var count: Int { entries.withLock { $0.count } }
}
