import Auth
import Configuration
import Crypto
import Domain
import Foundation
import HTTPServer

/// Who may call ingest and how hard (docs/security.md), read from the environment and validated
/// at startup:
/// - client credentials: `AuthConfiguration` (Setting.apiKeys, Setting.adminKeys, the Setting.jwt* settings)
/// - Setting.v1SharedSecrets: Apple's V1 shared secrets; without one ingest refuses to start
///   unless Setting.insecureAcceptV1WithoutSharedSecret=true
/// - Setting.metricsAccess: `public` (default, for a scraper on a private network) or `admin`
/// - Setting.rateLimitServicePerSecond, ...UserPerSecond, ...AdminPerSecond: per-credential request rates (burst twice that)
public struct EdgeSecuritySettings: Sendable {
    public var auth: AuthConfiguration
    public var v1SharedSecrets: [String]
    public var insecureUnverifiedV1: Bool
    public var metricsNeedAdmin: Bool
    public var serviceLimit: RateLimiter.Limit
    public var userLimit: RateLimiter.Limit
    public var adminLimit: RateLimiter.Limit

    public static let insecureV1Variable = Setting.insecureAcceptV1WithoutSharedSecret.name

    public init(auth: AuthConfiguration, v1SharedSecrets: [String], insecureUnverifiedV1: Bool = false, metricsNeedAdmin: Bool = false,
                serviceLimit: RateLimiter.Limit = .init(ratePerSecond: 10_000, burst: 20_000),
                userLimit: RateLimiter.Limit = .init(ratePerSecond: 20, burst: 40),
                adminLimit: RateLimiter.Limit = .init(ratePerSecond: 50, burst: 100)) {
        self.auth = auth
        self.v1SharedSecrets = v1SharedSecrets
        self.insecureUnverifiedV1 = insecureUnverifiedV1
        self.metricsNeedAdmin = metricsNeedAdmin
        self.serviceLimit = serviceLimit
        self.userLimit = userLimit
        self.adminLimit = adminLimit
    }

    /// From ingest's access settings (`EdgeConfiguration`), validated at startup.
    public init(_ edge: EdgeConfiguration) throws {
        let insecure = edge.insecureAcceptV1WithoutSharedSecret
        guard !edge.v1SharedSecrets.isEmpty || insecure else {
            throw EdgeConfigurationError("\(Setting.v1SharedSecrets) is not set: anyone could forge a V1 notification. Set Apple's shared secret, "
                + "or \(Self.insecureV1Variable)=true for a test setup that must accept V1 unverified")
        }
        self.init(auth: try AuthConfiguration(edge.auth), v1SharedSecrets: edge.v1SharedSecrets, insecureUnverifiedV1: insecure)
        switch edge.metricsAccess {
        case "public": metricsNeedAdmin = false
        case "admin": metricsNeedAdmin = true
        case let other: throw EdgeConfigurationError("\(Setting.metricsAccess) must be public or admin, not \(other)")
        }
        // Bounds (0.01...1000000 requests/s) are the settings' own, checked by the reader.
        func limit(_ perSecond: Double?, _ fallback: RateLimiter.Limit) -> RateLimiter.Limit {
            perSecond.map { .init(ratePerSecond: $0, burst: max(1, $0 * 2)) } ?? fallback
        }
        serviceLimit = limit(edge.serviceRatePerSecond, serviceLimit)
        userLimit = limit(edge.userRatePerSecond, userLimit)
        adminLimit = limit(edge.adminRatePerSecond, adminLimit)
    }

    func limit(for principal: Principal) -> RateLimiter.Limit {
        switch principal {
        case .service: serviceLimit
        case .user: userLimit
        case .admin: adminLimit
        }
    }
}

struct EdgeConfigurationError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Ingest's routes, parsed once; the access rule of each is in `AccessPolicy`.
enum IngestRoute: Equatable {
    case health, ready, metrics, openAPI
    /// Apple's own endpoint: authenticated by the V1 shared secret or the V2 signature, not a credential.
    case appleNotification
    case receiptUpload
    case offerSignature
    case subscription(key: String)
    case userMembership(user: String), userOffers(user: String), userLedger(user: String)
    /// Support: one user's membership, subscriptions and ledger in one answer.
    case adminUser(user: String)
    /// Operators: `/v1/admin/webhooks`, `/v1/admin/webhooks/{endpoint}/deliveries`, `/v1/admin/reports/{report}` (AdminReadRoutes).
    case adminWebhooks
    case adminWebhookDeliveries(endpoint: String)
    case adminReport(AdminReadRoutes.Report)
    /// `/v1/admin/refresh/{id}`, `/v1/admin/users/{id}/consumption`: calls to Apple (ServerAPIAdminRoutes).
    case adminServerAPI
    case wrongMethod(allowed: String)
    case badPath(reason: String)
    case notFound

