import Crypto
import Domain
import Foundation

/// The requester's half of an API token exchange with the signer: an `APITokenRequest` carrying a
/// fresh one-time P-256 public key, and the matching private key kept here, in memory only, to
/// open the sealed reply. One instance per request; discard it after `open`.
public struct SignerTokenRequest: Sendable {
    public let request: APITokenRequest
    private let replyKey: P256PrivateKey

    public init(correlationId: String, deadlineMs: Int64, bundleId: String, keyId: String? = nil,
                lifetimeSeconds: Int64? = nil) throws(CryptoError) {
        let key = try P256PrivateKey.generate()
        self.replyKey = key
        self.request = APITokenRequest(correlationId: correlationId, deadlineMs: deadlineMs, bundleId: bundleId, keyId: keyId,
                                       lifetimeSeconds: lifetimeSeconds, replyKey: Base64.encode(key.publicKey.spkiDER))
    }

    /// The token from the signer's reply, or why there is none (never the token or key bytes).
    public func open(_ reply: APITokenReply) -> Result<APIToken, APIFailure> {
        guard reply.correlationId == request.correlationId else {
            return .failure(APIFailure(.noToken, "reply is for another request"))
        }
        guard reply.status == .issued else {
            return .failure(APIFailure(.noToken, "signer refused the API token: \(reply.reason.map { String($0.prefix(200)) } ?? "no reason")"))
        }
        guard let sealed = reply.sealedToken, sealed.utf8.count <= SealedBox.maxBoxBytes * 2, let box = Base64.decode(sealed),
              let expiresAt = reply.expiresAt else {
            return .failure(APIFailure(.noToken, "signer reply has no sealed token"))
        }
        do {
            let token = String(decoding: try SealedBox.open(box, with: replyKey, context: request.sealingContext), as: UTF8.self)
            return .success(APIToken(value: token, expiresAt: expiresAt))
        } catch {
            return .failure(APIFailure(.noToken, "sealed token does not open: \(error)"))
        }
    }
}

/// Tokens from the signer: each fetch sends one request through `exchange` (the Kafka round trip
/// on the sign topics, injected) and opens the sealed reply. Wrap it in `CachingTokenProvider`.
public struct SignerTokenProvider: APITokenProvider {
    let bundleId: String
    let keyId: String?
    let timeoutMs: Int64
    let nowMs: @Sendable () -> Int64
    let newCorrelationId: @Sendable () -> String
    /// Sends the request and waits for its reply (nil: no reply before the deadline).
    let exchange: @Sendable (APITokenRequest) -> APITokenReply?

    public init(bundleId: String, keyId: String? = nil, timeoutMs: Int64 = 5_000,
                nowMs: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) },
                newCorrelationId: @escaping @Sendable () -> String = { UUID().uuidString.lowercased() },
                exchange: @escaping @Sendable (APITokenRequest) -> APITokenReply?) {
        self.bundleId = bundleId
        self.keyId = keyId
        self.timeoutMs = timeoutMs
        self.nowMs = nowMs
        self.newCorrelationId = newCorrelationId
        self.exchange = exchange
    }

    public func token() -> Result<APIToken, APIFailure> {
        let pending: SignerTokenRequest
        do {
            pending = try SignerTokenRequest(correlationId: newCorrelationId(), deadlineMs: nowMs() + timeoutMs, bundleId: bundleId, keyId: keyId)
        } catch {
            return .failure(APIFailure(.noToken, "cannot make a one-time reply key: \(error)"))
        }
        guard let reply = exchange(pending.request) else {
            return .failure(APIFailure(.noToken, "the signer did not answer within \(timeoutMs) ms"))
        }
        return pending.open(reply)
    }
}
