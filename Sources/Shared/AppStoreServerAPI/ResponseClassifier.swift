import AppleDecoding
import Foundation

/// Turns one HTTP exchange into success or an `APIFailure`. Pure, so every status, error code and
/// `Retry-After` rule is tested without a server.
enum ResponseClassifier {
    enum Outcome {
        case success([UInt8])
        case failure(APIFailure, retryAfterSeconds: Int64?)
    }

    static func classify(_ exchange: Result<APIHTTPResponse, APITransportError>, environment: AppStoreEnvironment,
                         now: Date) -> Outcome {
        let response: APIHTTPResponse
        switch exchange {
        case .failure(let error) where error.isOverLimit:
            // Asking again downloads the same oversized answer.
            return .failure(APIFailure(.invalidResponse, error.description, environment: environment), retryAfterSeconds: nil)
        case .failure(let error):
            return .failure(APIFailure(.retryable, "App Store Server API unreachable: \(error.description)", environment: environment),
                            retryAfterSeconds: nil)
        case .success(let answer): response = answer
        }
        guard response.body.count <= APILimits.maxResponseBytes else {
            return .failure(APIFailure(.invalidResponse, "response body is over \(APILimits.maxResponseBytes) bytes",
                                       environment: environment, httpStatus: response.status), retryAfterSeconds: nil)
        }
        if (200...299).contains(response.status) { return .success(response.body) }
        let payload = (try? JSONDecoder().decode(ErrorPayload.self, from: Data(response.body)))
        var failure = APIFailure(.permanent, "App Store Server API refused the request", environment: environment,
                                 httpStatus: response.status, rawErrorCode: payload?.errorCode,
                                 errorMessage: APIFailure.sanitized(payload?.errorMessage))
        var retryAfter: Int64?
        switch response.status {
        case 429:
            failure.kind = .retryable
            failure.reason = "rate limited"
            retryAfter = RetryAfter.seconds(response.headers["retry-after"], now: now)
        case 401:
            // Our token, not the request: a fresh one may pass (a key rotated, a clock corrected, a
            // configuration fixed), so the request is retried rather than given up for good.
            failure.kind = .retryable
            failure.reason = "bearer token refused (key id, issuer id, bundle id or clock)"
        case 500...599:
            failure.kind = .retryable
            failure.reason = "App Store Server API failed"
            retryAfter = RetryAfter.seconds(response.headers["retry-after"], now: now)
        default:
            if failure.errorCode?.isRetryable == true {
                failure.kind = .retryable
                failure.reason = "App Store Server API asks to retry"
            }
        }
        return .failure(failure, retryAfterSeconds: retryAfter)
    }
}
