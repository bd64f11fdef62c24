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

    /// Sends `request` on a session of its own (`BoundedHTTPClient.send`): for a caller that talks to a
    /// host now and then. One that sends many (webhook deliveries) keeps a client and its connections.
    public static func send(_ request: URLRequest, limit: Int, timeout: TimeInterval, grace: TimeInterval = 5,
                            statusOnly: Bool = false) -> Result<Response, ExchangeError> {
        BoundedHTTPClient().send(request, limit: limit, timeout: timeout, grace: grace, statusOnly: statusOnly)
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

/// One URLSession for many bounded exchanges, each as `BoundedHTTPExchange` describes it: its
/// connections stay open between them (HTTP keep-alive), so a client posting to one host pays the TCP
/// and TLS handshakes once per connection, not once per request. Exchanges may run on several threads
/// at once, up to `maxConnectionsPerHost` side by side. Ephemeral: no cookies, no cache.
public final class BoundedHTTPClient: Sendable {
    private let session: URLSession
    private let router = ExchangeRouter()

    public init(maxConnectionsPerHost: Int = 6) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = max(1, maxConnectionsPerHost)
        session = URLSession(configuration: configuration, delegate: router, delegateQueue: nil)
    }

    deinit { session.finishTasksAndInvalidate() }

    /// Sends `request`; waits at most `timeout` + `grace`. The failure is a description (connection
    /// refused, timeout, a body over the limit). With `statusOnly` a body over the limit is no failure:
    /// reading stops there and the answer is the status.
    public func send(_ request: URLRequest, limit: Int, timeout: TimeInterval, grace: TimeInterval = 5,
                     statusOnly: Bool = false) -> Result<BoundedHTTPExchange.Response, BoundedHTTPExchange.ExchangeError> {
        let collector = BoundedCollector(limit: limit, statusOnly: statusOnly)
        let task = session.dataTask(with: request)
        router.add(collector, for: task)
        defer { router.remove(task) }
        task.resume()
        guard collector.done.wait(timeout: .now() + timeout + grace) == .success else {
            task.cancel()
            return .failure(.init("no answer within \(timeout) s"))
        }
        return collector.result()
    }
}

/// The session's delegate: hands each task's callbacks to that task's collector. A task whose caller
/// stopped waiting (timed out) has none left: its answer is refused.
private final class ExchangeRouter: NSObject, URLSessionDataDelegate, Sendable {
    private let collectors = Mutex<[Int: BoundedCollector]>([:])

    func add(_ collector: BoundedCollector, for task: URLSessionTask) { collectors.withLock { $0[task.taskIdentifier] = collector } }
    func remove(_ task: URLSessionTask) { _ = collectors.withLock { $0.removeValue(forKey: task.taskIdentifier) } }
    private func collector(_ task: URLSessionTask) -> BoundedCollector? { collectors.withLock { $0[task.taskIdentifier] } }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        guard let collector = collector(dataTask) else { return completionHandler(.cancel) }
        collector.urlSession(session, dataTask: dataTask, didReceive: response, completionHandler: completionHandler)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let collector = collector(dataTask) else { return dataTask.cancel() }
        collector.urlSession(session, dataTask: dataTask, didReceive: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        collector(task)?.urlSession(session, task: task, didCompleteWithError: error)
    }
}

/// Collects one response body up to a limit; its mutable state is behind a Mutex, so callbacks from
/// URLSession's threads are safe. Redirects are refused by the session's delegate (`ExchangeRouter`).
private final class BoundedCollector: Sendable {
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
