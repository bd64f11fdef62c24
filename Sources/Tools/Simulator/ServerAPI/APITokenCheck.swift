import Crypto
import Foundation

/// What the simulated App Store accepts as a bearer token, as Apple documents it: an ES256 JWT,
/// header `kid` + `typ: JWT`, claims `iss`, `iat`, `exp` (at most an hour after `iat`, not yet
/// passed), `aud: appstoreconnect-v1` and `bid`, signed by the In-App Purchase key whose public
/// half the simulator was configured with (the signer's).
/// https://developer.apple.com/documentation/appstoreserverapi/generating-json-web-tokens-for-api-requests
public struct APITokenPolicy: Sendable {
    public var publicKey: PublicKey
    public var bundleId: String
    /// nil: any key id / issuer id is accepted (the key decides).
    public var keyId: String?
    public var issuerId: String?
    /// Clock difference tolerated for `iat`.
    public var clockSkewSeconds: Int64 = 60

    public init(publicKey: PublicKey, bundleId: String, keyId: String? = nil, issuerId: String? = nil) {
        self.publicKey = publicKey
        self.bundleId = bundleId
        self.keyId = keyId
        self.issuerId = issuerId
    }

    static let maxTokenBytes = 8 * 1024

    /// nil when the `Authorization` header carries an acceptable token, else why not.
    public func problem(authorization: String?, nowSeconds: Int64) -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let token = authorization.dropFirst("Bearer ".count)
        guard token.utf8.count <= Self.maxTokenBytes else { return "token too long" }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2]) else { return "token is not a compact JWS" }
        guard let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimBytes))) as? [String: Any] else {
            return "token header or claims are not JSON objects"
        }
        guard header["alg"] as? String == "ES256" else { return "alg is not ES256" }
        guard header["typ"] as? String == "JWT" else { return "typ is not JWT" }
        guard let kid = header["kid"] as? String, !kid.isEmpty else { return "no kid" }
        if let keyId, kid != keyId { return "unknown kid" }
        guard signature.count == 64,
              publicKey.verify(rawSignature: signature, message: Array("\(parts[0]).\(parts[1])".utf8)) else {
            return "signature does not verify with the configured key"
        }
        guard claims["aud"] as? String == "appstoreconnect-v1" else { return "aud is not appstoreconnect-v1" }
        guard claims["bid"] as? String == bundleId else { return "bid is not \(bundleId)" }
        guard let iss = claims["iss"] as? String, !iss.isEmpty else { return "no iss" }
        if let issuerId, iss != issuerId { return "unknown issuer" }
        guard let iat = (claims["iat"] as? NSNumber)?.int64Value, let exp = (claims["exp"] as? NSNumber)?.int64Value else {
            return "iat and exp must be numbers"
        }
        if iat > nowSeconds + clockSkewSeconds { return "iat is in the future" }
        if exp <= nowSeconds { return "token expired" }
        if exp - iat > 3600 { return "token lives longer than 60 minutes" }
        return nil
    }
}
