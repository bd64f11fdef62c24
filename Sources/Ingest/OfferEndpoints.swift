import Auth
import Configuration
import Domain
import Foundation
import HTTPServer
import Kafka
import Postgres
import Runtime

/// Offer settings of the ingest process, read from the environment (so the `ingest` command needs
/// no flags for them): Setting.catalog (the product catalog with intro variants and
/// promotional offers), Setting.bundleId (else the catalog's bundleId),
/// Setting.offerSignTimeoutMs (how long to wait for the signer, default 2000).
public struct OfferSettings: Sendable {
    public var catalogPath: String?
    public var bundleId: String?
    public var signTimeout: Duration = .seconds(2)

    public init(catalogPath: String? = nil, bundleId: String? = nil, signTimeout: Duration = .seconds(2)) {
        self.catalogPath = catalogPath
        self.bundleId = bundleId
        self.signTimeout = signTimeout
    }

    public init(_ configuration: IngestConfiguration) {
        self.init(catalogPath: configuration.catalogPath, bundleId: configuration.bundleId,
                  signTimeout: .milliseconds(configuration.offerSignTimeoutMs))
    }
}

/// `POST /v1/offers/signature` and `GET /v1/users/{user_id}/offers`: decide from PostgreSQL and
/// the catalog who may have which offer (R8, R9), then ask the signer over Kafka. The key never
/// comes near this process.
final class OfferEndpoints: Sendable {
    private struct Configured: Sendable {
        let eligibility: OfferEligibility
        let bundleId: String?
        let reader: OfferHistoryReader
        let client: OfferSignClient
    }

    private let configured: Configured?
    private let missing: String
    private let timeout: Duration
    /// The read API's bounds, shared with it, for the offers view's PostgreSQL read.
    private let bounded: BoundedReads
    private let logger = Logger(component: "ingest.offers")

    init(settings: OfferSettings, kafka: KafkaConfig, pool: PGPool?, bounded: BoundedReads) throws {
        timeout = settings.signTimeout
        self.bounded = bounded
        guard let path = settings.catalogPath, let pool else {
            configured = nil
            missing = "offers need \(Setting.catalog) and DATABASE_URL"
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw OfferConfigurationError("cannot read catalog \(path)") }
        // Validated as every worker loads it: a duplicate offer id or a limit of 0 would decide wrongly.
        let catalog: Catalog
        do { catalog = try Catalog.load(json: [UInt8](data), source: path) } catch { throw OfferConfigurationError(error.description) }
        configured = Configured(eligibility: OfferEligibility(catalog: catalog), bundleId: settings.bundleId ?? catalog.bundleId,
                                reader: OfferHistoryReader(pool: pool), client: try OfferSignClient(kafka: kafka))
        missing = ""
    }

    func close() { configured?.client.close() }

    // MARK: POST /v1/offers/signature

    /// The request body. `format` picks the legacy signature or the promotional offer V2 JWS;
    /// `kind: "introductory-eligibility"` asks for the intro-offer eligibility JWS instead (R8 told
    /// to StoreKit directly).
    private struct SignBody: Decodable {
        var user_id: String
        var product_id: String
        var offer_id: String?
        var format: String?
        var kind: String?
        var application_username: String?
        var transaction_id: String?
        var key_id: String?
    }

    private struct LegacyAnswer: Encodable {
        var keyIdentifier: String
        var nonce: String
        var timestamp: Int64
        var signature: String
        var offer_id: String
    }

    private struct JWSAnswer: Encodable {
        var jws: String
        var keyIdentifier: String
        var nonce: String
        var offer_id: String?
        var allowIntroductoryOffer: Bool?
        var reason: String?
    }

    private struct Refusal: Encodable {
        struct Item: Encodable { var offer_id: String; var code: String; var reason: String }
        var error: String
        var code: String
        var offer_id: String?
        var refusals: [Item]?
    }

