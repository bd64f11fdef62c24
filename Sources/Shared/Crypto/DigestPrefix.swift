import COpenSSL
import Foundation

/// A digest state already fed with bytes that many messages start with, so each message hashes
/// only what follows them. A JWS header (`alg` plus three certificates, ~5.5 KB of base64url) is
/// the same in millions of App Store JWS: its `BASE64URL(header) "."` is hashed once here, and each
/// signing input then costs a copy of this state (EVP_MD_CTX_copy_ex) and the payload's bytes.
// @unchecked Sendable: the prepared context is updated only in init; afterwards it is only the
// source of EVP_MD_CTX_copy_ex (a read), so concurrent use from several threads is safe.
public final class DigestPrefix: @unchecked Sendable {
    public let algorithm: DigestAlgorithm
    private let prepared: OpaquePointer

    /// Nil only if OpenSSL cannot set up the digest (no default provider): callers then hash whole messages.
    public init?(_ algorithm: DigestAlgorithm, prefix: some ContiguousBytes) {
        guard let context = EVP_MD_CTX_new() else { return nil }
        let ready = prefix.withUnsafeBytes { bytes in
            EVP_DigestInit_ex2(context, algorithm.evpMD, nil) == 1 && EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) == 1
        }
        guard ready else {
            EVP_MD_CTX_free(context)
            OpenSSLErrorQueue.clear()
            return nil
        }
        self.algorithm = algorithm
        self.prepared = context
    }

    deinit { EVP_MD_CTX_free(prepared) }

    /// The digest of prefix ‖ `suffix`: the same bytes as `algorithm.hash(prefix + suffix)`.
    public func hash(continuing suffix: some ContiguousBytes) -> [UInt8]? {
        guard let context = EVP_MD_CTX_new() else { return nil }
        defer { EVP_MD_CTX_free(context) }
        var output = [UInt8](repeating: 0, count: algorithm.outputLength)
        let ok = suffix.withUnsafeBytes { bytes in
            output.withUnsafeMutableBufferPointer { out in
                EVP_MD_CTX_copy_ex(context, prepared) == 1
                    && EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) == 1
                    && EVP_DigestFinal_ex(context, out.baseAddress, nil) == 1
            }
        }
        guard ok else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return output
    }
}
