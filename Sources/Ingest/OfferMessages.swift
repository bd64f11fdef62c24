/// Ingest's side of the sign request/reply records (`storeledger.offers.sign.requests` /
/// `.replies`). The signer's copy is `SignRequest` / `SignReply` in Sources/Workers/Signer/
/// SignMessages.swift; the JSON field names are the contract between the two processes, checked
/// end to end by Tests/IntegrationTests/OfferSigningTests.swift.
struct OfferSignRequest: Codable, Sendable, Equatable {
    enum Kind: String, Codable, Sendable {
        case legacy
        case promotionalOfferJWS = "promotional-offer-jws"
        case introductoryOfferEligibilityJWS = "introductory-offer-eligibility-jws"
    }

    var correlationId: String
    var deadlineMs: Int64
    var kind: Kind
    var bundleId: String
    var keyId: String?
    var productId: String
    var offerId: String?
    var applicationUsername: String?
    var transactionId: String?
    var allowIntroductoryOffer: Bool?
}

struct OfferSignReply: Codable, Sendable, Equatable {
    enum Status: String, Codable, Sendable {
        case signed
        case refused
    }

    var correlationId: String
    var status: Status
    var keyIdentifier: String?
    var nonce: String?
    var timestampMs: Int64?
    var signature: String?
    var jws: String?
    var reason: String?
}
