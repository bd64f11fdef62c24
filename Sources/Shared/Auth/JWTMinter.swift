import Crypto
import Foundation

/// Issues HS256 end-user tokens: `storeledger dev` prints one for a demo user, and tests use it.
/// Production tokens come from the company's own login service; StoreLedger only verifies them.
public enum JWTMinter {
    public static func hs256(secret: [UInt8], issuer: String, audience: String, subject: String, userClaim: String = "sub",
                             issuedAt: Date = Date(), lifetime: TimeInterval = 3600, extra: [String: Any] = [:]) -> String {
        var claims: [String: Any] = ["iss": issuer, "aud": audience, "iat": Int64(issuedAt.timeIntervalSince1970),
                                     "nbf": Int64(issuedAt.timeIntervalSince1970), "exp": Int64(issuedAt.timeIntervalSince1970 + lifetime)]
        claims[userClaim] = subject
        claims.merge(extra) { $1 }
        let header = Base64URL.encode(json(["alg": "HS256", "typ": "JWT"]))
        let payload = Base64URL.encode(json(claims))
        let signature = HMAC.sha256(key: secret, message: Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        [UInt8]((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }
}
