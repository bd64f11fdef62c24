import Crypto
import Domain
import Foundation

/// Bearer tokens for the App Store Server API, minted where the In-App Purchase key lives: the
/// signer. An ES256 JWT with header `kid` + `typ: JWT` and claims `iss` (issuer id), `iat`, `exp`
/// (at most 60 minutes later, Apple's limit), `aud: appstoreconnect-v1` and `bid` (bundle id).
/// Pure apart from the signature's random nonce: time is a parameter.
/// https://developer.apple.com/documentation/appstoreserverapi/generating-json-web-tokens-for-api-requests
public enum APITokenMinter {
    public static let audience = "appstoreconnect-v1"
    /// Apple refuses tokens that live longer than an hour.
    public static let maxLifetimeSeconds: Int64 = 3600
    /// Apple's own library mints 5-minute tokens; we use the same unless asked otherwise.
    public static let defaultLifetimeSeconds: Int64 = 300

    public struct Minted: Sendable, Equatable, CustomStringConvertible {
        /// The compact JWT: a secret, never logged.
        public let token: String
        public let keyIdentifier: String
        public let issuedAt: Int64
        public let expiresAt: Int64
        public var description: String { "APIToken(<redacted>, kid \(keyIdentifier), exp \(expiresAt))" }
    }

    public static func mint(key: P256PrivateKey, keyId: String, issuerId: String, bundleId: String,
                            issuedAt: Int64, lifetimeSeconds: Int64 = defaultLifetimeSeconds) throws(SignerError) -> Minted {
        guard !keyId.isEmpty, !issuerId.isEmpty, !bundleId.isEmpty else {
            throw .refused("an API token needs a key id, an issuer id and a bundle id")
        }
        guard (1...maxLifetimeSeconds).contains(lifetimeSeconds) else {
            throw .refused("API token lifetime \(lifetimeSeconds) s is outside 1...\(maxLifetimeSeconds) s")
        }
        let (expiresAt, overflow) = issuedAt.addingReportingOverflow(lifetimeSeconds)
        guard !overflow, issuedAt >= 0 else { throw .refused("API token issue time \(issuedAt) is out of range") }
        let claims: [String: Any] = ["iss": issuerId, "iat": issuedAt, "exp": expiresAt, "aud": audience, "bid": bundleId]
        do {
            let token = try JWSSigner.signES256(header: ["kid": keyId, "typ": "JWT"], payload: claims, key: key)
            return Minted(token: token, keyIdentifier: keyId, issuedAt: issuedAt, expiresAt: expiresAt)
        } catch {
            throw .signing("API token: \(error)")
        }
    }
}

/// The signer's answer to API token requests: the key ring's key for the id (or the default),
/// the configured issuer id, the injected clock.
public struct APITokenIssuer: Sendable {
    public let keys: SigningKeyRing
    public let issuerId: String
    private let clock: @Sendable () -> Int64

    /// - Parameter clock: seconds since 1970.
    public init(keys: SigningKeyRing, issuerId: String, clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        self.keys = keys
        self.issuerId = issuerId
        self.clock = clock
    }

    public func mint(bundleId: String, keyId: String? = nil,
                     lifetimeSeconds: Int64 = APITokenMinter.defaultLifetimeSeconds) throws(SignerError) -> APITokenMinter.Minted {
        guard let (id, key) = keys.key(keyId) else { throw .refused("unknown key id \(keyId ?? "")") }
        return try APITokenMinter.mint(key: key, keyId: id, issuerId: issuerId, bundleId: bundleId, issuedAt: clock(),
                                       lifetimeSeconds: lifetimeSeconds)
    }
}

extension APITokenIssuer {
    /// Answers one API token request: mint, then seal the token to the request's one-time key so
    /// the reply record never holds it in clear. Refusals are replies too, so no requester waits in vain.
    public func answer(_ request: APITokenRequest) -> APITokenReply {
        func refuse(_ reason: String) -> APITokenReply { APITokenReply(correlationId: request.correlationId, status: .refused, reason: reason) }
        guard request.kind == APITokenRequest.kindValue else { return refuse("not an api-token request") }
        guard clock().multipliedReportingOverflow(by: 1000).partialValue <= request.deadlineMs else { return refuse("deadline passed") }
        guard request.replyKey.utf8.count <= 1024, let der = Base64.decode(request.replyKey),
              let replyKey = try? PublicKey(spkiDER: der), replyKey.type == .p256 else {
            return refuse("replyKey is not a base64 EC P-256 SubjectPublicKeyInfo")
        }
        do {
            let minted = try mint(bundleId: request.bundleId, keyId: request.keyId,
                                  lifetimeSeconds: request.lifetimeSeconds ?? APITokenMinter.defaultLifetimeSeconds)
            let sealed = try SealedBox.seal(Array(minted.token.utf8), to: replyKey, context: request.sealingContext)
            return APITokenReply(correlationId: request.correlationId, status: .issued, keyIdentifier: minted.keyIdentifier,
                                 expiresAt: minted.expiresAt, sealedToken: Base64.encode(sealed))
        } catch let error as SignerError {
            return refuse(error.description)
        } catch {
            // CryptoError carries OpenSSL's reason strings only, never key or token bytes.
            return refuse("sealing failed: \(error)")
        }
    }
}
