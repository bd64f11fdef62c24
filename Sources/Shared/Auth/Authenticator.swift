import Foundation

/// Turns an `Authorization` header into a principal. Bearer tokens with the shape of a JWT are
/// end-user tokens; anything else is looked up as an API key (service first, then admin: the two
/// rings are separate, a key is in at most one). Pure: the clock is passed in.
public struct Authenticator: Sendable {
    public var apiKeys: APIKeyRing
    public var jwt: JWTVerifier?

    public init(apiKeys: APIKeyRing, jwt: JWTVerifier?) {
        self.apiKeys = apiKeys
        self.jwt = jwt
    }

    public enum Outcome: Sendable, Equatable {
        /// No `Authorization` header.
        case anonymous
        case authenticated(Principal)
        case refused(AuthFailure)
    }

    public func authenticate(authorization: String?, now: Date = Date()) -> Outcome {
        guard let authorization else { return .anonymous }
        let trimmed = authorization.trimmingCharacters(in: .whitespaces)
        // RFC 6750 §2.1: the scheme is case-insensitive.
        guard trimmed.count > 7, trimmed.prefix(7).lowercased() == "bearer " else {
            return .refused(AuthFailure("Authorization must be \"Bearer <API key or token>\""))
        }
        let token = trimmed.dropFirst(7).trimmingCharacters(in: .whitespaces)
        if token.utf8.filter({ $0 == UInt8(ascii: ".") }).count == 2 {
            guard let jwt else { return .refused(AuthFailure("end-user tokens are not configured on this server")) }
            switch jwt.verify(token, now: now) {
            case .success(let user): return .authenticated(.user(id: user))
            case .failure(let failure): return .refused(failure)
            }
        }
        guard let entry = apiKeys.match(token) else { return .refused(AuthFailure("API key not recognised")) }
        switch entry.role {
        case .service: return .authenticated(.service(keyName: entry.name))
        case .admin: return .authenticated(.admin(keyName: entry.name))
        }
    }
}
