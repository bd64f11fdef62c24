import Auth
import Configuration
import Domain
import Foundation
import HTTPServer
import Kafka
import Postgres
import Runtime
import Synchronization

public struct IngestConfig: Sendable {
    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    public var threads: Int = 4
    /// Apple's notifications are a few KB; receipts with long histories reach a few hundred KB.
    /// The largest body that still fits into a raw record and its dead letter (KafkaLimits).
    public var maxBodyBytes: Int = KafkaLimits.maxValueBytes
    /// How long a write may stay unconfirmed before the caller gets 503 (Apple retries on 5xx).
    public var writeTimeout: Duration = .seconds(3)
    public var kafka: KafkaConfig
    public var databaseURL: String?
    public var offers = OfferSettings()
    /// Refresh and consumption reads that ask Apple (issue 16); nil: not served.
    public var serverAPIAdmin: ServerAPIAdminRoutes?
    /// The webhook delivery log and finance reports for operators (issue 17); nil: answered 503.
    public var adminReads: AdminReadRoutes?
    /// Credentials, V1 shared secrets, rate limits; nil: read from the environment at start (EdgeSecuritySettings).
    public var security: EdgeSecuritySettings?
    /// Connections one client address may hold (slow clients from one place cannot take them all).
    public var maxConnectionsPerAddress = 256
    /// Connections in all; `reservedForApple` of them only Apple's 17.0.0.0/8 may take. Capped by the
    /// process's file descriptors (raised to the hard limit at start).
    public var maxConnections = 8192
    public static let reservedForApple = 256
    /// A connection silent this long is closed: bounds how long a client may dawdle over its headers.
    public var idleTimeoutSeconds = 10
    /// The longest a request's body may take to arrive once its headers are in.
    public var bodyTimeout: Duration = .seconds(30)
    /// A read (and `/readyz`'s database check) not answered by PostgreSQL by then gets 503.
    public var readTimeout: Duration = .seconds(5)
    /// Reads waiting on PostgreSQL at once; more get 503 at once (BoundedReads).
    public var maxReadsInFlight = 32
    /// Admin requests waiting on Apple at once (each holds a thread and a database connection for
    /// seconds); more get 503 at once.
    public var maxAppleCallsInFlight = 4

    public init(kafka: KafkaConfig, databaseURL: String?) {
        self.kafka = kafka
        self.databaseURL = databaseURL
    }
}

/// The edge: accepts Apple's notifications and apps' receipts, writes them to the raw topics and
/// answers 200 only after the broker acknowledged the write (ARCHITECTURE.md: nothing
/// acknowledged is lost). Also serves the membership read API from PostgreSQL.
public final class IngestService: Sendable {
    private let config: IngestConfig
    let producer: KafkaProducer
    private let reads: MembershipReads?
    private let offers: OfferEndpoints
    private let support: SupportRoutes
    private let logger = Logger(component: "ingest")
    private let server: HTTPServer
    private let security: EdgeSecuritySettings
    private let limiter = RateLimiter()
    private let bounded: BoundedReads
    private let appleCalls: BoundedReads
    private let readinessProbe = ReadinessProbe()
    /// The readiness check's own bounded place (not the read API's): a hung check answers 503 in
    /// time, and at most two run at once (ReadinessProbe starts another after 10 s).
    private let readinessReads: BoundedReads
    private let failed = Atomic<Bool>(false)
    private let onProducerFailure: @Sendable () -> Void
    private let deadlines: WriteDeadlines

