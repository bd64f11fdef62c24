import Configuration
import Crypto
import Foundation
import Runtime
import Synchronization

/// A legacy promotional-offer signature: the four values StoreKit's `SKPaymentDiscount` /
/// `Product.PurchaseOption.promotionalOffer(offerID:keyID:nonce:signature:timestamp:)` needs.
public struct LegacyOfferSignature: Codable, Sendable, Equatable {
    public var keyIdentifier: String
    /// Lowercase UUID.
    public var nonce: String
    /// Milliseconds since 1970; StoreKit accepts the signature for 24 hours after it.
    public var timestamp: Int64
    /// Base64 of the DER-encoded ECDSA P-256 / SHA-256 signature.
    public var signature: String

    public init(keyIdentifier: String, nonce: String, timestamp: Int64, signature: String) {
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.timestamp = timestamp
        self.signature = signature
    }
}

/// A compact JWS for StoreKit (2025): a promotional offer V2 or an introductory-offer eligibility.
public struct SignedJWS: Sendable, Equatable {
    public var keyIdentifier: String
    public var nonce: String
    /// `iat`, in seconds, as Apple's libraries write it.
    public var issuedAt: Int64
    public var jws: String
}

/// Signs promotional offers and eligibility statements with the key ring's keys. Every signature
/// gets a fresh random nonce that the `NonceRegistry` confirms was not issued in the last 24 h.
/// Time and nonces are injected so tests are deterministic.
public struct OfferSigner: Sendable {
    public let keys: SigningKeyRing
    /// App Store Connect issuer id: the JWS `iss` claim (JWS forms only).
    public let issuerId: String?
    public let nonces: NonceRegistry
    private let clock: @Sendable () -> Int64
    private let newNonce: @Sendable () throws -> UUID

    /// Audiences StoreKit checks (Apple: "Generating JWS to sign App Store requests").
    public static let promotionalOfferAudience = "promotional-offer"
    public static let introductoryOfferEligibilityAudience = "introductory-offer-eligibility"
    /// How many redraws before giving up: only reachable with a broken random source or a
    /// registry loaded far past its sizing.
    static let nonceAttempts = 8

    public init(keys: SigningKeyRing, issuerId: String? = nil, nonces: NonceRegistry = NonceRegistry(),
                clock: @escaping @Sendable () -> Int64 = currentTimeMs,
                newNonce: @escaping @Sendable () throws -> UUID = OfferSigner.randomNonce) {
        self.keys = keys
        self.issuerId = issuerId
        self.nonces = nonces
        self.clock = clock
        self.newNonce = newNonce
    }

    /// A version 4 UUID from OpenSSL's CSPRNG, drawn 4 KiB at a time (one RAND_bytes call per 256
    /// nonces instead of per nonce: it is the costliest step after the ECDSA itself).
    @Sendable public static func randomNonce() throws -> UUID {
        let bytes = try RandomPool.shared.next16()
        return UUID(uuid: (bytes.0, bytes.1, bytes.2, bytes.3, bytes.4, bytes.5, bytes.6 & 0x0F | 0x40, bytes.7,
                           bytes.8 & 0x3F | 0x80, bytes.9, bytes.10, bytes.11, bytes.12, bytes.13, bytes.14, bytes.15))
    }

    /// The legacy signature (R9), with a fresh nonce and the current time.
    public func signLegacy(bundleId: String, keyId: String? = nil, productId: String, offerId: String,
                           applicationUsername: String) throws(SignerError) -> LegacyOfferSignature {
        try requireFields(["bundleId": bundleId, "productId": productId, "offerId": offerId])
        let (id, key) = try key(keyId)
        let now = clock()
        let nonce = try freshNonce(nowMs: now)
        let payload = PromotionalOfferPayload(bundleId: bundleId, keyIdentifier: id, productIdentifier: productId,
                                              offerIdentifier: offerId, applicationUsername: applicationUsername,
                                              nonce: nonce, timestampMs: now)
        return try Self.sign(payload, key: key)
    }

    /// Signs a payload as given (operators' `storeledger offer sign`, tests): no registry involved.
    public static func sign(_ payload: PromotionalOfferPayload, key: P256PrivateKey) throws(SignerError) -> LegacyOfferSignature {
        do {
            let signature = try key.sign(payload.bytes)
            return LegacyOfferSignature(keyIdentifier: payload.keyIdentifier, nonce: payload.nonce.lowercased(),
                                        timestamp: payload.timestampMs, signature: Base64.encode(signature.der))
        } catch {
            throw .signing(error.message)
        }
    }