    /// The signature is bound to the caller: a user token asks for its own user only, and the
    /// signed applicationUsername (StoreKit's appAccountToken, which links the redemption back to the
    /// account) is the user itself, so per-user limits and R8 count the redemption where it belongs.
    func sign(_ request: HTTPRequest, principal: Principal?, _ responder: HTTPResponder) {
        guard let configured else { return answer(responder, "signature", .error(status: 503, reason: missing)) }
        if let failure = EventBounds.jsonDepth(request.body) {
            return answer(responder, "signature", .error(status: 400, reason: failure.reason))
        }
        let body: SignBody
        do { body = try JSONDecoder().decode(SignBody.self, from: Data(request.body)) } catch {
            return answer(responder, "signature", .error(status: 400, reason: "body must be JSON with user_id and product_id (strings)\(wrongField(error))"))
        }
        guard !body.user_id.isEmpty, !body.product_id.isEmpty else {
            return answer(responder, "signature", .error(status: 400, reason: "user_id and product_id must not be empty"))
        }
        // Every id here reaches PostgreSQL, a sign request and, for the legacy form, the signed payload (R9).
        let ids = [("user_id", body.user_id), ("product_id", body.product_id), ("offer_id", body.offer_id),
                   ("application_username", body.application_username), ("transaction_id", body.transaction_id),
                   ("key_id", body.key_id), ("format", body.format), ("kind", body.kind)]
        // A field that is given must name something: an empty id is refused like a malformed one.
        if let reason = ids.lazy.compactMap({ field, value in value.flatMap { EventBounds.identifier($0, field: field)?.reason } }).first {
            return answer(responder, "signature", .error(status: 400, reason: reason))
        }
        if let principal, !AccessPolicy.actsFor(principal, user: body.user_id) {
            return answer(responder, "signature", .error(status: 403, reason: "a user token requests offer signatures for its own user only"))
        }
        // R17: a UUID user id in any case is one user; its history is stored under the lower-case form.
        let user = UserId.normalized(body.user_id)
        if let name = body.application_username, !UserId.same(name, user) {
            return answer(responder, "signature", .error(status: 403, reason:
                "application_username must be the user the offer is for (it links the redemption to that account); omit it to use user_id"))
        }
        let format = body.format ?? "legacy"
        guard format == "legacy" || format == "jws" else {
            return answer(responder, "signature", .error(status: 400, reason: "format must be legacy or jws"))
        }
        let intro = body.kind == "introductory-eligibility"
        guard body.kind == nil || body.kind == "promotional" || intro else {
            return answer(responder, "signature", .error(status: 400, reason: "kind must be promotional or introductory-eligibility"))
        }
        let catalog = configured.eligibility.catalog
        guard let product = catalog.product(body.product_id) else {
            return answer(responder, "signature", .error(status: 404, reason: "unknown product \(body.product_id)"))
        }
        guard product.kind == .autoRenewable else {
            return answer(responder, "signature", .error(status: 400, reason: "offers apply to auto-renewable subscriptions; \(product.id) is \(product.kind.rawValue)"))
        }
        guard let bundleId = configured.bundleId else {
            return answer(responder, "signature", .error(status: 503, reason: "no bundle id configured (catalog bundleId or \(Setting.bundleId))"))
        }
        // Its read counts among the reads waiting on PostgreSQL: a hung database refuses more at once.
        guard bounded.enter() else {
            return answer(responder, "signature", .error(status: 503, reason: "too many reads waiting on the database; retry later"))
        }
        let deadline = currentTimeMs() + timeout.milliseconds
        // A guard against anything slower than the signer's deadline (a stuck database): never hang.
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(timeout.milliseconds) + 1000)) { [self] in
            answer(responder, "signature", .error(status: 504, reason: "no answer within the deadline"))
        }
        DispatchQueue.global().async { [self] in
            let history: OfferHistory
            let owners: Set<String>
            do {
                defer { bounded.leave() }
                history = try configured.reader.history(user: user)
                owners = try body.transaction_id.map { try configured.reader.owners(transaction: $0) } ?? []
            } catch {
                logger.error("offer_history_failed", ["error": .string(String(describing: error))])
                return answer(responder, "signature", .error(status: 503, reason: "database unavailable"))
            }
            // Another customer's transaction would bind the signature to them. One nobody owns yet
            // (a purchase on a new Apple ID) is fine: eligibility was decided for this user.
            if !owners.isEmpty, !owners.contains(where: { UserId.same($0, user) }) {
                return answer(responder, "signature", .error(status: 403, reason: "transaction_id belongs to another user"))
            }
            let now = currentTimeMs()
            if intro {
                signIntroEligibility(body, product: product, bundleId: bundleId, history: history, deadline: deadline, configured, responder)
                return
            }
            let offer: PromotionalOffer
            if let offerId = body.offer_id {
                guard let named = catalog.offer(offerId) else {
                    return answer(responder, "signature", .error(status: 404, reason: "unknown promotional offer \(offerId)"))
                }
                guard named.productId == product.id else {
                    return answer(responder, "signature", .error(status: 400, reason: "offer \(offerId) applies to \(named.productId), not \(product.id)"))
                }
                let verdict = configured.eligibility.verdict(named, history: history, nowMs: now)
                if let refusal = verdict.refusal {
                    return answer(responder, "signature", .json(status: 403, Refusal(error: refusal.message, code: refusal.code, offer_id: offerId)))
                }
                offer = named
            } else {
                switch configured.eligibility.pick(productId: product.id, history: history, nowMs: now) {
                case .success(let picked):
                    offer = picked
                case .failure(let refused):
                    let items = refused.verdicts.compactMap { verdict in
                        verdict.refusal.map { Refusal.Item(offer_id: verdict.offer.id, code: $0.code, reason: $0.message) }
                    }
                    let text = items.isEmpty ? "no promotional offer is configured for \(product.id)"
                        : "no promotional offer for \(product.id) is available to this account: " + items.map(\.reason).joined(separator: "; ")
                    return answer(responder, "signature", .json(status: 403, Refusal(error: text, code: items.isEmpty ? "no_offer_configured" : "not_eligible",
                                                                                       refusals: items)))
                }
            }
            let signRequest = SignRequest(
                correlationId: UUID().uuidString.lowercased(), deadlineMs: deadline, kind: format == "jws" ? .promotionalOfferJWS : .legacy,
                bundleId: bundleId, keyId: body.key_id, productId: product.id, offerId: offer.id,
                applicationUsername: user, transactionId: body.transaction_id)
            configured.client.send(signRequest) { [self] result in
                respond(result, responder) { reply in
                    if format == "jws" {
                        return .json(JWSAnswer(jws: reply.jws ?? "", keyIdentifier: reply.keyIdentifier ?? "", nonce: reply.nonce ?? "",
                                               offer_id: offer.id))
                    }
                    return .json(LegacyAnswer(keyIdentifier: reply.keyIdentifier ?? "", nonce: reply.nonce ?? "",
                                              timestamp: reply.timestampMs ?? 0, signature: reply.signature ?? "", offer_id: offer.id))
                }
            }
        }
    }

    /// R8 told to StoreKit: a signed `allowIntroductoryOffer` for the product, false for accounts
    /// that already had a trial or intro price in the group under any Apple ID.
    private func signIntroEligibility(_ body: SignBody, product: CatalogProduct, bundleId: String, history: OfferHistory,
                                      deadline: Int64, _ configured: Configured, _ responder: HTTPResponder) {
        let decision = configured.eligibility.introOffer(group: product.group ?? product.id, history: history)
        // Apple requires a transaction of the customer; any will do (the newest we know by default).
        guard let transactionId = body.transaction_id ?? history.purchases.max(by: { $0.startMs < $1.startMs })?.transactionId else {
            return answer(responder, "signature", .error(status: 400, reason: "transaction_id is required for an account without purchases (use its appTransactionId)"))
        }
        let request = SignRequest(correlationId: UUID().uuidString.lowercased(), deadlineMs: deadline,
                                       kind: .introductoryOfferEligibilityJWS, bundleId: bundleId, keyId: body.key_id,
                                       productId: product.id, transactionId: transactionId, allowIntroductoryOffer: decision.eligible)
        configured.client.send(request) { [self] result in
            respond(result, responder) { reply in
                .json(JWSAnswer(jws: reply.jws ?? "", keyIdentifier: reply.keyIdentifier ?? "", nonce: reply.nonce ?? "",
                                allowIntroductoryOffer: decision.eligible, reason: decision.reason))
            }
        }
    }

    private func respond(_ result: Result<SignReply, OfferSignFailure>, _ responder: HTTPResponder,
                         _ success: (SignReply) -> HTTPResponse) {
        switch result {
        case .success(let reply) where reply.status == .signed:
            answer(responder, "signature", success(reply))
        case .success(let reply) where reply.reason?.hasPrefix("unknown signing key id") == true:
            // The caller's key_id names no key of the signer: the request's fault, not the signer's
            // (the reply carries no code, only OfferSigner's reason text).
            answer(responder, "signature", .error(status: 404, reason: "key_id names no signing key of the signer"))
        case .success(let reply):
            logger.warning("signer_refused", ["reason": .string(reply.reason ?? "")])
            answer(responder, "signature", .error(status: 502, reason: "the signer refused: \(reply.reason ?? "no reason given")"))
        case .failure(.timedOut):
            answer(responder, "signature", .error(status: 504, reason: "the signer did not answer within \(timeout.milliseconds) ms"))
        case .failure(.unavailable(let why)):
            logger.warning("sign_request_failed", ["error": .string(why)])
            answer(responder, "signature", .error(status: 503, reason: "could not reach the signer; retry later"))
        }
    }

    // MARK: GET /v1/users/{user_id}/offers?group=G

    private struct GroupOffers: Encodable {
        struct Intro: Encodable { var eligible: Bool; var reason: String }
        struct Offer: Encodable {
            var offerId: String
            var productId: String
            var audience: String
            var eligible: Bool
            var redemptions: Int
            var maxRedemptionsPerUser: Int?
            var code: String?
            var reason: String?
        }
        var group: String
        var introOffer: Intro
        var products: [ProductVariantChoice]
        var offers: [Offer]
    }

    func userOffers(user: String, _ request: HTTPRequest, _ responder: HTTPResponder) {
        guard let configured else { return answer(responder, "user_offers", .error(status: 503, reason: missing)) }
        if let reason = EdgeChecks.optionalIdentifier(request.queryValue("group"), "group") {
            return answer(responder, "user_offers", .error(status: 400, reason: reason))
        }
        let catalog = configured.eligibility.catalog
        let groups = request.queryValue("group").map { [$0] }
            ?? Array(Set(catalog.products.filter { $0.kind == .autoRenewable }.map { $0.group ?? $0.id })).sorted()
        // Off the HTTP threads and answered 503 in time if PostgreSQL hangs, like every read.
        bounded.run(responder, { [logger] in
            let history: OfferHistory
            do { history = try configured.reader.history(user: UserId.normalized(user)) } catch {
                logger.error("offer_history_failed", ["error": .string(String(describing: error))])
                return .error(status: 503, reason: "database unavailable")
            }
            let now = currentTimeMs()
            let views = groups.map { group in
                let intro = configured.eligibility.introOffer(group: group, history: history)
                let offers = configured.eligibility.offers(group: group, history: history, nowMs: now).map { verdict in
                    GroupOffers.Offer(offerId: verdict.offer.id, productId: verdict.offer.productId, audience: verdict.offer.audience.rawValue,
                                      eligible: verdict.isEligible, redemptions: verdict.redemptions,
                                      maxRedemptionsPerUser: verdict.offer.maxRedemptionsPerUser,
                                      code: verdict.refusal?.code, reason: verdict.refusal?.message)
                }
                return GroupOffers(group: group, introOffer: .init(eligible: intro.eligible, reason: intro.reason),
                                   products: configured.eligibility.variants(group: group, history: history), offers: offers)
            }
            struct View: Encodable { var userId: String; var groups: [GroupOffers] }
            return .json(View(userId: user, groups: views))
        }, answered: { status in
            Metrics.shared.increment("storeledger_offer_requests_total", ["route": "user_offers", "status": String(status)])
        })
    }

    private func answer(_ responder: HTTPResponder, _ route: String, _ response: HTTPResponse) {
        if responder.respond(response) {
            Metrics.shared.increment("storeledger_offer_requests_total", ["route": route, "status": String(response.status)])
        }
    }
}

/// Which field of a request body had the wrong JSON type, for the 400's reason.
private func wrongField(_ error: any Error) -> String {
    switch error as? DecodingError {
    case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?:
        return context.codingPath.first.map { ": \($0.stringValue) has the wrong type" } ?? ""
    case .keyNotFound(let key, _)?:
        return ": \(key.stringValue) is missing"
    default:
        return ""
    }
}

struct OfferConfigurationError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
