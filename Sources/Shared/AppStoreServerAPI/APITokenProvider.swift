import Foundation
import Synchronization

/// A bearer token for the App Store Server API (an ES256 JWT). The In-App Purchase key stays in
/// the signer process: implementations ask the signer, they never hold the key
/// (docs/app-store-server-api.md).
public struct APIToken: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The compact JWT. A secret: never log it, never put it in a topic or a table.
    public let value: String
    /// `exp` in seconds since 1970.
    public let expiresAt: Int64

    public init(value: String, expiresAt: Int64) {
        self.value = value
        self.expiresAt = expiresAt
    }

    public var description: String { "APIToken(<redacted>, expires \(expiresAt))" }
    public var debugDescription: String { description }
}

public protocol APITokenProvider: Sendable {
    /// A token valid for at least a little while, or why none could be had (never the token itself).
    func token() -> Result<APIToken, APIFailure>
    /// Apple answered 401 to `token`: a cached copy must not be offered again.
    func refused(_ token: APIToken)
}

extension APITokenProvider {
    public func refused(_ token: APIToken) {}
}

/// Reuses a token until shortly before it expires, so a burst of calls costs one round trip to
/// the signer. Time is injected.
public final class CachingTokenProvider: APITokenProvider {
    private let fetch: @Sendable () -> Result<APIToken, APIFailure>
    private let now: @Sendable () -> Date
    /// A token is renewed this long before its `exp`, so a request in flight never carries a stale one.
    private let renewBefore: TimeInterval
    private let cached = Mutex<APIToken?>(nil)

    public init(renewBefore: TimeInterval = 60, now: @escaping @Sendable () -> Date = { Date() },
                fetch: @escaping @Sendable () -> Result<APIToken, APIFailure>) {
        self.fetch = fetch
        self.now = now
        self.renewBefore = renewBefore
    }

    public func token() -> Result<APIToken, APIFailure> {
        let current = now().timeIntervalSince1970
        if let token = cached.withLock({ $0 }), Double(token.expiresAt) - renewBefore > current { return .success(token) }
        let fresh = fetch()
        if case .success(let token) = fresh { cached.withLock { $0 = token } }
        return fresh
    }

    public func refused(_ token: APIToken) {
        cached.withLock { if $0?.value == token.value { $0 = nil } }
    }
}
