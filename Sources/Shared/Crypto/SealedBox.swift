import COpenSSL

/// Public-key encryption to a P-256 key (ECIES-style): a fresh ephemeral key per message, ECDH
/// with the recipient's key, HKDF-SHA256 to an AES-256-GCM key, the ephemeral public key and the
/// caller's `context` authenticated. Lets the signer hand a secret (an API token) to exactly the
/// process that asked, through a Kafka topic that then holds only ciphertext: once the requester
/// drops its one-time private key, nobody can read the record.
///
/// Box layout: 2-byte big-endian length of the ephemeral SPKI DER, the DER, a 12-byte nonce, the
/// ciphertext, the 16-byte GCM tag.
public enum SealedBox {
    static let nonceLength = 12
    static let tagLength = 16
    /// Bounds what `open` accepts, so a hostile record cannot make it allocate much.
    public static let maxBoxBytes = 64 * 1024

    public static func seal(_ plaintext: [UInt8], to recipient: PublicKey, context: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard recipient.type == .p256 else { throw CryptoError("sealed box recipient key is not EC P-256") }
        guard plaintext.count <= maxBoxBytes - 256 else { throw CryptoError("sealed box plaintext is too long") }
        let ephemeral = try P256PrivateKey.generate()
        let ephemeralDER = ephemeral.publicKey.spkiDER
        let key = try derivedKey(ephemeral, recipient, salt: ephemeralDER + recipient.spkiDER, context: context)
        let nonce = try SecureRandom.bytes(count: nonceLength)
        let (ciphertext, tag) = try aesGCMSeal(plaintext, key: key, nonce: nonce, aad: ephemeralDER + context)
        return [UInt8(ephemeralDER.count >> 8), UInt8(ephemeralDER.count & 0xFF)] + ephemeralDER + nonce + ciphertext + tag
    }

    /// The plaintext, or an error if the box was not sealed to `key` with this `context` or was altered.
    public static func open(_ box: [UInt8], with key: P256PrivateKey, context: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard box.count <= maxBoxBytes, box.count >= 2 else { throw CryptoError("sealed box has a bad length") }
        let derLength = Int(box[0]) << 8 | Int(box[1])
        guard derLength > 0, box.count >= 2 + derLength + nonceLength + tagLength else { throw CryptoError("sealed box is truncated") }
        let ephemeralDER = Array(box[2..<(2 + derLength)])
        let ephemeral = try PublicKey(spkiDER: ephemeralDER)
        guard ephemeral.type == .p256 else { throw CryptoError("sealed box ephemeral key is not EC P-256") }
        let nonceStart = 2 + derLength
        let nonce = Array(box[nonceStart..<(nonceStart + nonceLength)])
        let ciphertext = Array(box[(nonceStart + nonceLength)..<(box.count - tagLength)])
        let tag = Array(box[(box.count - tagLength)...])
        let aesKey = try derivedKey(key, ephemeral, salt: ephemeralDER + key.publicKey.spkiDER, context: context)
        return try aesGCMOpen(ciphertext, tag: tag, key: aesKey, nonce: nonce, aad: ephemeralDER + context)
    }

    // MARK: - Pieces

    static func derivedKey(_ mine: P256PrivateKey, _ theirs: PublicKey, salt: [UInt8], context: [UInt8]) throws(CryptoError) -> [UInt8] {
        var secret = try ecdh(mine, theirs)
        defer { for index in secret.indices { secret[index] = 0 } }
        return hkdfSHA256(secret: secret, salt: salt, info: Array("storeledger sealed box v1".utf8) + context)
    }

    static func ecdh(_ mine: P256PrivateKey, _ theirs: PublicKey) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new(mine.pkey, nil) else { throw .drainingQueue("create ECDH context") }
        defer { EVP_PKEY_CTX_free(context) }
        var length = 0
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, theirs.pkey) == 1,
              EVP_PKEY_derive(context, nil, &length) == 1, length > 0, length <= 66 else {
            throw .drainingQueue("derive ECDH secret")
        }
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive(context, &secret, &length) == 1 else { throw .drainingQueue("derive ECDH secret") }
        return Array(secret.prefix(length))
    }

    /// RFC 2104 HMAC-SHA256 (keys here are at most 64 bytes... longer ones are hashed first, as the RFC says).
    static func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var block = key.count > 64 ? SHA256.hash(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        let inner = SHA256.hash(block.map { $0 ^ 0x36 } + message)
        return SHA256.hash(block.map { $0 ^ 0x5C } + inner)
    }

    /// RFC 5869 HKDF-SHA256 producing one 32-byte block (the AES-256 key).
    static func hkdfSHA256(secret: [UInt8], salt: [UInt8], info: [UInt8]) -> [UInt8] {
        let prk = hmacSHA256(key: salt, secret)
        return hmacSHA256(key: prk, info + [0x01])
    }

    // EVP_CTRL_GCM_GET_TAG / SET_TAG (0x10 / 0x11 in OpenSSL 3.0's evp.h).
    private static let getTag: Int32 = 0x10
    private static let setTag: Int32 = 0x11

    static func aesGCMSeal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], aad: [UInt8]) throws(CryptoError) -> ([UInt8], [UInt8]) {
        guard let context = EVP_CIPHER_CTX_new() else { throw .drainingQueue("create cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        var tag = [UInt8](repeating: 0, count: tagLength)
        var length: Int32 = 0, final: Int32 = 0
        let ok = EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce) == 1
            && EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1
            && EVP_EncryptUpdate(context, &out, &length, plaintext, Int32(plaintext.count)) == 1
            && out.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(context, $0.baseAddress! + Int(length), &final) } == 1
            && EVP_CIPHER_CTX_ctrl(context, getTag, Int32(tagLength), &tag) == 1
        guard ok else { throw .drainingQueue("AES-256-GCM seal") }
        return (Array(out.prefix(Int(length + final))), tag)
    }

    static func aesGCMOpen(_ ciphertext: [UInt8], tag: [UInt8], key: [UInt8], nonce: [UInt8], aad: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_CIPHER_CTX_new() else { throw .drainingQueue("create cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        defer { OpenSSLErrorQueue.clear() }
        var out = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var tag = tag
        var length: Int32 = 0, final: Int32 = 0
        let ok = EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nonce) == 1
            && EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1
            && EVP_DecryptUpdate(context, &out, &length, ciphertext, Int32(ciphertext.count)) == 1
            && EVP_CIPHER_CTX_ctrl(context, setTag, Int32(tagLength), &tag) == 1
            && out.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(context, $0.baseAddress! + Int(length), &final) } > 0
        guard ok else { throw CryptoError("sealed box does not open with this key and context (altered, or not for us)") }
        return Array(out.prefix(Int(length + final)))
    }
}