    static func parse(method: String, path: String) -> IngestRoute {
        let segments = path.split(separator: "/").map(String.init)
        func get(_ route: IngestRoute) -> IngestRoute { method == "GET" ? route : .wrongMethod(allowed: "GET") }
        func post(_ route: IngestRoute) -> IngestRoute { method == "POST" ? route : .wrongMethod(allowed: "POST") }
        switch segments.joined(separator: "/") {
        case "healthz": return get(.health)
        case "readyz": return get(.ready)
        case "metrics": return get(.metrics)
        case "openapi.json": return get(.openAPI)
        case "v1/notifications/appstore": return post(.appleNotification)
        case "v1/receipts": return post(.receiptUpload)
        case "v1/offers/signature": return post(.offerSignature)
        default: break
        }
        if segments.count == 3, segments[0] == "v1", segments[1] == "subscriptions" {
            if let reason = EdgeChecks.pathIdentifier(segments[2], "subscription key", maxBytes: EventBounds.maxSubscriptionKeyBytes) {
                return .badPath(reason: reason)
            }
            return get(.subscription(key: segments[2]))
        }
        let userRoute = segments.count == 4 && segments[0] == "v1" && segments[1] == "users"
        let adminRoute = segments.count == 4 && segments[0] == "v1" && segments[1] == "admin" && segments[2] == "users"
        if segments.count >= 3, segments[0] == "v1", segments[1] == "admin", segments[2] == "webhooks" {
            if segments.count == 3 { return get(.adminWebhooks) }
            guard segments.count == 5, segments[4] == "deliveries" else { return .notFound }
            if let reason = AdminReadRoutes.endpointProblem(segments[3]) { return .badPath(reason: reason) }
            return get(.adminWebhookDeliveries(endpoint: segments[3]))
        }
        if segments.count >= 3, segments[0] == "v1", segments[1] == "admin", segments[2] == "reports" {
            guard segments.count == 4, let report = AdminReadRoutes.Report(rawValue: segments[3]) else { return .notFound }
            return get(.adminReport(report))
        }
        if !adminRoute, segments.count >= 3, segments[0] == "v1", segments[1] == "admin" { return .adminServerAPI }
        guard userRoute || adminRoute else { return .notFound }
        let user = segments[adminRoute ? 3 : 2]
        if let reason = EdgeChecks.pathIdentifier(user, "user id") { return .badPath(reason: reason) }
        if adminRoute { return get(.adminUser(user: user)) }
        switch segments[3] {
        case "membership": return get(.userMembership(user: user))
        case "offers": return get(.userOffers(user: user))
        case "ledger": return get(.userLedger(user: user))
        default: return .notFound
        }
    }

    /// The label in `storeledger_ingest_requests_total` (never an id: bounded cardinality).
    var metricName: String {
        switch self {
        case .health: "healthz"
        case .ready: "readyz"
        case .metrics: "metrics"
        case .openAPI: "openapi"
        case .appleNotification: "notification"
        case .receiptUpload: "receipt"
        case .offerSignature: "offer_signature"
        case .subscription: "subscription"
        case .userMembership: "user_membership"
        case .userOffers: "user_offers"
        case .userLedger: "user_ledger"
        case .adminUser: "admin_user"
        case .adminWebhooks: "admin_webhooks"
        case .adminWebhookDeliveries: "admin_webhook_deliveries"
        case .adminReport: "admin_reports"
        case .adminServerAPI: "admin_server_api"
        case .wrongMethod, .badPath, .notFound: "other"
        }
    }
}

/// Who may use which route (docs/security.md has the same table). Pure: (route, principal) → verdict.
/// Checks that need the body or the database (the user in an upload, a subscription's owner) are
/// made by the handlers with `actsFor`.
enum AccessPolicy {
    enum Verdict: Equatable {
        case allow
        /// 401: no or a bad credential; 403: a good credential that may not do this.
        case deny(status: Int, reason: String)
    }

