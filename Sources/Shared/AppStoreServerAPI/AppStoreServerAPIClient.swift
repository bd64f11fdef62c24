import AppleDecoding
import Foundation

/// The App Store Server API, the endpoints Apple's app-store-server-library covers for a
/// subscription backend. Synchronous like the verifyReceipt client: callers are blocking loops
/// (a worker, a CLI command). Every signed item of every answer is verified by the same
/// `SignedDataVerifier` as notifications before it is returned; every count, length and cursor
/// is bounded (`APILimits`); 429 and 5xx are retried with capped backoff, honouring `Retry-After`;
/// an id production does not know is asked of the sandbox (`sandboxFallback`).
/// https://developer.apple.com/documentation/appstoreserverapi
public struct AppStoreServerAPIClient: Sendable {
    public struct Settings: Sendable {
        public var baseURLs: APIBaseURLs
        /// Asked first; with Production, ids it does not know are asked of the Sandbox.
        public var environment: AppStoreEnvironment
        public var sandboxFallback: Bool
        public var timeout: TimeInterval
        public var retry: RetryPolicy
        /// Pages one history walk reads at most (20 items each at Apple).
        public var maxPages: Int
        public var userAgent: String

        public init(baseURLs: APIBaseURLs = .apple, environment: AppStoreEnvironment = .production, sandboxFallback: Bool = true,
                    timeout: TimeInterval = 30, retry: RetryPolicy = RetryPolicy(), maxPages: Int = 50,
                    userAgent: String = "StoreLedger/1.0") {
            self.baseURLs = baseURLs
            self.environment = environment
            self.sandboxFallback = sandboxFallback
            self.timeout = timeout
            self.retry = retry
            self.maxPages = max(1, maxPages)
            self.userAgent = userAgent
        }
    }

    public let settings: Settings
    let transport: any APITransport
    let tokens: any APITokenProvider
    let verifier: SignedDataVerifier
    let sleep: @Sendable (Duration) -> Void
    let now: @Sendable () -> Date

    public init(settings: Settings, tokens: any APITokenProvider, verifier: SignedDataVerifier,
                transport: any APITransport = URLSessionAPITransport(),
                sleep: @escaping @Sendable (Duration) -> Void = { Thread.sleep(forTimeInterval: Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18) },
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.settings = settings
        self.tokens = tokens
        self.verifier = verifier
        self.transport = transport
        self.sleep = sleep
        self.now = now
    }

    // MARK: - Transactions

