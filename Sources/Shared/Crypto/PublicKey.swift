import COpenSSL
import Foundation
import Synchronization

/// A public key (EC P-256/P-384 or RSA) for signature verification.
///
/// Verification never throws: a malformed or wrong signature is simply `false`.
// @unchecked Sendable: the EVP_PKEY is owned, never mutated after init, and OpenSSL 3 allows
// concurrent verify operations on one key (each call uses its own EVP_MD_CTX).
public final class PublicKey: @unchecked Sendable, Hashable, CustomStringConvertible {
    public enum KeyType: Sendable, Hashable {
        case p256
        case p384
        case rsa(bits: Int)
        /// Parsed but not usable for verification here (another curve or algorithm).
        case unsupported(String)

        /// Bytes per ECDSA component (r or s), nil for non-EC keys.
        public var ecdsaComponentLength: Int? {
            switch self {
            case .p256: 32
            case .p384: 48
            default: nil
            }
        }
    }

    let pkey: OpaquePointer
    public let type: KeyType
    /// DER SubjectPublicKeyInfo: the stable identity of the key (compare, pin, export).
    public let spkiDER: [UInt8]
    /// Verify contexts set up once per digest (EVP_PKEY_verify_init + signature digest) and
    /// duplicated for each call: OpenSSL 3.0's EVP_DigestVerifyInit fetches the signature
    /// algorithm and builds a context from scratch every time. Never used directly, only
    /// duplicated (a read), so concurrent verifications stay independent.
    private let verifyContexts = Mutex<[DigestAlgorithm: OpaquePointer]>([:])

    /// Takes ownership of `pkey` (freed on failure too). Pass `spkiDER` when already known:
    /// OpenSSL 3.0's provider encoder (i2d_PUBKEY) costs about 50 µs per key.
    init(taking pkey: OpaquePointer, spkiDER known: [UInt8]? = nil) throws(CryptoError) {
        guard let spki = known ?? OpenSSLBridge.encodeDER({ i2d_PUBKEY(pkey, $0) }) else {
            EVP_PKEY_free(pkey)
            throw .drainingQueue("encode public key as SubjectPublicKeyInfo")
        }
        self.pkey = pkey
        self.spkiDER = spki
        self.type = Self.keyType(of: pkey)
    }

    /// From DER SubjectPublicKeyInfo. EC points are checked to lie on the curve.
    public convenience init(spkiDER: [UInt8]) throws(CryptoError) {
        guard let pkey = OpenSSLBridge.decodeDER(spkiDER, free: { EVP_PKEY_free($0) }, { d2i_PUBKEY(nil, $0, $1) }) else {
            throw .drainingQueue("parse SubjectPublicKeyInfo DER")
        }
        try self.init(taking: pkey, spkiDER: spkiDER)
    }

