import COpenSSL
import Foundation

/// A chain OpenSSL built and verified, leaf first, configured root last.
///
/// Apple's `SignedDataVerifier` checks its OIDs on the *built* chain (`get_verified_chain()[0]`
/// and `[1]`), not on what the message claims to be the intermediate, so callers that mirror
/// it need the path itself, not only the leaf key.
public struct CertificatePath: Sendable {
    public let certificates: [X509Certificate]
    /// Every certificate of the path is valid at t when `validFrom <= t < validUntil`
    /// (OpenSSL treats notAfter itself as expired).
    public let validFrom: Date
    public let validUntil: Date

    public var leaf: X509Certificate { certificates[0] }
}

extension TrustStore {
    /// Builds and verifies a path from `leaf` through `untrusted` to one of this store's roots at
    /// `date`, with the same policy as `CertificateChainVerifier` (no partial chains, purpose any,
    /// optional RFC 5280 strict mode). Not cached: callers cache what they derive from the path.
    public func buildPath(leaf: X509Certificate, untrusted: [X509Certificate], at date: Date,
                          strict: Bool = true) -> VerificationResult<CertificatePath> {
        defer { OpenSSLErrorQueue.clear() }
        guard let context = X509_STORE_CTX_new() else {
            return .invalid(reason: "cannot allocate X509_STORE_CTX: \(OpenSSLErrorQueue.drain())")
        }
        defer { X509_STORE_CTX_free(context) }
        guard let stack = storeledger_sk_X509_new_null() else { return .invalid(reason: "cannot allocate certificate stack") }
        // Shallow stack: the certificates stay owned by `untrusted`, kept alive below.
        defer { storeledger_sk_X509_free(stack) }
        for certificate in untrusted where storeledger_sk_X509_push(stack, certificate.x509) <= 0 {
            return .invalid(reason: "cannot build certificate stack")
        }
        return withExtendedLifetime((leaf, untrusted)) {
            withStore { store in
                guard X509_STORE_CTX_init(context, store, leaf.x509, stack) == 1,
                      let param = X509_STORE_CTX_get0_param(context) else {
                    return .invalid(reason: "cannot initialise verification: \(OpenSSLErrorQueue.drain())")
                }
                VerificationPolicy(time: date, strict: strict).apply(to: param)
                guard X509_verify_cert(context) == 1 else {
                    return .invalid(reason: CertificateChainVerifier.failureReason(context))
                }
                return Self.path(context)
            }
        }
    }

    private static func path(_ context: OpaquePointer) -> VerificationResult<CertificatePath> {
        guard let built = X509_STORE_CTX_get0_chain(context) else { return .invalid(reason: "no verified chain") }
        var certificates: [X509Certificate] = []
        for index in 0..<storeledger_sk_X509_num(built) {
            guard let x509 = storeledger_sk_X509_value(built, index) else { return .invalid(reason: "verified chain has a hole") }
            do {
                certificates.append(try X509Certificate.retaining(x509))
            } catch {
                return .invalid(reason: error.description)
            }
        }
        guard !certificates.isEmpty else { return .invalid(reason: "empty verified chain") }
        let from = certificates.map(\.notBefore).max()!
        let until = certificates.map(\.notAfter).min()!
        return .valid(CertificatePath(certificates: certificates, validFrom: from, validUntil: until))
    }
}