    /// Get Transaction Info: `GET /inApps/v1/transactions/{transactionId}`.
    public func transactionInfo(transactionId: String, environment: AppStoreEnvironment? = nil) -> Result<TransactionInfo, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in
                perform(Endpoint(method: "GET", path: "/inApps/v1/transactions/\(id)"), env)
                    .flatMap { decode(TransactionInfoResponse.self, $0, env) }
                    .flatMap { response in
                        guard let signed = response.signedTransactionInfo else {
                            return .failure(APIFailure(.invalidResponse, "no signedTransactionInfo", environment: env))
                        }
                        return verifyTransactions([signed], env).map {
                            TransactionInfo(environment: env, transaction: $0[0], signedTransactionInfo: signed)
                        }
                    }
            }
        }
    }

    /// One page of Get Transaction History v2: `GET /inApps/v2/history/{transactionId}?revision=`.
    public func transactionHistoryPage(transactionId: String, revision: String? = nil,
                                       request: TransactionHistoryRequest = TransactionHistoryRequest(),
                                       environment: AppStoreEnvironment? = nil) -> Result<TransactionPage, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in historyPage(id: id, revision: revision, request: request, env) }
        }
    }

    /// Every page of the history from `revision` on (nil: from the start), at most `maxPages`.
    public func transactionHistory(transactionId: String, since revision: String? = nil,
                                   request: TransactionHistoryRequest = TransactionHistoryRequest(),
                                   environment: AppStoreEnvironment? = nil) -> Result<TransactionWalk, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in
                walk(start: revision, env) { historyPage(id: id, revision: $0, request: request, env) }
            }
        }
    }

    /// Get Refund History: `GET /inApps/v2/refund/lookup/{transactionId}?revision=`.
    public func refundHistoryPage(transactionId: String, revision: String? = nil,
                                  environment: AppStoreEnvironment? = nil) -> Result<TransactionPage, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in refundPage(id: id, revision: revision, env) }
        }
    }

    public func refundHistory(transactionId: String, environment: AppStoreEnvironment? = nil) -> Result<TransactionWalk, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in
                walk(start: nil, env) { refundPage(id: id, revision: $0, env) }
            }
        }
    }

    /// Look Up Order ID: `GET /inApps/v1/lookup/{orderId}`. Status 1 (invalid) is an answer, not a failure.
    public func lookUpOrderId(_ orderId: String, environment: AppStoreEnvironment? = nil) -> Result<OrderLookup, APIFailure> {
        Endpoint.pathId(orderId, "orderId").flatMap { id in
            inEnvironments(environment, fallback: false) { env in
                perform(Endpoint(method: "GET", path: "/inApps/v1/lookup/\(id)"), env)
                    .flatMap { decode(OrderLookupResponse.self, $0, env) }
                    .flatMap { response in
                        verifyTransactions(response.signedTransactions ?? [], env).map {
                            OrderLookup(rawStatus: response.rawStatus, transactions: $0)
                        }
                    }
            }
        }
    }

    /// Send Consumption Information (v2): `PUT /inApps/v2/transactions/consumption/{transactionId}`.
    public func sendConsumptionInformation(transactionId: String, _ request: ConsumptionRequest,
                                           environment: AppStoreEnvironment? = nil) -> Result<Void, APIFailure> {
        if let problem = request.problem { return .failure(APIFailure(.invalidRequest, problem)) }
        return Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            Endpoint.json(request).flatMap { body in
                inEnvironments(environment, fallback: true) { env in
                    perform(Endpoint(method: "PUT", path: "/inApps/v2/transactions/consumption/\(id)", body: body), env).map { _ in () }
                }
            }
        }
    }

    /// Set App Account Token: `PUT /inApps/v1/transactions/{originalTransactionId}/appAccountToken`.
    public func setAppAccountToken(originalTransactionId: String, appAccountToken: UUID,
                                   environment: AppStoreEnvironment? = nil) -> Result<Void, APIFailure> {
        Endpoint.pathId(originalTransactionId, "originalTransactionId").flatMap { id in
            Endpoint.json(UpdateAppAccountTokenRequest(appAccountToken: appAccountToken.uuidString.lowercased())).flatMap { body in
                inEnvironments(environment, fallback: true) { env in
                    perform(Endpoint(method: "PUT", path: "/inApps/v1/transactions/\(id)/appAccountToken", body: body), env).map { _ in () }
                }
            }
        }
    }

    // MARK: - Subscriptions

    /// Get All Subscription Statuses: `GET /inApps/v1/subscriptions/{transactionId}?status=`.
    public func subscriptionStatuses(transactionId: String, statuses: [SubscriptionStatus] = [],
                                     environment: AppStoreEnvironment? = nil) -> Result<SubscriptionStatuses, APIFailure> {
        Endpoint.pathId(transactionId, "transactionId").flatMap { id in
            inEnvironments(environment, fallback: true) { env in
                let endpoint = Endpoint(method: "GET", path: "/inApps/v1/subscriptions/\(id)",
                                        query: statuses.map { ("status", String($0.rawValue)) })
                return perform(endpoint, env)
                    .flatMap { decode(StatusResponse.self, $0, env) }
                    .flatMap { verifyStatuses($0, env) }
            }
        }
    }

    /// Extend a Subscription Renewal Date: `PUT /inApps/v1/subscriptions/extend/{originalTransactionId}`.
    public func extendRenewalDate(originalTransactionId: String, _ request: ExtendRenewalDateRequest,
                                  environment: AppStoreEnvironment? = nil) -> Result<ExtendRenewalDateResponse, APIFailure> {
        if let problem = request.problem { return .failure(APIFailure(.invalidRequest, problem)) }
        return Endpoint.pathId(originalTransactionId, "originalTransactionId").flatMap { id in
            Endpoint.json(request).flatMap { body in
                inEnvironments(environment, fallback: true) { env in
                    perform(Endpoint(method: "PUT", path: "/inApps/v1/subscriptions/extend/\(id)", body: body), env)
                        .flatMap { decode(ExtendRenewalDateResponse.self, $0, env) }
                }
            }
        }
    }

    /// Extend Subscription Renewal Dates for All Active Subscribers: `POST /inApps/v1/subscriptions/extend/mass`.
    /// Returns Apple's request identifier (ours, echoed).
    public func extendRenewalDateForAllActiveSubscribers(_ request: MassExtendRenewalDateRequest,
                                                         environment: AppStoreEnvironment? = nil) -> Result<String, APIFailure> {
        if let problem = request.problem { return .failure(APIFailure(.invalidRequest, problem)) }
        return Endpoint.pathId(request.productId, "productId").flatMap { _ in
            Endpoint.json(request).flatMap { body in
                inEnvironments(environment, fallback: false) { env in
                    perform(Endpoint(method: "POST", path: "/inApps/v1/subscriptions/extend/mass", body: body), env)
                        .flatMap { decode(MassExtendRenewalDateResponse.self, $0, env) }
                        .flatMap { cursor($0.requestIdentifier, "requestIdentifier", env, required: true).map { $0! } }
                }
            }
        }
    }

    /// Get Status of Subscription Renewal Date Extensions: `GET /inApps/v1/subscriptions/extend/mass/{productId}/{requestIdentifier}`.
    public func massExtensionStatus(productId: String, requestIdentifier: String,
                                    environment: AppStoreEnvironment? = nil) -> Result<MassExtendRenewalDateStatusResponse, APIFailure> {
        Endpoint.pathId(productId, "productId").flatMap { product in
            Endpoint.pathId(requestIdentifier, "requestIdentifier").flatMap { request in
                inEnvironments(environment, fallback: false) { env in
                    perform(Endpoint(method: "GET", path: "/inApps/v1/subscriptions/extend/mass/\(product)/\(request)"), env)
                        .flatMap { decode(MassExtendRenewalDateStatusResponse.self, $0, env) }
                        .flatMap { status in
                            let counts = [status.succeededCount, status.failedCount].compactMap { $0 }
                            guard counts.allSatisfy({ $0 >= 0 }) else {
                                return .failure(APIFailure(.invalidResponse, "negative extension count", environment: env))
                            }
                            return .success(status)
                        }
                }
            }
        }
    }

    // MARK: - Notifications

    /// One page of Get Notification History: `POST /inApps/v1/notifications/history?paginationToken=`.
    public func notificationHistoryPage(_ request: NotificationHistoryRequest, paginationToken: String? = nil,
                                        environment: AppStoreEnvironment? = nil) -> Result<NotificationHistoryPage, APIFailure> {
        if let problem = historyProblem(request) { return .failure(APIFailure(.invalidRequest, problem)) }
        return inEnvironments(environment, fallback: false) { env in notificationPage(request, token: paginationToken, env) }
    }

    /// Every page of the notification history for `request`, at most `maxPages`.
    public func notificationHistory(_ request: NotificationHistoryRequest,
                                    environment: AppStoreEnvironment? = nil) -> Result<NotificationHistoryWalk, APIFailure> {
        if let problem = historyProblem(request) { return .failure(APIFailure(.invalidRequest, problem)) }
        return inEnvironments(environment, fallback: false) { env in
            var guardrail = PageCursor(maxPages: settings.maxPages)
            var entries: [NotificationHistoryEntry] = []
            var token: String?
            repeat {
                switch notificationPage(request, token: token, env) {
                case .failure(let failure): return .failure(failure)
                case .success(let page):
                    entries += page.entries
                    token = guardrail.next(hasMore: page.hasMore, cursor: page.paginationToken)
                }
            } while token != nil
            return .success(NotificationHistoryWalk(environment: env, entries: entries, pages: guardrail.pages, truncated: guardrail.truncated))
        }
    }

    /// Request a Test Notification: `POST /inApps/v1/notifications/test`; returns the token to check it with.
    public func requestTestNotification(environment: AppStoreEnvironment? = nil) -> Result<String, APIFailure> {
        inEnvironments(environment, fallback: false) { env in
            perform(Endpoint(method: "POST", path: "/inApps/v1/notifications/test"), env)
                .flatMap { decode(SendTestNotificationResponse.self, $0, env) }
                .flatMap { cursor($0.testNotificationToken, "testNotificationToken", env, required: true).map { $0! } }
        }
    }

    /// Get Test Notification Status: `GET /inApps/v1/notifications/test/{testNotificationToken}`.
    public func testNotificationStatus(token: String, environment: AppStoreEnvironment? = nil) -> Result<TestNotificationStatus, APIFailure> {
        Endpoint.pathId(token, "testNotificationToken").flatMap { id in
            inEnvironments(environment, fallback: false) { env in
                perform(Endpoint(method: "GET", path: "/inApps/v1/notifications/test/\(id)"), env)
                    .flatMap { decode(CheckTestNotificationResponse.self, $0, env) }
                    .flatMap { response in
                        guard let signed = response.signedPayload else {
                            return .failure(APIFailure(.invalidResponse, "no signedPayload", environment: env))
                        }
                        return verifyNotification(signed, attempts: response.sendAttempts, env).map {
                            TestNotificationStatus(notification: $0.notification, signedPayload: signed, sendAttempts: $0.sendAttempts)
                        }
                    }
            }
        }
    }
}