    /// - Parameter onProducerFailure: called once when the broker producer fails for good (the
    ///   caller stops the process; `producerHasFailed` then says so).
    public init(config: IngestConfig, onProducerFailure: @escaping @Sendable () -> Void = {}) throws {
        self.onProducerFailure = onProducerFailure
        let security = try config.security ?? EdgeSecuritySettings(EdgeConfiguration())
        self.security = security
        var kafka = config.kafka
        // The broker must confirm within the HTTP write timeout, else the request fails with 503.
        kafka.deliveryTimeout = config.writeTimeout
        // Each write has a caller waiting for its ack: Nagle would hold a produce request's last
        // segment while an earlier one is unacknowledged (delayed ACK: up to 40 ms).
        kafka.extra = ["socket.nagle.disable": "true"].merging(kafka.extra) { _, given in given }
        self.config = config
        self.bounded = BoundedReads(timeout: config.readTimeout, maxInFlight: config.maxReadsInFlight)
        // Only its places are used: a refresh answers when Apple has (its client bounds each call).
        self.appleCalls = BoundedReads(timeout: .seconds(60), maxInFlight: config.maxAppleCallsInFlight)
        self.readinessReads = BoundedReads(timeout: config.readTimeout, maxInFlight: 2)
        // A guard in case the delivery report itself is late: the caller never waits unbounded.
        let late = HTTPResponse.error(status: 503, reason: "broker did not confirm the write in time; retry later")
        self.deadlines = WriteDeadlines(timeout: config.writeTimeout + .seconds(1)) { watch in
            if watch.responder.respond(late) {
                Metrics.shared.increment("storeledger_ingest_requests_total", ["route": watch.route, "status": "503"])
            }
        }
        self.producer = try KafkaProducer(config: kafka)
        self.reads = config.databaseURL.map { MembershipReads(pool: PGPool(url: $0, size: max(2, config.threads))) }
        self.offers = try OfferEndpoints(settings: config.offers, kafka: config.kafka, pool: reads?.pool, bounded: bounded)
        let authenticator = security.auth.authenticator
        let limiter = self.limiter
        self.support = SupportRoutes(pool: reads?.pool, kafka: config.kafka, bounded: bounded) { request in
            switch SupportAdmission.admit(request.headers["Authorization"], authenticator) {
            case .failure(let refusal):
                return refusal.response
            case .success(let principal):
                // The admin key's rate limit holds on the pages as on the admin API.
                return limiter.take(principal.rateKey, security.limit(for: principal)).map(EdgeChecks.rateLimited(retryAfter:))
            }
        }
        let routes = Routes()
        // Every connection is a descriptor; the rest (Kafka, PostgreSQL, files) keeps 512 of them.
        let connections = min(config.maxConnections, max(64, FileDescriptors.raiseToHardLimit() - 512))
        self.server = HTTPServer(host: config.host, port: config.port, threads: config.threads,
                                 maxBodyBytes: config.maxBodyBytes, connectionLimit: connections,
                                 connectionTimeoutSeconds: config.idleTimeoutSeconds,
                                 connectionsPerAddress: config.maxConnectionsPerAddress,
                                 reservedForApple: min(IngestConfig.reservedForApple, connections / 8),
                                 bodyTimeout: config.bodyTimeout) { request, responder in
            routes.handle(request, responder)
        }
        routes.service.withLock { $0 = self }
    }

    public var port: Int { server.boundPort }
    public var producerHasFailed: Bool { failed.load(ordering: .acquiring) }

    public func start() throws {
        if security.insecureUnverifiedV1 {
            logger.warning("insecure_v1_notifications_accepted", ["setting": .string(EdgeSecuritySettings.insecureV1Variable),
                                                                 "effect": "anyone can forge a V1 notification"])
        }
        if !security.auth.acceptsAnyCredential {
            logger.warning("no_client_credentials_configured", ["effect": "every client route answers 401"])
        }
        try server.start()
        logger.info("ingest_listening", ["url": .string("http://\(config.host):\(server.boundPort)")])
    }

