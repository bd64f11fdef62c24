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
    /// Verifies Apple's answers; also what decodes a notification the history returned as the decode stage would.
    public let verifier: SignedDataVerifier
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
            return .success(NotificationHistoryWalk(environment: env, entries: entries, pages: guardrail.pages, truncated: guardrail.truncated,
                                                    reachedPageLimit: guardrail.reachedPageLimit))
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
