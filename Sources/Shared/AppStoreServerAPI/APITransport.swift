import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// One HTTP exchange as the API client needs it. Injected, so tests run the client against the
/// App Store simulator on loopback and production can use any HTTP stack.
public protocol APITransport: Sendable {
    func send(_ request: APIHTTPRequest, timeout: TimeInterval) -> Result<APIHTTPResponse, APITransportError>
}

public struct APIHTTPRequest: Sendable {
    public var method: String
    public var url: URL
    /// Includes `Authorization`: never log a request's headers.
    public var headers: [String: String]
    public var body: [UInt8]?

    public init(method: String, url: URL, headers: [String: String], body: [UInt8]?) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

public struct APIHTTPResponse: Sendable {
    public var status: Int
    /// Names lowercased.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }) { first, _ in first }
        self.body = body
    }
}

public struct APITransportError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Foundation's URLSession (libcurl on Linux), used synchronously like the verifyReceipt client.
/// A body over `maxResponseBytes` is cut off while it arrives, so a huge answer cannot exhaust memory.
public struct URLSessionAPITransport: APITransport {
    public let maxResponseBytes: Int

    public init(maxResponseBytes: Int = APILimits.maxResponseBytes) { self.maxResponseBytes = maxResponseBytes }

    public func send(_ request: APIHTTPRequest, timeout: TimeInterval) -> Result<APIHTTPResponse, APITransportError> {
        var urlRequest = URLRequest(url: request.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        if let body = request.body { urlRequest.httpBody = Data(body) }
        let collector = BoundedCollector(limit: maxResponseBytes)
        let session = URLSession(configuration: .ephemeral, delegate: collector, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: urlRequest)
        task.resume()
        guard collector.done.wait(timeout: .now() + timeout + 5) == .success else {
            task.cancel()
            return .failure(APITransportError("no answer within \(Int(timeout)) s"))
        }
        return collector.result()
    }
}

/// Collects one response body up to a limit. A class because URLSession wants a delegate object;
/// its mutable state is behind a Mutex, so concurrent delegate callbacks are safe.
private final class BoundedCollector: NSObject, URLSessionDataDelegate, Sendable {
    let limit: Int
    let done = DispatchSemaphore(value: 0)
    private struct State {
        var body: [UInt8] = []
        var response: HTTPURLResponse?
        var problem: String?
    }
    private let state = Mutex(State())

    init(limit: Int) { self.limit = limit }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        let allowed = state.withLock { state -> Bool in
            state.response = response as? HTTPURLResponse
            if response.expectedContentLength > Int64(limit) {
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

    func result() -> Result<APIHTTPResponse, APITransportError> {
        state.withLock { state in
            if let problem = state.problem { return .failure(APITransportError(problem)) }
            guard let http = state.response else { return .failure(APITransportError("no HTTP response")) }
            var headers: [String: String] = [:]
            for (name, value) in http.allHeaderFields {
                if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
            }
            return .success(APIHTTPResponse(status: http.statusCode, headers: headers, body: state.body))
        }
    }
}
