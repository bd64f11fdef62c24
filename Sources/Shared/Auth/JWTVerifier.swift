import Crypto
import Foundation

/// A key that may verify end-user tokens. The algorithm is fixed by the key, never taken from the
/// token alone: an HS256 token can never be checked against a public key (algorithm confusion),
/// and `none` matches nothing.
public enum JWTKey: Sendable {
    case hs256(secret: [UInt8], kid: String?)
    case es256(PublicKey, kid: String?)
    case rs256(PublicKey, kid: String?)

    var algorithm: String {
        switch self {
        case .hs256: "HS256"
        case .es256: "ES256"
        case .rs256: "RS256"
        }
    }

    var kid: String? {
        switch self {
        case .hs256(_, let kid), .es256(_, let kid), .rs256(_, let kid): kid
        }
    }

    func verifies(_ signingInput: [UInt8], _ signature: [UInt8]) -> Bool {
        switch self {
        case .hs256(let secret, _):
            return constantTimeEqual(HMAC.sha256(key: secret, message: signingInput), signature)
        case .es256(let key, _):
            return signature.count == 64 && key.verify(rawSignature: signature, message: signingInput, digest: .sha256)
        case .rs256(let key, _):
            return key.verify(signature: signature, message: signingInput, digest: .sha256)
        }
    }
}

/// End-user JWTs (RFC 7519) verified by StoreLedger: signature with a configured key, then `iss`,
/// `aud`, `exp` (required) and `nbf`, with a small leeway for clock skew; the user is the string
/// in `userClaim`. Pure apart from the signature check; time is injected.
public struct JWTVerifier: Sendable {
    public var keys: [JWTKey]
    public var issuer: String
    public var audience: String
    public var userClaim: String
    public var leewaySeconds: Int64

    /// A bearer token longer than this is refused unread (headers are small; so are real JWTs).
    public static let maxTokenBytes = 8192
    /// JSON nesting allowed in a token's header or claims.
    static let maxJSONDepth = 8
    /// User ids are identifiers: bounded like every other id that reaches a table.
    public static let maxUserIdBytes = 128

    public init(keys: [JWTKey], issuer: String, audience: String, userClaim: String = "sub", leewaySeconds: Int64 = 0) {
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.userClaim = userClaim
        self.leewaySeconds = leewaySeconds
    }

    /// The user the token speaks for, or why it is refused.
    public func verify(_ token: String, now: Date = Date()) -> Result<String, AuthFailure> {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxTokenBytes else { return .failure(AuthFailure("token is longer than \(Self.maxTokenBytes) bytes")) }
        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else { return .failure(AuthFailure("token is not a compact JWS (three dot-separated segments)")) }
        guard let headerBytes = Base64URL.decode(String(decoding: segments[0], as: UTF8.self)),
              let header = jsonObject(headerBytes),
              let claimBytes = Base64URL.decode(String(decoding: segments[1], as: UTF8.self)),
              let claims = jsonObject(claimBytes),
              let signature = Base64URL.decode(String(decoding: segments[2], as: UTF8.self)) else {
            return .failure(AuthFailure("token segments are not base64url JSON"))
        }
        guard let algorithm = header["alg"] as? String else { return .failure(AuthFailure("token header has no alg")) }
        // RFC 7515 §4.1.11: an extension we do not understand must make the token invalid.
        if header["crit"] != nil { return .failure(AuthFailure("token header has crit extensions, which are not supported")) }
        let kid = header["kid"] as? String
        let candidates = keys.filter { $0.algorithm == algorithm && (kid == nil || $0.kid == nil || $0.kid == kid) }
        guard !candidates.isEmpty else { return .failure(AuthFailure("no configured key verifies \(printable(algorithm)) tokens\(kid == nil ? "" : " with this kid")")) }
        let signingInput = Array(bytes[..<(segments[0].count + 1 + segments[1].count)])
        // Every candidate is tried, so the time taken does not tell which key came closest.
        let verified = candidates.map { $0.verifies(signingInput, signature) }.contains(true)
        guard verified else { return .failure(AuthFailure("token signature does not verify")) }
        return checkClaims(claims, now: now)
    }

    func checkClaims(_ claims: [String: Any], now: Date) -> Result<String, AuthFailure> {
        let nowSeconds = Int64(now.timeIntervalSince1970)
        guard claims["iss"] as? String == issuer else { return .failure(AuthFailure("token issuer is not the configured one")) }
        let audiences: [String] = (claims["aud"] as? String).map { [$0] } ?? (claims["aud"] as? [Any])?.compactMap { $0 as? String } ?? []
        guard audiences.contains(audience) else { return .failure(AuthFailure("token audience does not include the configured one")) }
        guard let exp = numericDate(claims["exp"]) else { return .failure(AuthFailure("token has no numeric exp")) }
        guard nowSeconds < exp.addingReportingOverflow(leewaySeconds).partialValue else { return .failure(AuthFailure("token expired")) }
        if claims["nbf"] != nil {
            guard let nbf = numericDate(claims["nbf"]) else { return .failure(AuthFailure("token nbf is not a number")) }
            guard nowSeconds.addingReportingOverflow(leewaySeconds).partialValue >= nbf else { return .failure(AuthFailure("token is not valid yet (nbf)")) }
        }
        guard let user = claims[userClaim] as? String, !user.isEmpty else {
            return .failure(AuthFailure("token has no string claim \(userClaim) naming the user"))
        }
        guard user.utf8.count <= Self.maxUserIdBytes, user.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F && $0 != "/" }) else {
            return .failure(AuthFailure("token's \(userClaim) is not a user id (at most \(Self.maxUserIdBytes) bytes, no spaces, controls or slashes)"))
        }
        return .success(user)
    }

    /// RFC 7519 NumericDate: seconds since 1970, integral or not; out-of-range values are refused.
    private func numericDate(_ value: Any?) -> Int64? {
        guard let number = value as? NSNumber else { return nil }
        let seconds = number.doubleValue
        guard seconds.isFinite, seconds >= 0, seconds < 1e12 else { return nil }
        return Int64(seconds)
    }
}

/// A JSON object from a token segment, after a depth check (a small token can still nest deep).
func jsonObject(_ bytes: [UInt8]) -> [String: Any]? {
    var depth = 0
    var inString = false
    var escaped = false
    for byte in bytes {
        if inString {
            if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
            continue
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            depth += 1
            if depth > JWTVerifier.maxJSONDepth { return nil }
        case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
        default: break
        }
    }
    return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
}

/// A short, safe rendering of a token-supplied string for a reason text.
func printable(_ text: String) -> String {
    String(text.unicodeScalars.prefix(16).filter { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F }.map(Character.init))
}