// MARK: - Pages, verification, bounds

extension AppStoreServerAPIClient {
    func historyPage(id: String, revision: String?, request: TransactionHistoryRequest, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        var query = request.queryItems
        if let revision { query.insert(("revision", revision), at: 0) }
        return perform(Endpoint(method: "GET", path: "/inApps/v2/history/\(id)", query: query), env)
            .flatMap { decode(HistoryResponse.self, $0, env) }
            .flatMap { response in
                if let problem = appProblem(bundleId: response.bundleId, environment: response.environment, env) {
                    return .failure(APIFailure(.invalidResponse, problem, environment: env))
                }
                return page(response.signedTransactions, revision: response.revision, hasMore: response.hasMore, env)
            }
    }

    func refundPage(id: String, revision: String?, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        perform(Endpoint(method: "GET", path: "/inApps/v2/refund/lookup/\(id)", query: revision.map { [("revision", $0)] } ?? []), env)
            .flatMap { decode(RefundHistoryResponse.self, $0, env) }
            .flatMap { page($0.signedTransactions, revision: $0.revision, hasMore: $0.hasMore, env) }
    }

    func page(_ signed: [String]?, revision: String?, hasMore: Bool?, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        cursor(revision, "revision", env, required: false).flatMap { revision in
            verifyTransactions(signed ?? [], env).map {
                TransactionPage(environment: env, revision: revision, hasMore: hasMore ?? false, transactions: $0,
                                signedTransactions: signed ?? [])
            }
        }
    }

