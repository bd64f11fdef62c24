import Crypto
import Foundation

/// Verification keys for end-user tokens from a JWKS document (RFC 7517) or PEM files. A JWK's
/// public numbers become a SubjectPublicKeyInfo that OpenSSL parses (and checks: EC points must
/// lie on the curve), so no key arithmetic happens here.
public enum JWTKeySource {
    /// Only `kty` EC (`crv` P-256, for ES256) and RSA (for RS256, 2048 bits or more) with `use`
    /// absent or `sig`; other keys in the set are skipped, as RFC 7517 §5 allows.
    public static func jwks(_ data: [UInt8]) throws(AuthConfigurationError) -> [JWTKey] {
        guard data.count <= 1 << 20, let root = jsonObject(data), let keys = root["keys"] as? [[String: Any]] else {
            throw AuthConfigurationError("a JWKS is a JSON object {\"keys\": [...]} of at most 1 MiB")
        }
        var result: [JWTKey] = []
        for jwk in keys {
            if let use = jwk["use"] as? String, use != "sig" { continue }
            let kid = jwk["kid"] as? String
            switch jwk["kty"] as? String {
            case "EC":
                guard jwk["crv"] as? String == "P-256", let x = (jwk["x"] as? String).flatMap(Base64URL.decode),
                      let y = (jwk["y"] as? String).flatMap(Base64URL.decode), x.count == 32, y.count == 32 else { continue }
                // SubjectPublicKeyInfo { id-ecPublicKey, prime256v1 } then the uncompressed point.
                let prefix: [UInt8] = [0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
                                       0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04]
                guard let key = try? PublicKey(spkiDER: prefix + x + y) else {
                    throw AuthConfigurationError("JWKS key \(kid ?? "(no kid)") is not a valid P-256 point")
                }
                result.append(.es256(key, kid: kid))
            case "RSA":
                guard let n = (jwk["n"] as? String).flatMap(Base64URL.decode), let e = (jwk["e"] as? String).flatMap(Base64URL.decode),
                      !n.isEmpty, !e.isEmpty, n.count <= 1024, e.count <= 8 else { continue }
                let rsaPublicKey = DER.sequence(DER.integer(n) + DER.integer(e))
                let algorithm = DER.sequence([0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00])
                let spki = DER.sequence(algorithm + DER.tagged(0x03, [0x00] + rsaPublicKey))
                guard let key = try? PublicKey(spkiDER: spki) else { throw AuthConfigurationError("JWKS key \(kid ?? "(no kid)") is not a valid RSA key") }
                result.append(try rsa(key, kid: kid))
            default:
                continue
            }
        }
        return result
    }

    /// A PEM `PUBLIC KEY`: P-256 verifies ES256, RSA verifies RS256.
    public static func pem(_ text: String, kid: String? = nil) throws(AuthConfigurationError) -> JWTKey {
        guard let key = try? PublicKey(pem: text) else { throw AuthConfigurationError("not a PEM public key (-----BEGIN PUBLIC KEY-----)") }
        switch key.type {
        case .p256: return .es256(key, kid: kid)
        case .rsa: return try rsa(key, kid: kid)
        default: throw AuthConfigurationError("end-user token keys are P-256 (ES256) or RSA (RS256), not \(key.type)")
        }
    }

    private static func rsa(_ key: PublicKey, kid: String?) throws(AuthConfigurationError) -> JWTKey {
        guard case .rsa(let bits) = key.type, bits >= 2048 else { throw AuthConfigurationError("RSA token keys must have at least 2048 bits") }
        return .rs256(key, kid: kid)
    }
}

/// Just enough DER to wrap RSA public numbers.
enum DER {
    static func length(_ count: Int) -> [UInt8] {
        if count < 0x80 { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var rest = count
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    static func tagged(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }
    static func sequence(_ content: [UInt8]) -> [UInt8] { tagged(0x30, content) }

    /// A non-negative INTEGER from big-endian bytes.
    static func integer(_ magnitude: [UInt8]) -> [UInt8] {
        var bytes = Array(magnitude.drop { $0 == 0 })
        if bytes.isEmpty { bytes = [0] }
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return tagged(0x02, bytes)
    }
}