    public func stop() {
        server.stop()
        producer.close()
        offers.close()
        deadlines.stop()
    }

    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        // The support pages admit with the admin key, also as an HTTP Basic password (SupportAdmission).
        if request.path.split(separator: "/").first == "support" {
            responder.onRespond { status in
                Metrics.shared.increment("storeledger_ingest_requests_total", ["route": "support", "status": String(status)])
            }
            return support.handle(request, responder)
        }
        let route = IngestRoute.parse(method: request.method, path: request.path)
        let outcome = security.auth.authenticator.authenticate(authorization: request.headers["Authorization"])
        if case .deny(let status, let reason) = AccessPolicy.decide(route, outcome, metricsNeedAdmin: security.metricsNeedAdmin) {
            count(route.metricName, status)
            var response = HTTPResponse.error(status: status, reason: reason)
            // RFC 6750 §3: a 401 names the scheme.
            if status == 401 { response.headers.set(name: "WWW-Authenticate", value: #"Bearer realm="storeledger""#) }
            responder.respond(response)
            return
        }
        let principal: Principal? = if case .authenticated(let who) = outcome { who } else { nil }
        // Apple's endpoint is never rate limited: Apple retries on its own schedule, and a refusal
        // would only delay a notification. Every credentialed call counts against its credential.
        if let principal, route != .appleNotification,
           let wait = limiter.take(principal.rateKey, security.limit(for: principal)) {
            count(route.metricName, 429)
            responder.respond(EdgeChecks.rateLimited(retryAfter: wait))
            return
        }
        // JSON is UTF-8, which never holds a NUL byte; Foundation's parser also reads UTF-16 and
        // UTF-32, which would slip past the checks made on the bytes (nesting depth, the removal of
        // a V1 password), so such a body is refused before any of them.
        if request.body.contains(0) {
            return answer(route, responder, .error(status: 400, reason: "the body must be JSON in UTF-8"))
        }
        switch route {
        case .health:
            answer(route, responder, .json(["status": "ok"]))
        case .ready:
            readiness(responder)
        case .metrics:
            answer(route, responder, .text(Metrics.shared.exposition()))
        case .openAPI:
            answer(route, responder, .json(data: OpenAPIDocument.json))
        case .appleNotification:
            acceptNotification(request, responder)
        case .receiptUpload:
            acceptReceipt(request, principal, responder)
        case .offerSignature:
            offers.sign(request, principal: principal, responder)
        case .subscription(let key):
            if let environment = request.queryValue("environment"), !SubscriptionKey.environments.contains(environment) {
                return answer(route, responder, .error(status: 400, reason: "environment must be one of \(SubscriptionKey.environments.joined(separator: ", "))"))
            }
            guard let limit = EdgeChecks.ledgerLimit(request.queryValue("limit"), absent: EdgeChecks.subscriptionLedgerLimit) else {
                return answer(route, responder, .error(status: 400, reason: "limit must be an integer in 1...\(EdgeChecks.maxLedgerLimit)"))
            }
            read(route, responder) {
                try $0.subscription(key, environment: request.queryValue("environment"), ledgerLimit: limit, readableBy: principal)
            }
        case .userMembership(let user):
            read(route, responder) { try $0.userMembership(user) }
        case .userOffers(let user):
            offers.userOffers(user: user, request, responder)
        case .userLedger(let user):
            guard let limit = EdgeChecks.ledgerLimit(request.queryValue("limit")) else {
                return answer(route, responder, .error(status: 400, reason: "limit must be an integer in 1...\(EdgeChecks.maxLedgerLimit)"))
            }
            guard let before = EdgeChecks.entryId(request.queryValue("before")) else {
                return answer(route, responder, .error(status: 400, reason: "before must be a ledger entry id (1...\(Int64.max))"))
            }
            read(route, responder) { try $0.userLedger(user, limit: limit, before: before, readableBy: principal) }
        case .adminUser(let user):
            read(route, responder) { try $0.supportView(user) }
        case .adminWebhooks:
            admin(route, responder) { try $0.webhookList() }
        case .adminWebhookDeliveries(let endpoint):
            admin(route, responder) { try $0.webhookDeliveries(endpoint, request) }
        case .adminReport(let report):
            admin(route, responder) { try $0.report(report, request) }
        case .adminServerAPI:
            // Refresh and consumption reads that ask Apple: served only when configured (issue 16).
            guard let serverAPI = config.serverAPIAdmin else {
                return answer(route, responder, .error(status: 404, reason: "App Store Server API admin routes are not enabled (\(Setting.ingestServerAPI)=on)"))
            }
            // They wait on Apple (and write PostgreSQL) for seconds: off the HTTP threads, which
            // Apple's own notifications need (admin calls are rate limited per credential above).
            guard appleCalls.enter() else {
                return answer(route, responder, .error(status: 503, reason: "too many admin requests waiting on Apple; retry later"))
            }
            let segments = request.path.split(separator: "/").map(String.init)
            DispatchQueue.global().async { [self] in
                defer { appleCalls.leave() }
                answer(route, responder, serverAPI.answer(request, segments: segments) ?? Self.noRoute(request))
            }
        case .wrongMethod(let allowed):
            var response = HTTPResponse.error(status: 405, reason: "use \(allowed)")
            response.headers.set(name: "Allow", value: allowed)
            answer(route, responder, response)
        case .badPath(let reason):
            answer(route, responder, .error(status: 400, reason: reason))
        case .notFound:
            answer(route, responder, Self.noRoute(request))
        }
    }

    /// Answers and counts the answer in `storeledger_ingest_requests_total`.
    private func answer(_ route: IngestRoute, _ responder: HTTPResponder, _ response: HTTPResponse) {
        if responder.respond(response) { count(route.metricName, response.status) }
    }

    private static func noRoute(_ request: HTTPRequest) -> HTTPResponse {
        .error(status: 404, reason: "no route for \(request.method) \(String(request.path.prefix(200)))")
    }

    private func count(_ route: String, _ status: Int) {
        Metrics.shared.increment("storeledger_ingest_requests_total", ["route": route, "status": String(status)])
    }

    /// Apple's POST. V2 is kept byte for byte (decode verifies its signature). V1 carries the app's
    /// shared secret as `password`: checked here (401 on mismatch), then removed from the bytes
    /// before they are written anywhere.
    private func acceptNotification(_ request: HTTPRequest, _ responder: HTTPResponder) {
        if EdgeChecks.isPlainV2Notification(request.body) {
            writeV2(request, responder)
            return
        }
        // Apple's V1 bodies are plain JSON: read in one pass; anything else takes the full checks.
        let password: String?, withoutPassword: [UInt8]?
        if let plain = EdgeChecks.plainV1Notification(request.body) {
            (password, withoutPassword) = (plain.password, plain.withoutPassword)
        } else {
            switch EdgeChecks.object(request.body).flatMap(EdgeChecks.notification) {
            case .failure(let refusal):
                count("notification", 400)
                responder.respond(.error(status: 400, reason: refusal.reason))
                return
            case .success(let object):
                if object["signedPayload"] != nil {
                    writeV2(request, responder)
                    return
                }
                (password, withoutPassword) = (object["password"] as? String, nil)
            }
        }
        if !security.v1SharedSecrets.isEmpty {
            guard let password, V1Secret.matches(password, security.v1SharedSecrets) else {
                count("notification", 401)
                logger.debug("v1_secret_mismatch", ["remote": .string(request.remoteAddress)])
                responder.respond(.error(status: 401, reason: "V1 notification: password does not match the configured shared secret"))
                return
            }
        }
        guard let stripped = withoutPassword ?? V1Secret.removingPassword(request.body) else {
            count("notification", 400)
            responder.respond(.error(status: 400, reason: "V1 notification: password could not be removed (write the key plainly, once)"))
            return
        }
        let verified = security.v1SharedSecrets.isEmpty ? [] : [KafkaHeader(name: RecordHeader.v1SecretVerified, value: Array("true".utf8))]
        write(request, body: stripped, extraHeaders: verified, topic: Topic.notificationsRaw, source: .appStoreNotification,
              route: "notification", responder)
    }

    /// A V2 body as it arrived (decode verifies its signature). Apple's are tens of kilobytes (three
    /// JWS with their certificate chains); anything far larger on this unauthenticated route is not
    /// Apple's and would only fill the raw topic and the dead letters.
    private func writeV2(_ request: HTTPRequest, _ responder: HTTPResponder) {
        guard request.body.count <= EdgeChecks.maxV2NotificationBytes else {
            count("notification", 413)
            responder.respond(.error(status: 413, reason: "a V2 notification is at most \(EdgeChecks.maxV2NotificationBytes) bytes"))
            return
        }
        write(request, body: request.body, topic: Topic.notificationsRaw, source: .appStoreNotification, route: "notification", responder)
    }

    /// An app's receipt upload: `{"user_id": ..., "receipt_data": base64, ...}`. Client fields such as
    /// `transactionDate` may be missing (R7); only the two required ones are checked here. A user
    /// token uploads for its own user only: whoever uploads a receipt links its subscription.
    private func acceptReceipt(_ request: HTTPRequest, _ principal: Principal?, _ responder: HTTPResponder) {
        let user: String?
        if let plain = EdgeChecks.plainReceiptUploadUser(request.body) {
            user = plain
        } else {
            switch EdgeChecks.object(request.body).flatMap(EdgeChecks.receiptUpload) {
            case .failure(let refusal):
                count("receipt", 400)
                responder.respond(.error(status: 400, reason: refusal.reason))
                return
            case .success(let object):
                user = object["user_id"] as? String
            }
        }
        if let principal, let user, !AccessPolicy.actsFor(principal, user: user) {
            count("receipt", 403)
            responder.respond(.error(status: 403, reason: "a user token uploads receipts for its own user only"))
            return
        }
        // Apps that copy verifyReceipt's request shape send the app's shared secret as `password`:
        // it is cut out here like a V1 notification's, so no topic or dead letter holds it. A key
        // spelled with escapes is found by the parse inside `removingPassword`.
        var stored = request.body
        if Self.contains(stored, "password") || Self.contains(stored, "\\u") {
            guard let stripped = V1Secret.removingPassword(stored) else {
                count("receipt", 400)
                responder.respond(.error(status: 400, reason: "receipt upload: password could not be removed (write the key plainly, once; better, do not send it)"))
                return
            }
            stored = stripped
        }
        write(request, body: stored, topic: Topic.receiptsRaw, source: .appReceipt, route: "receipt", responder)
    }

    /// Whether `needle` (ASCII) occurs in `bytes`.
    static func contains(_ bytes: [UInt8], _ needle: StaticString) -> Bool {
        let pattern = Array(UnsafeBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount))
        guard let first = pattern.first, bytes.count >= pattern.count else { return false }
        var index = 0
        while index <= bytes.count - pattern.count {
            if bytes[index] == first, bytes[index..<(index + pattern.count)].elementsEqual(pattern) { return true }
            index += 1
        }
        return false
    }