    /// Promotional offer V2 JWS: `aud = promotional-offer`, `productId`, `offerIdentifier`,
    /// optional `transactionId`.
    public func signPromotionalOfferJWS(bundleId: String, keyId: String? = nil, productId: String, offerId: String,
                                        transactionId: String?) throws(SignerError) -> SignedJWS {
        try requireFields(["bundleId": bundleId, "productId": productId, "offerId": offerId])
        var claims: [String: Any] = ["productId": productId, "offerIdentifier": offerId]
        if let transactionId, !transactionId.isEmpty { claims["transactionId"] = transactionId }
        return try signJWS(audience: Self.promotionalOfferAudience, bundleId: bundleId, keyId: keyId, claims: claims)
    }

    /// Introductory-offer eligibility JWS: `aud = introductory-offer-eligibility`,
    /// `allowIntroductoryOffer`, `transactionId` (required by Apple's libraries).
    public func signIntroductoryOfferEligibilityJWS(bundleId: String, keyId: String? = nil, productId: String,
                                                    allowIntroductoryOffer: Bool, transactionId: String) throws(SignerError) -> SignedJWS {
        try requireFields(["bundleId": bundleId, "productId": productId, "transactionId": transactionId])
        let claims: [String: Any] = ["productId": productId, "allowIntroductoryOffer": allowIntroductoryOffer,
                                     "transactionId": transactionId]
        return try signJWS(audience: Self.introductoryOfferEligibilityAudience, bundleId: bundleId, keyId: keyId, claims: claims)
    }

    private func signJWS(audience: String, bundleId: String, keyId: String?, claims: [String: Any]) throws(SignerError) -> SignedJWS {
        guard let issuerId, !issuerId.isEmpty else {
            throw .refused("JWS signatures need the App Store Connect issuer id (\(Setting.signingIssuerId))")
        }
        let (id, key) = try key(keyId)
        let now = clock()
        let nonce = try freshNonce(nowMs: now)
        var payload = claims
        payload["iss"] = issuerId
        payload["iat"] = now / 1000
        payload["aud"] = audience
        payload["bid"] = bundleId
        payload["nonce"] = nonce
        do {
            let jws = try JWSSigner.signES256(header: ["kid": id, "typ": "JWT"], payload: payload, key: key)
            return SignedJWS(keyIdentifier: id, nonce: nonce, issuedAt: now / 1000, jws: jws)
        } catch let error as CryptoError {
            throw .signing(error.message)
        } catch {
            throw .signing("JWS serialization failed")
        }
    }

    /// `8-4-4-4-12` lowercase hex, as StoreKit wants it (Foundation's uuidString is uppercase).
    static func lowercaseString(_ nonce: UUID) -> String {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        return withUnsafeBytes(of: nonce.uuid) { raw in
            String(unsafeUninitializedCapacity: 36) { buffer in
                var out = 0
                for (index, byte) in raw.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 { buffer[out] = UInt8(ascii: "-"); out += 1 }
                    buffer[out] = hex[Int(byte >> 4)]
                    buffer[out + 1] = hex[Int(byte & 0x0F)]
                    out += 2
                }
                return out
            }
        }
    }

    private func key(_ id: String?) throws(SignerError) -> (String, P256PrivateKey) {
        guard let found = keys.key(id) else { throw .refused("unknown signing key id \(id ?? "")") }
        return found
    }

    private func requireFields(_ fields: KeyValuePairs<String, String>) throws(SignerError) {
        for (name, value) in fields where value.isEmpty { throw .refused("\(name) is required") }
    }

    /// A nonce not issued in the last 24 h, already recorded as issued.
    private func freshNonce(nowMs: Int64) throws(SignerError) -> String {
        for _ in 0..<Self.nonceAttempts {
            let nonce: UUID
            do { nonce = try newNonce() } catch { throw .signing("no random nonce: \(error)") }
            if nonces.register(nonce, nowMs: nowMs) { return Self.lowercaseString(nonce) }
            Metrics.shared.increment("storeledger_signer_nonce_redraws_total")
        }
        throw .signing("could not draw an unused nonce in \(Self.nonceAttempts) attempts")
    }
}

/// CSPRNG output drawn in bulk and handed out 16 bytes at a time.
final class RandomPool: Sendable {
    static let shared = RandomPool()
    private static let size = 4096
    private let state = Mutex<(bytes: [UInt8], offset: Int)>(([], RandomPool.size))

    func next16() throws -> (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                             UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) {
        try state.withLock { pool in
            if pool.offset + 16 > pool.bytes.count {
                pool.bytes = try SecureRandom.bytes(count: Self.size)
                pool.offset = 0
            }
            let b = pool.bytes, o = pool.offset
            pool.offset += 16
            return (b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5], b[o + 6], b[o + 7],
                    b[o + 8], b[o + 9], b[o + 10], b[o + 11], b[o + 12], b[o + 13], b[o + 14], b[o + 15])
        }
    }
}
