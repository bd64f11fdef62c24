import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// One HTTP POST, as the verifyReceipt client needs it. Injected so tests use a local server and
/// the stage can be given any HTTP stack.
public protocol VerifyReceiptTransport: Sendable {
    /// The HTTP status and body, or a transport error description (connection refused, timeout).
    func post(_ url: URL, body: [UInt8], timeout: TimeInterval) -> Result<(status: Int, body: [UInt8]), VerifyReceiptTransportError>
}

public struct VerifyReceiptTransportError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Foundation's URLSession (libcurl on Linux), used synchronously: the decode stage is a blocking loop.
/// A body over `maxResponseBytes` is cut off while it arrives.
public struct URLSessionTransport: VerifyReceiptTransport {
    /// Apple's answers are a few kilobytes per purchase; a receipt holds at most a few thousand.
    public static let defaultMaxResponseBytes = 8 * 1024 * 1024
    public let maxResponseBytes: Int

    public init(maxResponseBytes: Int = URLSessionTransport.defaultMaxResponseBytes) { self.maxResponseBytes = maxResponseBytes }

    public func post(_ url: URL, body: [UInt8], timeout: TimeInterval) -> Result<(status: Int, body: [UInt8]), VerifyReceiptTransportError> {
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        return BoundedHTTPExchange.send(request, limit: maxResponseBytes, timeout: timeout)
            .map { ($0.status, $0.body) }
            .mapError { VerifyReceiptTransportError("verifyReceipt: \($0.description)") }
    }
}

/// What verifyReceipt said, after redirects and retries.
public enum VerifyReceiptOutcome {
    /// Status 0: the decoded response body and the endpoint that accepted it.
    case valid(response: [String: Any], environment: AppStoreEnvironment)
    /// A status that will not change by asking again (the receipt is bad, the secret is wrong...).
    case rejected(status: Int, reason: String)
    /// Apple or the network is in trouble: try the whole input again later; never dead-letter.
    case retryable(reason: String)
}

/// The legacy `verifyReceipt` endpoint (deprecated by Apple in 2023, still answered), for
/// deployments that use it: production first, `21007` → sandbox, `21008` → production (once
/// each); `21005`, `21009`, `21100`–`21199`, `is-retryable`, HTTP 429/5xx and transport errors
/// are retried here with capped exponential backoff, and reported retryable if they persist.
/// https://developer.apple.com/documentation/appstorereceipts/verifyreceipt
public struct VerifyReceiptClient: Sendable {
    public static let productionURL = URL(string: "https://buy.itunes.apple.com/verifyReceipt")!
    public static let sandboxURL = URL(string: "https://sandbox.itunes.apple.com/verifyReceipt")!

    public var productionURL: URL
    public var sandboxURL: URL
    /// The app-specific shared secret (`password`); needed for auto-renewable subscriptions.
    public var password: String?
    public var excludeOldTransactions: Bool
    public var maxAttempts: Int
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    public var timeout: TimeInterval
    let transport: any VerifyReceiptTransport
    let sleep: @Sendable (Duration) -> Void

    public init(productionURL: URL = VerifyReceiptClient.productionURL, sandboxURL: URL = VerifyReceiptClient.sandboxURL,
                password: String? = nil, excludeOldTransactions: Bool = false, maxAttempts: Int = 4,
                initialBackoff: Duration = .milliseconds(250), maxBackoff: Duration = .seconds(4),
                timeout: TimeInterval = 30, transport: any VerifyReceiptTransport = URLSessionTransport(),
                sleep: @escaping @Sendable (Duration) -> Void = { Thread.sleep(forTimeInterval: Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18) }) {
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.password = password
        self.excludeOldTransactions = excludeOldTransactions
        self.maxAttempts = max(1, maxAttempts)
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.timeout = timeout
        self.transport = transport
        self.sleep = sleep
    }