    private func write(_ request: HTTPRequest, body: [UInt8], extraHeaders: [KafkaHeader] = [], topic: String, source: RawSource,
                       route: String, _ responder: HTTPResponder) {
        let receivedAt = Int64(request.receivedAt.timeIntervalSince1970 * 1000)
        var headers = [
            KafkaHeader(name: RecordHeader.receivedAt, value: Array(String(receivedAt).utf8)),
            KafkaHeader(name: RecordHeader.source, value: Array(source.rawValue.utf8)),
        ]
        for field in ForwardedHeaders.select(request.headers) {
            headers.append(KafkaHeader(name: RecordHeader.httpPrefix + field.name, value: Array(field.value.utf8)))
        }
        headers += extraHeaders
        let logger = self.logger
        producer.send(topic: topic, key: nil, value: body, headers: headers) { [self] result in
            switch result {
            case .success(let report):
                if responder.respond(.accepted(partition: report.partition, offset: report.offset)) {
                    count(route, 200)
                }
            case .failure(let error):
                if responder.respond(.error(status: 503, reason: "could not confirm the write to the broker; retry later")) {
                    count(route, 503)
                    logger.warning("write_unconfirmed", ["topic": .string(topic), "error": .string(error.description)])
                }
                if let fatal = producer.fatalFailure { producerFailed(fatal) }
            }
        }
        deadlines.watch(responder, route: route)
    }

