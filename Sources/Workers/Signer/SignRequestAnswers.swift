import Domain

/// How the signer answers the sign requests defined in Domain/Offers/SignMessages.swift.
extension OfferSigner {
    /// Answers one request. Refusals are replies too, so the requester never waits in vain.
    public func answer(_ request: SignRequest) -> SignReply {
        do throws(SignerError) {
            switch request.kind {
            case .legacy:
                let signed = try signLegacy(bundleId: request.bundleId, keyId: request.keyId, productId: request.productId,
                                            offerId: request.offerId ?? "", applicationUsername: request.applicationUsername ?? "")
                return SignReply(correlationId: request.correlationId, status: .signed, keyIdentifier: signed.keyIdentifier,
                                 nonce: signed.nonce, timestampMs: signed.timestamp, signature: signed.signature)
            case .promotionalOfferJWS:
                let signed = try signPromotionalOfferJWS(bundleId: request.bundleId, keyId: request.keyId, productId: request.productId,
                                                         offerId: request.offerId ?? "", transactionId: request.transactionId)
                return reply(request, signed)
            case .introductoryOfferEligibilityJWS:
                guard let allow = request.allowIntroductoryOffer else { throw .refused("allowIntroductoryOffer is required") }
                let signed = try signIntroductoryOfferEligibilityJWS(bundleId: request.bundleId, keyId: request.keyId,
                                                                     productId: request.productId, allowIntroductoryOffer: allow,
                                                                     transactionId: request.transactionId ?? "")
                return reply(request, signed)
            }
        } catch {
            return SignReply(correlationId: request.correlationId, status: .refused, reason: error.description)
        }
    }

    private func reply(_ request: SignRequest, _ signed: SignedJWS) -> SignReply {
        SignReply(correlationId: request.correlationId, status: .signed, keyIdentifier: signed.keyIdentifier,
                  nonce: signed.nonce, timestampMs: signed.issuedAt * 1000, jws: signed.jws)
    }
}
