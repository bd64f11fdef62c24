/// App Store Server API token requests and replies, on the same topics as sign requests
/// (`storeledger.offers.sign.requests` / `.replies`, keyed by correlation id) and told apart by
/// `kind: "api-token"`: the signer holds the In-App Purchase key alone and mints the ES256 JWT,
/// the requester calls Apple (docs/app-store-server-api.md).
///
/// The token is a bearer secret and must never sit readable in a topic: the requester sends a
/// one-time P-256 public key (`replyKey`) and the signer seals the token to it (Crypto's
/// `SealedBox`, context = `sealingContext`). Only the requester, which keeps the matching private
/// key in memory for this one request, can open the reply.
public struct APITokenRequest: Codable, Sendable, Equatable {
    public static let kindValue = "api-token"

    /// Always "api-token": the signer dispatches on it.
    public var kind: String
    public var correlationId: String
    /// The requester stops waiting at this time (ms since 1970): the signer drops the request after it.
    public var deadlineMs: Int64
    /// The `bid` claim.
    public var bundleId: String
    /// nil: the signer's default key.
    public var keyId: String?
    /// nil: the signer's default (5 minutes); at most 3600.
    public var lifetimeSeconds: Int64?
    /// Base64 DER SubjectPublicKeyInfo of the requester's one-time EC P-256 key.
    public var replyKey: String

    public init(correlationId: String, deadlineMs: Int64, bundleId: String, keyId: String? = nil, lifetimeSeconds: Int64? = nil,
                replyKey: String) {
        self.kind = Self.kindValue
        self.correlationId = correlationId
        self.deadlineMs = deadlineMs
        self.bundleId = bundleId
        self.keyId = keyId
        self.lifetimeSeconds = lifetimeSeconds
        self.replyKey = replyKey
    }

    /// Binds a sealed token to this request, so a reply cannot be replayed for another one.
    public var sealingContext: [UInt8] { Array("api-token|\(correlationId)|\(bundleId)".utf8) }
}

public struct APITokenReply: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable {
        case issued
        /// Unknown key id, bad reply key, lifetime out of range, deadline passed: `reason` says why.
        case refused
    }

    public static let kindValue = APITokenRequest.kindValue

    public var kind: String
    public var correlationId: String
    public var status: Status
    public var keyIdentifier: String?
    /// The token's `exp`, seconds since 1970.
    public var expiresAt: Int64?
    /// Base64 of the token sealed to the request's `replyKey`. Never the token in clear.
    public var sealedToken: String?
    public var reason: String?

    public init(correlationId: String, status: Status, keyIdentifier: String? = nil, expiresAt: Int64? = nil,
                sealedToken: String? = nil, reason: String? = nil) {
        self.kind = Self.kindValue
        self.correlationId = correlationId
        self.status = status
        self.keyIdentifier = keyIdentifier
        self.expiresAt = expiresAt
        self.sealedToken = sealedToken
        self.reason = reason
    }
}
