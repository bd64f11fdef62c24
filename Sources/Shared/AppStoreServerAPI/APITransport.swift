import AppleDecoding
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
    /// An answer came, but its body passed the transport's limit: not a reachability problem.
    public let isOverLimit: Bool
    public init(_ description: String, isOverLimit: Bool = false) {
        self.description = description
        self.isOverLimit = isOverLimit
    }
}

/// Foundation's URLSession (libcurl on Linux), used synchronously like the verifyReceipt client.
/// A body over `maxResponseBytes` is cut off while it arrives, so a huge answer cannot exhaust memory.
/// One client for the transport's life: a walk of many pages reuses its connection to Apple.
public struct URLSessionAPITransport: APITransport {
    public let maxResponseBytes: Int
    private let http = BoundedHTTPClient()

    public init(maxResponseBytes: Int = APILimits.maxResponseBytes) { self.maxResponseBytes = maxResponseBytes }

    public func send(_ request: APIHTTPRequest, timeout: TimeInterval) -> Result<APIHTTPResponse, APITransportError> {
        var urlRequest = URLRequest(url: request.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        if let body = request.body { urlRequest.httpBody = Data(body) }
        return http.send(urlRequest, limit: maxResponseBytes, timeout: timeout)
            .map { APIHTTPResponse(status: $0.status, headers: $0.headers, body: $0.body) }
            .mapError { APITransportError($0.description, isOverLimit: $0.isOverLimit) }
    }
}