    /// Status codes Apple documents as temporary.
    public static func isRetryable(status: Int) -> Bool {
        status == 21005 || status == 21009 || (21100...21199).contains(status)
    }

    public static func describe(status: Int) -> String {
        switch status {
        case 21000: return "the request to the App Store was not made using HTTP POST or its JSON was unreadable"
        case 21001: return "status no longer sent by the App Store"
        case 21002: return "the receipt-data property was malformed or the service had a temporary issue"
        case 21003: return "the receipt could not be authenticated"
        case 21004: return "the shared secret does not match the account's shared secret"
        case 21005: return "the receipt server was temporarily unable to provide the receipt"
        case 21006: return "the receipt is valid but the subscription has expired"
        case 21007: return "this receipt is from the test environment, but it was sent to production"
        case 21008: return "this receipt is from the production environment, but it was sent to the test environment"
        case 21009: return "internal data access error"
        case 21010: return "the user account cannot be found or has been deleted"
        case 21100...21199: return "internal data access error"
        default: return "unknown verifyReceipt status"
        }
    }

    public func verify(receiptData: String) -> VerifyReceiptOutcome {
        var body: [String: Any] = ["receipt-data": receiptData]
        if let password { body["password"] = password }
        if excludeOldTransactions { body["exclude-old-transactions"] = true }
        guard let request = try? JSONSerialization.data(withJSONObject: body) else {
            return .rejected(status: 21000, reason: "cannot encode the verifyReceipt request")
        }
        var environment = AppStoreEnvironment.production
        var redirected: Set<AppStoreEnvironment> = []
        var attempt = 0
        var lastProblem = ""
        while attempt < maxAttempts {
            attempt += 1
            let url = environment == .production ? productionURL : sandboxURL
            switch transport.post(url, body: [UInt8](request), timeout: timeout) {
            case .failure(let error):
                lastProblem = "verifyReceipt \(environment.rawValue) unreachable: \(error.description)"
            case .success(let response) where response.status == 429 || response.status >= 500:
                lastProblem = "verifyReceipt \(environment.rawValue) answered HTTP \(response.status)"
            case .success(let response) where response.status != 200:
                return .rejected(status: response.status, reason: "verifyReceipt \(environment.rawValue) answered HTTP \(response.status)")
            case .success(let response):
                guard let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any],
                      let status = JSONFields(object).int("status") else {
                    lastProblem = "verifyReceipt \(environment.rawValue) answered HTTP 200 without a JSON status"
                    break
                }
                if status == 0 { return .valid(response: object, environment: environment) }
                // 21006: valid, but the subscription has expired (iOS 6-style receipts). The data is
                // there, and its refunds must be seen like any other.
                if status == 21006, object["receipt"] != nil || object["latest_receipt_info"] != nil {
                    return .valid(response: object, environment: environment)
                }
                // Redirects do not count as attempts: they are answers, not failures.
                if status == 21007, !redirected.contains(.sandbox) {
                    redirected.insert(.sandbox)
                    environment = .sandbox
                    attempt -= 1
                    continue
                }
                if status == 21008, !redirected.contains(.production) {
                    redirected.insert(.production)
                    environment = .production
                    attempt -= 1
                    continue
                }
                let flagged = JSONFields(object).bool("is-retryable") == true
                guard Self.isRetryable(status: status) || flagged else {
                    return .rejected(status: status, reason: "verifyReceipt \(environment.rawValue) status \(status): \(Self.describe(status: status))")
                }
                lastProblem = "verifyReceipt \(environment.rawValue) status \(status): \(Self.describe(status: status))"
            }
            if attempt < maxAttempts { sleep(backoff(attempt: attempt)) }
        }
        return .retryable(reason: "\(lastProblem) (after \(maxAttempts) attempts)")
    }

    /// initial × 2^(attempt-1), capped.
    func backoff(attempt: Int) -> Duration {
        let factor = 1 << min(attempt - 1, 20)
        return min(initialBackoff * factor, maxBackoff)
    }
}