    static func decide(_ route: IngestRoute, _ outcome: Authenticator.Outcome, metricsNeedAdmin: Bool) -> Verdict {
        let needsCredential: Bool
        switch route {
        case .health, .ready, .openAPI, .appleNotification, .wrongMethod, .badPath, .notFound:
            return .allow
        case .metrics:
            if !metricsNeedAdmin { return .allow }
            needsCredential = true
        default:
            needsCredential = true
        }
        guard needsCredential else { return .allow }
        let principal: Principal
        switch outcome {
        case .anonymous:
            return .deny(status: 401, reason: "this route needs Authorization: Bearer <API key or user token>")
        case .refused(let failure):
            return .deny(status: 401, reason: failure.reason)
        case .authenticated(let who):
            principal = who
        }
        switch (route, principal) {
        case (.metrics, .admin), (.adminUser, .admin), (.adminServerAPI, .admin), (.adminWebhooks, .admin),
             (.adminWebhookDeliveries, .admin), (.adminReport, .admin):
            return .allow
        case (.metrics, _), (.adminUser, _), (.adminServerAPI, _), (.adminWebhooks, _), (.adminWebhookDeliveries, _), (.adminReport, _):
            return .deny(status: 403, reason: "support and operator routes need an admin key")
        case (.receiptUpload, .admin), (.offerSignature, .admin):
            return .deny(status: 403, reason: "admin keys are for support and operator routes; they do not act for users")
        case (.userMembership(let user), _), (.userOffers(let user), _), (.userLedger(let user), _):
            return actsFor(principal, user: user) ? .allow : .deny(status: 403, reason: "a user token acts only for its own user")
        default:
            return .allow
        }
    }

    /// Whether `principal` may act for or read `user`: a service or admin key for anyone, a user
    /// token for itself alone (R17: UUID user ids compare in any case).
    static func actsFor(_ principal: Principal, user: String) -> Bool {
        switch principal {
        case .service, .admin: true
        case .user(let id): UserId.same(id, user)
        }
    }
}

/// Apple's V1 notifications at the edge: the shared secret is checked here (401 on mismatch) and
/// `password` is cut out of the bytes before they go anywhere, so no topic, table or dead letter
/// ever holds it. Everything else stays byte for byte (decode derives the event id from the bytes).
enum V1Secret {
    /// The body without its top-level `password` member(s), or nil if it cannot be removed
    /// reliably (an escaped key spelling): such a body is refused rather than stored.
    static func removingPassword(_ body: [UInt8]) -> [UInt8]? {
        // The separators of the top-level object: its `{`, every `,` directly inside it, its `}`.
        var separators: [Int] = []
        var depth = 0
        var index = 0
        while index < body.count {
            switch body[index] {
            case UInt8(ascii: "\""):
                guard let end = stringEnd(body, from: index) else { return nil }
                index = end
                continue
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                if depth == 0 { separators.append(index) }
                depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth == 0 { separators.append(index) }
            case UInt8(ascii: ","):
                if depth == 1 { separators.append(index) }
            default:
                break
            }
            index += 1
        }
        guard separators.count >= 2, body[separators[0]] == UInt8(ascii: "{") else { return nil }
        // Each member lies between two separators and is kept byte for byte unless its key is `password`.
        let members = zip(separators, separators.dropFirst()).map { ($0 + 1)..<$1 }
        let kept = members.filter { member in
            guard let quote = body[member].firstIndex(of: UInt8(ascii: "\"")), let end = stringEnd(body, from: quote) else { return true }
            return !body[(quote + 1)..<(end - 1)].elementsEqual("password".utf8)
        }
        var result = Array(body[...separators[0]])
        for (offset, member) in kept.enumerated() {
            if offset > 0 { result.append(UInt8(ascii: ",")) }
            result += body[member]
        }
        result += body[separators[separators.count - 1]...]
        // Whatever spelling was used, the stored body must parse and have no password left.
        guard let object = (try? JSONSerialization.jsonObject(with: Data(result))) as? [String: Any], object["password"] == nil else { return nil }
        return result
    }

    /// Index just past the closing quote of the string starting at `start`.
    private static func stringEnd(_ body: [UInt8], from start: Int) -> Int? {
        var index = start + 1
        while index < body.count {
            if body[index] == UInt8(ascii: "\\") { index += 2; continue }
            if body[index] == UInt8(ascii: "\"") { return index + 1 }
            index += 1
        }
        return nil
    }

    static func matches(_ password: String, _ secrets: [String]) -> Bool {
        let presented = Array(password.utf8)
        return secrets.map { constantTimeEqual(Array($0.utf8), presented) }.contains(true)
    }
}

/// The request headers that reach Kafka: what decode, support and tracing need. Everything else
/// (Authorization, Cookie, proxies' forwarding headers, anything a client invents) stays at the edge.
enum ForwardedHeaders {
    static let allowed: Set<String> = ["content-type", "user-agent", "x-request-id", "x-apple-request-uuid"]
    /// Bounded like everything else from a request: a longer value is cut.
    static let maxValueBytes = 512

    static func select(_ headers: HTTPHeaders) -> [(name: String, value: String)] {
        headers.compactMap { field in
            let name = field.name.lowercased()
            guard allowed.contains(name) || name.hasPrefix("x-apple-") else { return nil }
            return (name, String(decoding: Array(field.value.utf8.prefix(maxValueBytes)), as: UTF8.self))
        }.prefix(16).map { $0 }
    }
}
