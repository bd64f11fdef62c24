import COpenSSL
import Foundation

/// Verifies `[leaf, intermediate...]` against configured roots at a given time, the check
/// Apple's libraries apply to a JWS `x5c` (pass x5c without its root: the root is never
/// trusted from the message). Returns the leaf's public key when the chain is valid.
public struct CertificateChainVerifier: Sendable {
    public let trustStore: TrustStore

    public init(trustStore: TrustStore) {
        self.trustStore = trustStore
    }

    public init(trustedRoots: [X509Certificate]) throws(CryptoError) {
        self.trustStore = try TrustStore(roots: trustedRoots)
    }

    /// - Parameters:
    ///   - chain: leaf first, then intermediates; all are untrusted.
    ///   - date: the verification time (a JWS's `signedDate` when online checks are off).
    ///   - strict: RFC 5280 strict checks (X509_V_FLAG_X509_STRICT). Real Apple chains pass;
    ///     Apple's test PKI lacks key identifiers and needs `strict: false`.
    public func verify(chain: [X509Certificate], at date: Date, strict: Bool = true) -> VerificationResult<PublicKey> {
        guard let leaf = chain.first else { return .invalid(reason: "empty certificate chain") }
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
                if X509_verify_cert(context) == 1 { return .valid(leaf.publicKey) }
                return .invalid(reason: Self.failureReason(context))
            }
        }
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
