import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A blocking HTTP client for tests. Requests present the test service key unless told otherwise
/// (`authorization: nil` sends none).
enum HTTP {
    static let serviceKey = TestCredentials.bearer(TestCredentials.serviceKey)

    struct Response {
        var status: Int
        var body: Data
        var headers: [String: String] = [:]
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] }
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    static func get(_ url: String, timeout: TimeInterval = 10, authorization: String? = serviceKey) throws -> Response {
        var request = URLRequest(url: URL(string: url)!)
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        return try send(request, timeout: timeout)
    }

    static func post(_ url: String, body: Data, contentType: String = "application/json", timeout: TimeInterval = 10,
                     authorization: String? = serviceKey, headers: [String: String] = [:]) throws -> Response {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        return try send(request, timeout: timeout)
    }

    static func post(_ url: String, json: [String: Any], timeout: TimeInterval = 10, authorization: String? = serviceKey) throws -> Response {
        try post(url, body: try JSONSerialization.data(withJSONObject: json), timeout: timeout, authorization: authorization)
    }

    private final class Box: @unchecked Sendable {
        // Safe: written once by the completion handler before the semaphore is signalled.
        var result: Result<Response, Error> = .failure(URLError(.timedOut))
    }

    private static func send(_ request: URLRequest, timeout: TimeInterval) throws -> Response {
        var request = request
        request.timeoutInterval = timeout
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, error in
            if let error {
                box.result = .failure(error)
            } else {
                let http = response as? HTTPURLResponse
                let headers = (http?.allHeaderFields ?? [:]).reduce(into: [String: String]()) { $0["\($1.key)".lowercased()] = "\($1.value)" }
                box.result = .success(Response(status: http?.statusCode ?? 0, body: data ?? Data(), headers: headers))
            }
            done.signal()
        }.resume()
        _ = done.wait(timeout: .now() + timeout + 1)
        return try box.result.get()
    }
}
