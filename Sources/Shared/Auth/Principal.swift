/// Who a request acts as, once its credential checked out (docs/security.md).
public enum Principal: Sendable, Equatable {
    /// The company's backend with a service API key: acts for any of its users.
    case service(keyName: String)
    /// An end user with a JWT StoreLedger verified: acts for that user alone.
    case user(id: String)
    /// Support or an operator with an admin key: support and operator routes, reads of any user.
    case admin(keyName: String)

    /// What the per-credential rate limit counts by; never the secret itself.
    public var rateKey: String {
        switch self {
        case .service(let name): "service:\(name)"
        case .user(let id): "user:\(id)"
        case .admin(let name): "admin:\(name)"
        }
    }

    /// For logs and metrics: the kind only (user ids are personal data, key names are fine).
    public var kind: String {
        switch self {
        case .service: "service"
        case .user: "user"
        case .admin: "admin"
        }
    }
}

/// A refused credential: `reason` goes into the 401's JSON and never repeats the credential.
public struct AuthFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}