    /// The producer failed for good: every later write would get 503. Ingest stops (exit code 1) so
    /// that whatever runs it starts a fresh process with a new producer; once is enough.
    private func producerFailed(_ reason: String) {
        guard !failed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.error("kafka_producer_failed", ["error": .string(reason), "effect": "ingest stops; restart it"])
        onProducerFailure()
    }

    /// Ready while the broker answers (every write needs it: without it each POST gets 503) and,
    /// when configured, PostgreSQL does (the reads). One check at a time, off the HTTP threads and
    /// outside the read API's places (ReadinessProbe); its caller gets 503 if it outlasts the read timeout.
    private func readiness(_ responder: HTTPResponder) {
        let route = IngestRoute.ready
        switch readinessProbe.decide(nowMs: currentTimeMs()) {
        case .answer(let response):
            answer(route, responder, response)
        case .check:
            readinessReads.run(responder, { [self] in
                let response = checkReadiness()
                readinessProbe.finished(response, nowMs: currentTimeMs())
                return response
            }, answered: { [self] status in count(route.metricName, status) })
        }
    }

    private func checkReadiness() -> HTTPResponse {
        guard producer.brokerAnswers(topic: Topic.notificationsRaw, timeout: .seconds(2)) else {
            return .error(status: 503, reason: "broker unavailable")
        }
        guard let reads else { return .json(["status": "ready", "database": "not configured"]) }
        do {
            try reads.ping()
            return .json(["status": "ready"])
        } catch {
            return .error(status: 503, reason: "database unavailable")
        }
    }