    func walk(start: String?, _ env: AppStoreEnvironment, _ fetch: (String?) -> Result<TransactionPage, APIFailure>) -> Result<TransactionWalk, APIFailure> {
        var guardrail = PageCursor(maxPages: settings.maxPages)
        var transactions: [VerifiedSignedData] = []
        var signed: [String] = []
        var revision = start
        var next = start
        repeat {
            switch fetch(next) {
            case .failure(let failure): return .failure(failure)
            case .success(let page):
                transactions += page.transactions
                signed += page.signedTransactions
                if let pageRevision = page.revision { revision = pageRevision }
                next = guardrail.next(hasMore: page.hasMore, cursor: page.revision)
            }
        } while next != nil
        return .success(TransactionWalk(environment: env, transactions: transactions, signedTransactions: signed, revision: revision,
                                        pages: guardrail.pages, truncated: guardrail.truncated))
    }

    func notificationPage(_ request: NotificationHistoryRequest, token: String?, _ env: AppStoreEnvironment) -> Result<NotificationHistoryPage, APIFailure> {
        Endpoint.json(request).flatMap { body in
            perform(Endpoint(method: "POST", path: "/inApps/v1/notifications/history",
                             query: token.map { [("paginationToken", $0)] } ?? [], body: body), env)
        }
        .flatMap { decode(NotificationHistoryResponse.self, $0, env) }
        .flatMap { response in
            let items = response.notificationHistory ?? []
            guard items.count <= APILimits.maxItemsPerPage else {
                return .failure(APIFailure(.invalidResponse, "\(items.count) notifications in one page (limit \(APILimits.maxItemsPerPage))", environment: env))
            }
            return cursor(response.paginationToken, "paginationToken", env, required: false).flatMap { token in
                var entries: [NotificationHistoryEntry] = []
                for item in items {
                    guard let signed = item.signedPayload else {
                        return .failure(APIFailure(.invalidResponse, "notification history item without signedPayload", environment: env))
                    }
                    switch verifyNotification(signed, attempts: item.sendAttempts, env) {
                    case .failure(let failure): return .failure(failure)
                    case .success(let entry): entries.append(entry)
                    }
                }
                return .success(NotificationHistoryPage(environment: env, paginationToken: token, hasMore: response.hasMore ?? false, entries: entries))
            }
        }
    }

