import COpenSSL
import Foundation

/// An EC P-256 private key (App Store Connect `.p8` keys): ES256 for JWS and API tokens,
/// ECDSA-SHA256 DER for promotional-offer signatures.
///
/// No description, error or reflection of this type ever contains key bytes.
// @unchecked Sendable: the EVP_PKEY is owned, never mutated after init, and OpenSSL 3 allows
// concurrent signing with one key (each call uses its own EVP_MD_CTX).
public final class P256PrivateKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    // Internal (not private) so SealedBox can derive ECDH secrets; still never exposed outside Crypto.
    let pkey: OpaquePointer
    public let publicKey: PublicKey

    /// Takes ownership of `pkey` (freed on failure too).
    private init(taking pkey: OpaquePointer) throws(CryptoError) {
        guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC, PublicKey.keyType(of: pkey) == .p256 else {
            EVP_PKEY_free(pkey)
            throw CryptoError("private key is not an EC P-256 key")
        }
        // A public-only copy, so the PublicKey never holds private material.
        guard let spki = OpenSSLBridge.encodeDER({ i2d_PUBKEY(pkey, $0) }) else {
            EVP_PKEY_free(pkey)
            throw .drainingQueue("derive public key")
        }
        do {
            publicKey = try PublicKey(spkiDER: spki)
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
    }

    /// From PEM: PKCS#8 `BEGIN PRIVATE KEY` (as in `.p8` files) or SEC1 `BEGIN EC PRIVATE KEY`.
    /// Encrypted keys are refused (no password prompt).
    public convenience init(pem: String) throws(CryptoError) {
        let pkey = OpenSSLBridge.withReadBIO(Array(pem.utf8)) { bio in
            PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let pkey else { throw .drainingQueue("parse PEM private key") }
        try self.init(taking: pkey)
    }

    /// From DER: PKCS#8 PrivateKeyInfo (or SEC1 ECPrivateKey).
    public convenience init(der: [UInt8]) throws(CryptoError) {
        guard let pkey = OpenSSLBridge.decodeDER(der, free: { EVP_PKEY_free($0) }, { d2i_AutoPrivateKey(nil, $0, $1) }) else {
            throw .drainingQueue("parse DER private key")
        }
        try self.init(taking: pkey)
    }

    /// A fresh random key (tests, the local simulator).
    public static func generate() throws(CryptoError) -> P256PrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw .drainingQueue("create EC key generation context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &pkey) == 1, let pkey else {
            throw .drainingQueue("generate EC P-256 key")
        }
        return try P256PrivateKey(taking: pkey)
    }

    deinit { EVP_PKEY_free(pkey) }

    /// ECDSA over SHA-256(message), randomized nonce (so two signatures of one message differ).
    public func sign(_ message: some ContiguousBytes) throws(CryptoError) -> ECDSASignature {
        let der: [UInt8]? = message.withUnsafeBytes { bytes in
            guard let context = EVP_MD_CTX_new() else { return nil }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestSignInit(context, nil, DigestAlgorithm.sha256.evpMD, nil, pkey) == 1 else { return nil }
            let input = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self)
            var length = 0
            guard EVP_DigestSign(context, nil, &length, input, bytes.count) == 1, length > 0 else { return nil }
            var signature = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &signature, &length, input, bytes.count) == 1 else { return nil }
            return Array(signature.prefix(length))
        }
        guard let der else { throw .drainingQueue("sign with EC P-256 key") }
        return try ECDSASignature(der: der, componentLength: 32)
    }

    /// Unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), the `.p8` format. Handle as a secret.
    public func pkcs8PEM() throws(CryptoError) -> String {
        let bytes = OpenSSLBridge.collectingBIO(secure: true) { bio in
            PEM_write_bio_PKCS8PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1
        }
        guard let bytes else { throw .drainingQueue("export private key as PKCS#8 PEM") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Unencrypted PKCS#8 DER. Handle as a secret.
    public func pkcs8DER() throws(CryptoError) -> [UInt8] {
        let bytes = OpenSSLBridge.collectingBIO(secure: true) { bio in
            i2d_PKCS8PrivateKeyInfo_bio(bio, pkey) == 1
        }
        guard let bytes else { throw .drainingQueue("export private key as PKCS#8 DER") }
        return bytes
    }

    public var description: String { "P256PrivateKey(<redacted>, public \(publicKey))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["publicKey": publicKey]) }
}
