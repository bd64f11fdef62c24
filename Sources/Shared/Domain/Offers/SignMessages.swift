/// The records on `storeledger.offers.sign.requests` / `.replies` (JSON, keyed by correlation id).
/// Ingest writes requests and reads replies; the signer does the reverse. One definition for both
/// processes, so the wire contract cannot drift.
public struct SignRequest: Codable, Sendable, Equatable {
    /// Largest request record the signer reads. Ingest's requests are a few hundred bytes; a reply
    /// repeats the correlation id (as its key and in its value) and may quote the key id, so an
    /// unbounded request could ask for a reply the broker refuses to store.
    public static let maxRecordBytes = 16 * 1024

    public enum Kind: String, Codable, Sendable {
        /// The legacy base64 DER signature over the U+2063-joined payload.
        case legacy
        /// Promotional offer V2 compact JWS.
        case promotionalOfferJWS = "promotional-offer-jws"
        /// Introductory-offer eligibility compact JWS.
        case introductoryOfferEligibilityJWS = "introductory-offer-eligibility-jws"
    }

    public var correlationId: String
    /// The requester stops waiting at this time (ms since 1970): the signer drops the request after it.
    public var deadlineMs: Int64
    public var kind: Kind
    public var bundleId: String
    /// nil: the signer's default key.
    public var keyId: String?
    public var productId: String
    public var offerId: String?
    public var applicationUsername: String?
    public var transactionId: String?
    public var allowIntroductoryOffer: Bool?

    public init(correlationId: String, deadlineMs: Int64, kind: Kind, bundleId: String, keyId: String? = nil,
                productId: String, offerId: String? = nil, applicationUsername: String? = nil,
                transactionId: String? = nil, allowIntroductoryOffer: Bool? = nil) {
        self.correlationId = correlationId
        self.deadlineMs = deadlineMs
        self.kind = kind
        self.bundleId = bundleId
        self.keyId = keyId
        self.productId = productId
        self.offerId = offerId
        self.applicationUsername = applicationUsername
        self.transactionId = transactionId
        self.allowIntroductoryOffer = allowIntroductoryOffer
    }
}

public struct SignReply: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable {
        case signed
        /// The request could not be signed (unknown key id, missing field): `reason` says why.
        case refused
    }

    public var correlationId: String
    public var status: Status
    public var keyIdentifier: String?
    public var nonce: String?
    /// Legacy: the signed timestamp (ms). JWS: `iat` in ms.
    public var timestampMs: Int64?
    /// Legacy form: base64 DER.
    public var signature: String?
    /// JWS forms: the compact JWS.
    public var jws: String?
    public var reason: String?

    public init(correlationId: String, status: Status, keyIdentifier: String? = nil, nonce: String? = nil,
                timestampMs: Int64? = nil, signature: String? = nil, jws: String? = nil, reason: String? = nil) {
        self.correlationId = correlationId
        self.status = status
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.timestampMs = timestampMs
        self.signature = signature
        self.jws = jws
        self.reason = reason
    }
}
