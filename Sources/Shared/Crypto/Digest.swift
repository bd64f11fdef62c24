import COpenSSL
import Foundation

/// Message digests used by Apple's formats: SHA-1 (old receipts, iOS 6 transaction receipts,
/// receipt device hashes), SHA-256 (JWS ES256, modern receipts), SHA-384/512 for completeness.
public enum DigestAlgorithm: String, Sendable, CaseIterable {
    case sha1 = "SHA1"
    case sha256 = "SHA256"
    case sha384 = "SHA384"
    case sha512 = "SHA512"

    public var outputLength: Int {
        switch self {
        case .sha1: 20
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }

    /// One-shot digest. It fails only if OpenSSL itself is broken (no default provider),
    /// never because of the input, so it traps rather than making every caller `try`.
    public func hash(_ bytes: some ContiguousBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: outputLength)
        let ok = bytes.withUnsafeBytes { input in
            output.withUnsafeMutableBufferPointer { out in
                EVP_Digest(input.baseAddress, input.count, out.baseAddress, nil, evpMD, nil) == 1
            }
        }
        guard ok else {
            preconditionFailure("OpenSSL \(rawValue) digest failed: \(OpenSSLErrorQueue.drain())")
        }
        return output
    }

    /// The fetched EVP_MD; see `FetchedDigests`.
    var evpMD: OpaquePointer { FetchedDigests.shared.md(for: self) }
}

public enum SHA1 {
    public static func hash(_ bytes: some ContiguousBytes) -> [UInt8] { DigestAlgorithm.sha1.hash(bytes) }
}

public enum SHA256 {
    public static func hash(_ bytes: some ContiguousBytes) -> [UInt8] { DigestAlgorithm.sha256.hash(bytes) }
}

public enum SHA384 {
    public static func hash(_ bytes: some ContiguousBytes) -> [UInt8] { DigestAlgorithm.sha384.hash(bytes) }
}

/// EVP_MD objects fetched once: with OpenSSL 3's legacy `EVP_sha256()` handles every init
/// re-fetches the provider implementation, which costs a lock and a hash lookup per call.
// @unchecked Sendable: the pointers are set once in init, never freed, and fetched EVP_MDs are immutable.
final class FetchedDigests: @unchecked Sendable {
    static let shared = FetchedDigests()

    private let sha1: OpaquePointer
    private let sha256: OpaquePointer
    private let sha384: OpaquePointer
    private let sha512: OpaquePointer

    private init() {
        // Fall back to the legacy handles (implicit fetch) if explicit fetching fails.
        sha1 = EVP_MD_fetch(nil, "SHA1", nil) ?? EVP_sha1()
        sha256 = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()
        sha384 = EVP_MD_fetch(nil, "SHA384", nil) ?? EVP_sha384()
        sha512 = EVP_MD_fetch(nil, "SHA512", nil) ?? EVP_sha512()
        OpenSSLErrorQueue.clear()
    }

    func md(for algorithm: DigestAlgorithm) -> OpaquePointer {
        switch algorithm {
        case .sha1: sha1
        case .sha256: sha256
        case .sha384: sha384
        case .sha512: sha512
        }
    }
}
