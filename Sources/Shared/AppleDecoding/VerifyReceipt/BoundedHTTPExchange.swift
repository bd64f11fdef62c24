import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// One HTTP exchange over URLSession (libcurl on Linux), used synchronously, whose response body is
/// cut off while it arrives once it passes `limit` bytes: an answer from Apple, from a webhook
/// endpoint, or from whatever stands at the configured address, cannot exhaust memory. Redirects
/// are not followed: the 3xx is the answer. Following one would send the request's credentials
/// (a bearer token, a webhook signature) to another host, and turn a POST into a body-less GET
/// whose 2xx would pass for delivery. The App Store Server API client, verifyReceipt and webhook
/// deliveries send through it.
public enum BoundedHTTPExchange {
    public struct Response: Sendable {
        public var status: Int
        /// Names lowercased.
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// Sends `request` on its own ephemeral session; waits at most `timeout` + `grace`. The failure
    /// is a description (connection refused, timeout, a body over the limit). With `statusOnly` a
    /// body over the limit is no failure: reading stops there and the answer is the status.
    public static func send(_ request: URLRequest, limit: Int, timeout: TimeInterval, grace: TimeInterval = 5,
                            statusOnly: Bool = false) -> Result<Response, ExchangeError> {
        let collector = BoundedCollector(limit: limit, statusOnly: statusOnly)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration, delegate: collector, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: request)
        task.resume()
        guard collector.done.wait(timeout: .now() + timeout + grace) == .success else {
            task.cancel()
            return .failure(ExchangeError("no answer within \(timeout) s"))
        }
        return collector.result()
    }

    public struct ExchangeError: Error, Sendable, CustomStringConvertible {
        public let description: String
        /// The answer came but its body passed the limit (no transport trouble: asking again gets the same).
        public let isOverLimit: Bool
        init(_ description: String, isOverLimit: Bool = false) {
            self.description = description
            self.isOverLimit = isOverLimit
        }
    }
}

/// Collects one response body up to a limit. A class because URLSession wants a delegate object;
/// its mutable state is behind a Mutex, so concurrent delegate callbacks are safe.
private final class BoundedCollector: NSObject, URLSessionDataDelegate, Sendable {
    let limit: Int
    let statusOnly: Bool
    let done = DispatchSemaphore(value: 0)
    private struct State {
        var body: [UInt8] = []
        var response: HTTPURLResponse?
        var problem: String?
        var overLimit = false
    }
    private let state = Mutex(State())

    init(limit: Int, statusOnly: Bool) {
        self.limit = limit
        self.statusOnly = statusOnly
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let allowed = state.withLock { state -> Bool in
            state.response = response as? HTTPURLResponse
            if response.expectedContentLength > Int64(limit) {
                state.overLimit = true
                state.problem = "response body of \(response.expectedContentLength) bytes is over the \(limit)-byte limit"
                return false
            }
            return true
        }
        completionHandler(allowed ? .allow : .cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let over = state.withLock { state -> Bool in
            guard state.problem == nil else { return true }
            if state.body.count + data.count > limit {
                state.overLimit = true
                state.problem = "response body is over the \(limit)-byte limit"
                return true
            }
            state.body.append(contentsOf: data)
            return false
        }
        if over { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        state.withLock { state in
            if state.problem == nil, let error { state.problem = error.localizedDescription }
        }
        done.signal()
    }

    func result() -> Result<BoundedHTTPExchange.Response, BoundedHTTPExchange.ExchangeError> {
        state.withLock { state in
            if state.overLimit, statusOnly, let http = state.response {
                return .success(.init(status: http.statusCode, headers: [:], body: state.body))
            }
            if let problem = state.problem { return .failure(.init(problem, isOverLimit: state.overLimit)) }
            guard let http = state.response else { return .failure(.init("no HTTP response")) }
            var headers: [String: String] = [:]
            for (name, value) in http.allHeaderFields {
                if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
            }
            return .success(.init(status: http.statusCode, headers: headers, body: state.body))
        }
    }
}
