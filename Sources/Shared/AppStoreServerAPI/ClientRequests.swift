import AppleDecoding
import Foundation

/// Sending: environment choice with the sandbox fallback, then one request with retries.
extension AppStoreServerAPIClient {
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
                if failure.httpStatus == 401 { tokens.refused(token) }
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