    func verifyNotification(_ signed: String, attempts: [SendAttemptItem]?, _ env: AppStoreEnvironment) -> Result<NotificationHistoryEntry, APIFailure> {
        let attempts = attempts ?? []
        guard attempts.count <= APILimits.maxSendAttempts else {
            return .failure(APIFailure(.invalidResponse, "\(attempts.count) send attempts (limit \(APILimits.maxSendAttempts))", environment: env))
        }
        guard signed.utf8.count <= APILimits.maxSignedDataBytes else {
            return .failure(APIFailure(.invalidResponse, "signedPayload over \(APILimits.maxSignedDataBytes) bytes", environment: env))
        }
        switch verifier.verifyNotification(signed) {
        case .failure(let failure):
            return .failure(APIFailure(.invalidResponse, "notification does not verify: \(failure)", environment: env))
        case .success(let verified):
            return .success(NotificationHistoryEntry(signedPayload: signed, notification: verified, sendAttempts: attempts))
        }
    }

    func verifyTransactions(_ signed: [String], _ env: AppStoreEnvironment) -> Result<[VerifiedSignedData], APIFailure> {
        guard signed.count <= APILimits.maxItemsPerPage else {
            return .failure(APIFailure(.invalidResponse, "\(signed.count) signed transactions in one answer (limit \(APILimits.maxItemsPerPage))", environment: env))
        }
        var verified: [VerifiedSignedData] = []
        for item in signed {
            guard item.utf8.count <= APILimits.maxSignedDataBytes else {
                return .failure(APIFailure(.invalidResponse, "signed transaction over \(APILimits.maxSignedDataBytes) bytes", environment: env))
            }
            switch verifier.verifyTransaction(item) {
            case .failure(let failure):
                return .failure(APIFailure(.invalidResponse, "signed transaction does not verify: \(failure)", environment: env))
            case .success(let data): verified.append(data)
            }
        }
        return .success(verified)
    }

    func verifyStatuses(_ response: StatusResponse, _ env: AppStoreEnvironment) -> Result<SubscriptionStatuses, APIFailure> {
        if let problem = appProblem(bundleId: response.bundleId, environment: response.environment, env) {
            return .failure(APIFailure(.invalidResponse, problem, environment: env))
        }
        let items = response.data ?? []
        guard items.count <= APILimits.maxItemsPerPage else {
            return .failure(APIFailure(.invalidResponse, "\(items.count) subscription groups (limit \(APILimits.maxItemsPerPage))", environment: env))
        }
        var groups: [SubscriptionStatuses.Group] = []
        for item in items {
            let last = item.lastTransactions ?? []
            guard last.count <= APILimits.maxLastTransactionsPerGroup else {
                return .failure(APIFailure(.invalidResponse, "\(last.count) last transactions in one group", environment: env))
            }
            var verified: [SubscriptionStatuses.LastTransaction] = []
            for entry in last {
                guard let signed = entry.signedTransactionInfo else {
                    return .failure(APIFailure(.invalidResponse, "status item without signedTransactionInfo", environment: env))
                }
                let transaction: VerifiedSignedData
                switch verifyTransactions([signed], env) {
                case .failure(let failure): return .failure(failure)
                case .success(let list): transaction = list[0]
                }
                var renewal: VerifiedSignedData?
                if let signedRenewal = entry.signedRenewalInfo {
                    guard signedRenewal.utf8.count <= APILimits.maxSignedDataBytes else {
                        return .failure(APIFailure(.invalidResponse, "signed renewal info over \(APILimits.maxSignedDataBytes) bytes", environment: env))
                    }
                    switch verifier.verifyRenewalInfo(signedRenewal) {
                    case .failure(let failure):
                        return .failure(APIFailure(.invalidResponse, "signed renewal info does not verify: \(failure)", environment: env))
                    case .success(let data): renewal = data
                    }
                }
                verified.append(.init(rawStatus: entry.rawStatus, originalTransactionId: entry.originalTransactionId,
                                      transaction: transaction, renewalInfo: renewal, signedTransactionInfo: signed,
                                      signedRenewalInfo: entry.signedRenewalInfo))
            }
            groups.append(.init(subscriptionGroupIdentifier: item.subscriptionGroupIdentifier, lastTransactions: verified))
        }
        return .success(SubscriptionStatuses(environment: env, groups: groups))
    }