    /// From PEM `-----BEGIN PUBLIC KEY-----`.
    public convenience init(pem: String) throws(CryptoError) {
        let pkey = OpenSSLBridge.withReadBIO(Array(pem.utf8)) { bio in
            PEM_read_bio_PUBKEY(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let pkey else { throw .drainingQueue("parse PEM public key") }
        try self.init(taking: pkey)
    }

    deinit {
        verifyContexts.withLock { contexts in
            for context in contexts.values { EVP_PKEY_CTX_free(context) }
        }
        EVP_PKEY_free(pkey)
    }

    /// Verifies a signature in the key's native encoding: DER for ECDSA, PKCS#1 v1.5 for RSA.
    /// RSA + `.sha1` covers iOS 6 transaction receipts.
    public func verify(signature: [UInt8], message: some ContiguousBytes, digest: DigestAlgorithm = .sha256) -> Bool {
        guard !signature.isEmpty else { return false }
        if case .unsupported = type { return false }
        return message.withUnsafeBytes { messageBytes in
            signature.withUnsafeBufferPointer { signatureBytes in
                digestVerify(signature: signatureBytes, message: messageBytes, digest: digest)
            }
        }
    }

    public func verify(signature: ECDSASignature, message: some ContiguousBytes, digest: DigestAlgorithm = .sha256) -> Bool {
        guard let length = type.ecdsaComponentLength, signature.componentLength == length else { return false }
        return verify(signature: signature.der, message: message, digest: digest)
    }

    /// Verifies a JWS-style r‖s signature (64 bytes for P-256, 96 for P-384).
    public func verify(rawSignature: [UInt8], message: some ContiguousBytes, digest: DigestAlgorithm = .sha256) -> Bool {
        guard let signature = try? ECDSASignature(raw: rawSignature) else { return false }
        return verify(signature: signature, message: message, digest: digest)
    }

    /// Verifies a JWS-style r‖s signature over prefix ‖ `suffix`, the prefix's digest state
    /// already fed (see `DigestPrefix`): the same verdict as `verify(rawSignature:message:)` of
    /// the whole message with the prefix's digest algorithm.
    public func verify(rawSignature: [UInt8], prefix: DigestPrefix, suffix: some ContiguousBytes) -> Bool {
        guard let signature = try? ECDSASignature(raw: rawSignature),
              let length = type.ecdsaComponentLength, signature.componentLength == length else { return false }
        let der = signature.der
        guard !der.isEmpty, let hashed = prefix.hash(continuing: suffix) else { return false }
        return der.withUnsafeBufferPointer { verifyDigest(signature: $0, hashed: hashed, digest: prefix.algorithm) }
    }

    private func digestVerify(signature: UnsafeBufferPointer<UInt8>, message: UnsafeRawBufferPointer, digest: DigestAlgorithm) -> Bool {
        verifyDigest(signature: signature, hashed: digest.hash(message), digest: digest)
    }

    /// The same verdict as EVP_DigestVerify: the message already hashed, the digest verified with
    /// the digest's identity set on the context (PKCS#1 v1.5 DigestInfo for RSA).
    private func verifyDigest(signature: UnsafeBufferPointer<UInt8>, hashed: [UInt8], digest: DigestAlgorithm) -> Bool {
        // Expected failures leave entries on the thread's error queue; never let them leak.
        defer { OpenSSLErrorQueue.clear() }
        guard let template = verifyContext(digest), let context = EVP_PKEY_CTX_dup(template) else { return false }
        defer { EVP_PKEY_CTX_free(context) }
        return EVP_PKEY_verify(context, signature.baseAddress, signature.count, hashed, hashed.count) == 1
    }

    private func verifyContext(_ digest: DigestAlgorithm) -> OpaquePointer? {
        verifyContexts.withLock { contexts in
            if let ready = contexts[digest] { return ready }
            guard let context = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { return nil }
            guard EVP_PKEY_verify_init(context) == 1, EVP_PKEY_CTX_set_signature_md(context, digest.evpMD) == 1 else {
                EVP_PKEY_CTX_free(context)
                return nil
            }
            contexts[digest] = context
            return context
        }
    }

    public static func == (lhs: PublicKey, rhs: PublicKey) -> Bool { lhs.spkiDER == rhs.spkiDER }
    public func hash(into hasher: inout Hasher) { hasher.combine(spkiDER) }

    public var description: String { "PublicKey(\(type), spki-sha256 \(OpenSSLBridge.hex(SHA256.hash(spkiDER).prefix(8))))" }

    static func keyType(of pkey: OpaquePointer) -> KeyType {
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_EC:
            let curve = groupName(of: pkey) ?? "unknown"
            switch curve {
            case "prime256v1", "P-256": return .p256
            case "secp384r1", "P-384": return .p384
            default: return .unsupported("EC \(curve)")
            }
        case EVP_PKEY_RSA:
            return .rsa(bits: Int(EVP_PKEY_get_bits(pkey)))
        case let id:
            return .unsupported(OBJ_nid2sn(id).map { String(cString: $0) } ?? "NID \(id)")
        }
    }

    static func groupName(of pkey: OpaquePointer) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pkey, &buffer, buffer.count, &length) == 1 else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