    /// The operator reads, bounded like `read`.
    private func admin(_ route: IngestRoute, _ responder: HTTPResponder,
                       _ body: @escaping @Sendable (AdminReadRoutes) throws -> HTTPResponse) {
        guard let routes = config.adminReads else {
            responder.respond(.error(status: 503, reason: "operator reads need DATABASE_URL"))
            return
        }
        let name = route.metricName
        bounded.run(responder, { try body(routes) }, answered: { [self] status in count(name, status) })
    }

    private func read(_ route: IngestRoute, _ responder: HTTPResponder,
                      _ body: @escaping @Sendable (MembershipReads) throws -> HTTPResponse) {
        guard let reads else {
            responder.respond(.error(status: 503, reason: "read API needs DATABASE_URL"))
            return
        }
        let name = route.metricName
        bounded.run(responder, { try body(reads) }, answered: { [self] status in count(name, status) })
    }
}

extension HTTPResponse {
    /// The answer to an acknowledged write, `{"offset":"<partition>@<offset>","status":"accepted"}`:
    /// the bytes `.json` gives this object (sorted keys), without a `JSONEncoder` per request.
    static func accepted(partition: Int32, offset: Int64) -> HTTPResponse {
        HTTPResponse(status: 200, headers: ["Content-Type": "application/json"],
                     body: Array(#"{"offset":"\#(partition)@\#(offset)","status":"accepted"}"#.utf8))
    }
}

/// Breaks the init cycle between the server's handler and the service.
private final class Routes: Sendable {
    let service = Mutex<IngestService?>(nil)
    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        guard let service = service.withLock({ $0 }) else {
            responder.respond(.error(status: 503, reason: "starting"))
            return
        }
        service.handle(request, responder)
    }
}

/// What ingest checks in a request before anything reaches a topic or a query (STYLE.md practice 12,
/// docs/limits.md): the body is a JSON object nested at most `EventBounds.maxJSONDepth` deep, the
/// fields it can interpret have the right JSON type, and every id passes `EventBounds.identifier`.
/// Decode checks everything else and dead-letters what fails. Reasons never echo a value.
enum EdgeChecks {
    struct Refusal: Error { let reason: String }

