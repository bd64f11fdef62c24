import COpenSSL
import Foundation

/// The configured trust anchors (Apple Root CA - G3 for JWS, Apple Inc. Root for receipts,
/// the Xcode StoreKit certificate only when configured). Certificates a message carries
/// itself — a JWS `x5c` root, the roots embedded in a receipt — are never trusted.
///
/// Build it once and share it: the roots are parsed and loaded into an X509_STORE once.
// @unchecked Sendable: the X509_STORE is filled in init and only read afterwards; OpenSSL
// locks its lookups, and per-verification settings live on each X509_STORE_CTX, not here.
public final class TrustStore: @unchecked Sendable {
    public let roots: [X509Certificate]
    private let store: OpaquePointer

    public init(roots: [X509Certificate]) throws(CryptoError) {
        guard !roots.isEmpty else { throw CryptoError("a trust store needs at least one root certificate") }
        self.roots = roots
        self.store = try Self.makeStore(roots)
    }

    deinit { X509_STORE_free(store) }

    /// Runs `body` with the shared store; the store must only be read.
    func withStore<R>(_ body: (OpaquePointer) -> R) -> R {
        withExtendedLifetime(self) { body(store) }
    }

    /// A private store whose own parameters carry `policy`, for APIs (CMS_verify) that
    /// build their X509_STORE_CTX internally and so read settings from the store.
    func makeConfiguredStore(_ policy: VerificationPolicy) throws(CryptoError) -> OpaquePointer {
        let store = try Self.makeStore(roots)
        guard let param = X509_STORE_get0_param(store) else {
            X509_STORE_free(store)
            throw .drainingQueue("read trust store parameters")
        }
        policy.apply(to: param)
        return store
    }

    private static func makeStore(_ roots: [X509Certificate]) throws(CryptoError) -> OpaquePointer {
        guard let store = X509_STORE_new() else { throw .drainingQueue("create X509 store") }
        for root in roots where X509_STORE_add_cert(store, root.x509) != 1 {
            X509_STORE_free(store)
            throw .drainingQueue("add trusted root \(root.subjectSummary)")
        }
        return store
    }
}

/// How a chain is checked: at which time, and whether RFC 5280 strict checks apply.
struct VerificationPolicy {
    let time: Date
    let strict: Bool

    func apply(to param: OpaquePointer) {
        // Check at the signing date, not now: old receipts and JWS stay verifiable after
        // their certificates expire (Apple's libraries do the same without online checks).
        X509_VERIFY_PARAM_set_time(param, OpenSSLBridge.timeT(time))
        // Strict mode (X509_V_FLAG_X509_STRICT) rejects, among others, CA/leaf certificates
        // without key identifiers: Apple's published *test* PKI fails it, real Apple chains pass.
        if strict {
            X509_VERIFY_PARAM_set_flags(param, UInt(X509_V_FLAG_X509_STRICT))
        } else {
            X509_VERIFY_PARAM_clear_flags(param, UInt(X509_V_FLAG_X509_STRICT))
        }
        // A chain must end at a configured root: never accept a trusted intermediate as anchor.
        X509_VERIFY_PARAM_clear_flags(param, UInt(X509_V_FLAG_PARTIAL_CHAIN))
        // Apple's certificates carry no extended key usage matching an OpenSSL purpose
        // (`openssl cms -verify -purpose any` is what verifies receipts).
        X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_ANY)
        // Security level 0: pre-2016 receipts are signed and chained with SHA-1 (WWDR G1).
        // OpenSSL 3 rates SHA-1 at under 80 bits, so auth level >= 1 fails them with
        // "CA signature digest algorithm too weak". Trust still comes only from configured roots.
        X509_VERIFY_PARAM_set_auth_level(param, 0)
    }
}