    /// The answer names our app and the environment we asked (when it names them at all).
    func appProblem(bundleId: String?, environment: String?, _ env: AppStoreEnvironment) -> String? {
        if let bundleId, bundleId != verifier.bundleId { return "answer is for bundle \(bundleId.prefix(128)), expected \(verifier.bundleId)" }
        if let environment, environment != env.rawValue { return "answer is for environment \(environment.prefix(32)), asked \(env.rawValue)" }
        return nil
    }

    func cursor(_ value: String?, _ what: String, _ env: AppStoreEnvironment, required: Bool) -> Result<String?, APIFailure> {
        guard let value, !value.isEmpty else {
            return required ? .failure(APIFailure(.invalidResponse, "answer has no \(what)", environment: env)) : .success(nil)
        }
        guard value.utf8.count <= APILimits.maxCursorBytes else {
            return .failure(APIFailure(.invalidResponse, "\(what) over \(APILimits.maxCursorBytes) bytes", environment: env))
        }
        return .success(value)
    }

    func historyProblem(_ request: NotificationHistoryRequest) -> String? {
        guard request.startDate < request.endDate else { return "startDate must be before endDate" }
        let nowMs = Int64(now().timeIntervalSince1970 * 1000)
        guard request.startDate >= nowMs - NotificationHistoryRequest.maxHistoryMs else {
            return "startDate is more than 180 days ago: Apple keeps no older history"
        }
        return nil
    }

    func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8], _ env: AppStoreEnvironment) -> Result<T, APIFailure> {
        do {
            return .success(try JSONDecoder().decode(type, from: Data(body)))
        } catch {
            return .failure(APIFailure(.invalidResponse, "answer is not a \(T.self)", environment: env))
        }
    }

    // MARK: - Environments and retries

    /// The explicit environment, else the primary one and, for ids production does not know,
    /// the sandbox (Apple's advice for Get Transaction Info and History).
    func inEnvironments<T>(_ explicit: AppStoreEnvironment?, fallback: Bool,
                           _ call: (AppStoreEnvironment) -> Result<T, APIFailure>) -> Result<T, APIFailure> {
        if let explicit { return call(explicit) }
        let first = call(settings.environment)
        guard fallback, settings.sandboxFallback, settings.environment == .production,
              case .failure(let failure) = first, failure.errorCode?.meansUnknownInThisEnvironment == true else { return first }
        return call(.sandbox)
    }

    /// One request with retries. The bearer token goes into the header only; no failure carries it.
    func perform(_ endpoint: Endpoint, _ env: AppStoreEnvironment) -> Result<[UInt8], APIFailure> {
        guard let base = settings.baseURLs.url(for: env) else {
            return .failure(APIFailure(.invalidRequest, "the App Store Server API has no \(env.rawValue) endpoint", environment: env))
        }
        guard let url = endpoint.url(base: base) else {
            return .failure(APIFailure(.invalidRequest, "cannot build the request URL", environment: env))
        }
        var attempt = 0
        while true {
            attempt += 1
            let token: APIToken
            switch tokens.token() {
            case .failure(var failure):
                failure.environment = env
                return .failure(failure)
            case .success(let fresh): token = fresh
            }
            var headers = ["Authorization": "Bearer \(token.value)", "Accept": "application/json", "User-Agent": settings.userAgent]
            if endpoint.body != nil { headers["Content-Type"] = "application/json" }
            let exchange = transport.send(APIHTTPRequest(method: endpoint.method, url: url, headers: headers, body: endpoint.body),
                                          timeout: settings.timeout)
            switch ResponseClassifier.classify(exchange, environment: env, now: now()) {
            case .success(let body): return .success(body)
            case .failure(var failure, let retryAfter):
                guard failure.kind == .retryable else { return .failure(failure) }
                switch settings.retry.decide(attempt: attempt, retryAfterSeconds: retryAfter) {
                case .retry(let delay): sleep(delay)
                case .giveUp(let asked):
                    failure.retryAfterSeconds = asked
                    failure.reason += " (gave up after \(attempt) attempt\(attempt == 1 ? "" : "s"))"
                    return .failure(failure)
                }
            }
        }
    }
}