    static func object(_ body: [UInt8]) -> Result<[String: Any], Refusal> {
        if let failure = EventBounds.jsonDepth(body) { return .failure(Refusal(reason: failure.reason)) }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            return .failure(Refusal(reason: "body is not a JSON object"))
        }
        return .success(object)
    }

    /// `{"user_id", "receipt_data", ...}`; other client fields may be missing (R7) and are not read.
    /// Apple's V2 notifications are ~10–30 KB; this leaves room for years of growth.
    static let maxV2NotificationBytes = 256 * 1024

    static func receiptUpload(_ object: [String: Any]) -> Result<[String: Any], Refusal> {
        guard let user = object["user_id"] as? String, !user.isEmpty else {
            return .failure(Refusal(reason: object["user_id"] == nil || object["user_id"] as? String == ""
                ? "user_id (a non-empty string) is required" : "user_id must be a string, not \(jsonType(object["user_id"]!))"))
        }
        if let failure = EventBounds.identifier(user, field: "user_id") { return .failure(Refusal(reason: failure.reason)) }
        guard let receipt = object["receipt_data"] as? String, !receipt.isEmpty else {
            return .failure(Refusal(reason: "receipt_data (base64 string) is required"))
        }
        return .success(object)
    }

    /// True for a V2 body as Apple sends it, `{"signedPayload":"<compact JWS>"}` (JSON whitespace
    /// allowed around the tokens), recognised in one pass over the bytes. `object` + `notification`
    /// accept exactly such a body too (one level deep, one string of base64url and dots, which need
    /// no escapes), but through a Foundation dictionary; anything else returns false and takes them.
    static func isPlainV2Notification(_ body: [UInt8]) -> Bool {
        body.withUnsafeBufferPointer { bytes in
            var index = 0
            func skipWhitespace() {
                while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                    index += 1
                }
            }
            func take(_ expected: StaticString) -> Bool {
                let count = expected.utf8CodeUnitCount
                guard bytes.count - index >= count,
                      memcmp(bytes.baseAddress! + index, expected.utf8Start, count) == 0 else { return false }
                index += count
                return true
            }
            skipWhitespace()
            guard take("{") else { return false }
            skipWhitespace()
            guard take(#""signedPayload""#) else { return false }
            skipWhitespace()
            guard take(":") else { return false }
            skipWhitespace()
            guard take(#"""#) else { return false }
            let start = index
            while index < bytes.count, isCompactJWSByte(bytes[index]) { index += 1 }
            guard index > start, take(#"""#) else { return false }
            skipWhitespace()
            guard take("}") else { return false }
            skipWhitespace()
            return index == bytes.count
        }
    }

    /// V2 `{"signedPayload"}` or a V1 body: the fields a router and a decoder read, by JSON type.
    static func notification(_ object: [String: Any]) -> Result<[String: Any], Refusal> {
        if let payload = object["signedPayload"] {
            guard let text = payload as? String else {
                return .failure(Refusal(reason: "signedPayload must be a string, not \(jsonType(payload))"))
            }
            guard !text.isEmpty, text.utf8.allSatisfy(isCompactJWSByte) else {
                return .failure(Refusal(reason: "signedPayload is not a compact JWS (base64url segments joined by dots)"))
            }
            return .success(object)
        }
        for (key, field) in v1Fields {
            if let value = object[key], !(value is NSNull), let reason = field.refusal(key, value) {
                return .failure(Refusal(reason: reason))
            }
        }
        return .success(object)
    }

    /// The V1 fields a router and a decoder read, and the JSON types each may have.
    static let v1Fields: [(String, Field)] = [
        ("notification_type", .text), ("password", .text), ("environment", .text), ("bvrs", .text),
        ("bid", .identifier), ("auto_renew_product_id", .identifier), ("original_transaction_id", .identifierOrNumber),
        ("auto_renew_status", .textOrBool), ("auto_renew_status_change_date_ms", .textOrNumber),
        ("unified_receipt", .object), ("latest_receipt_info", .objectOrArray), ("latest_expired_receipt_info", .objectOrArray),
    ]

    static let maxLedgerLimit = 10_000
    /// A subscription's view carries its newest 1,000 ledger lines unless `?limit=` says otherwise.
    static let subscriptionLedgerLimit = 1_000

    /// 429 over a credential's rate, with the whole seconds until a token is back.
    static func rateLimited(retryAfter wait: Int) -> HTTPResponse {
        var response = HTTPResponse.error(status: 429, reason: "rate limit of this credential exceeded; retry after \(wait) s")
        response.headers.set(name: "Retry-After", value: String(wait))
        return response
    }

    /// An optional ledger entry id (`before=`, `entry=`): `.some(nil)` when absent, nil when it is no id.
    static func entryId(_ text: String?) -> Int64?? {
        guard let text else { return .some(nil) }
        guard text.utf8.count <= 19, text.utf8.allSatisfy({ (48...57).contains($0) }), let id = Int64(text), id > 0 else { return nil }
        return .some(id)
    }

    /// `?limit=` of the ledger: absent means `absent` (200 for a user's ledger); otherwise an integer in 1...maxLedgerLimit.
    static func ledgerLimit(_ text: String?, absent: Int = 200) -> Int? {
        guard let text else { return absent }
        guard text.utf8.count <= 6, let value = Int(text), (1...maxLedgerLimit).contains(value) else { return nil }
        return value
    }

    /// A path parameter (`/v1/users/{id}`, `/v1/subscriptions/{key}`), as the ids it names are bounded.
    static func pathIdentifier(_ value: String, _ name: String, maxBytes: Int = EventBounds.maxIdentifierBytes) -> String? {
        EventBounds.identifier(value, field: name, maxBytes: maxBytes)?.reason
    }

    /// An optional request field that names an id: absent or null is fine, else a bounded string.
    static func optionalIdentifier(_ value: String?, _ key: String) -> String? {
        value.flatMap { EventBounds.identifier($0, field: key, required: false)?.reason }
    }

    enum Field {
        case text, identifier, identifierOrNumber, textOrBool, textOrNumber, object, objectOrArray

        /// Only the casts this field kind allows are tried, so a container is never tested with
        /// `is NSNumber` (on Linux that bridges the whole Swift dictionary or array to Foundation
        /// objects first: ~6 % of ingest's CPU for V1 bodies when every field was tried every way).
        func refusal(_ key: String, _ value: Any) -> String? {
            switch self {
            case .text, .textOrBool, .textOrNumber:
                if let text = value as? String { return EventBounds.text(text, field: key)?.reason }
                if self != .text, value is NSNumber { return nil }
            case .identifier, .identifierOrNumber:
                if let id = value as? String { return EventBounds.identifier(id, field: key, required: false)?.reason }
                if self == .identifierOrNumber, value is NSNumber { return nil }
            case .object:
                if value is [String: Any] { return nil }
            case .objectOrArray:
                if value is [String: Any] || value is [Any] { return nil }
            }
            let expected = switch self {
            case .text, .identifier: "a string"
            case .identifierOrNumber, .textOrNumber: "a string or a number"
            case .textOrBool: "a string or a boolean"
            case .object: "an object"
            case .objectOrArray: "an object or an array"
            }
            return "\(key) must be \(expected), not \(jsonType(value))"
        }
    }

    static func jsonType(_ value: Any) -> String {
        switch value {
        case is String: return "a string"
        case is NSNumber: return "a number or boolean"
        case is [Any]: return "an array"
        case is [String: Any]: return "an object"
        case is NSNull: return "null"
        default: return "another JSON type"
        }
    }

    /// base64url (RFC 7515 compact serialization) and the dots between its three segments.
    private static func isCompactJWSByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "="):
            return true
        default:
            return false
        }
    }
}
