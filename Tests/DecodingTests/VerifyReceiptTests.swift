@testable import AppleDecoding
import Domain
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The verifyReceipt client against a real local HTTP server (POSIX sockets, URLSession/libcurl
/// on the client side): redirects, retries with backoff, permanent statuses, response shapes.
final class VerifyReceiptTests: XCTestCase {
    private func client(_ server: ScriptedServer, password: String? = "secret") -> VerifyReceiptClient {
        VerifyReceiptClient(productionURL: server.url("/production"), sandboxURL: server.url("/sandbox"), password: password,
                            excludeOldTransactions: true, maxAttempts: 3, initialBackoff: .milliseconds(1),
                            maxBackoff: .milliseconds(4), timeout: 5)
    }

    /// A verifyReceipt answer in Apple's shape (string-typed fields): subscription 1000000318012065
    /// of com.example.app, weekly, renewal off; in_app (3) and latest_receipt_info (4) overlap in 2.
    static let sandboxAnswer: String = {
        let otid = "1000000318012065", start: Int64 = 1_498_000_000_000, week: Int64 = 604_800_000
        func transaction(_ n: Int64) -> [String: Any] {
            ["quantity": "1", "product_id": "testproduct", "transaction_id": String(1_000_000_318_420_594 + n),
             "original_transaction_id": otid, "purchase_date_ms": String(start + n * week),
             "original_purchase_date_ms": String(start), "expires_date_ms": String(start + (n + 1) * week),
             "web_order_line_item_id": String(1_000_000_035_000_000 + n), "is_trial_period": n == 0 ? "true" : "false"]
        }
        let answer: [String: Any] = [
            "status": 0, "environment": "Sandbox",
            "receipt": ["receipt_type": "ProductionSandbox", "bundle_id": "com.example.app", "in_app": (0...2).map(transaction),
                        "receipt_creation_date_ms": String(start + week), "request_date_ms": String(start + 5 * week)],
            "latest_receipt_info": (1...4).map(transaction),
            "pending_renewal_info": [["auto_renew_product_id": "testproduct", "original_transaction_id": otid,
                                      "product_id": "testproduct", "auto_renew_status": "0"]],
        ]
        return String(decoding: try! JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys]), as: UTF8.self)
    }()

    func testSandboxReceiptIsRetriedOnSandbox() throws {
        let valid = Self.sandboxAnswer
        let server = try ScriptedServer(responses: [(200, #"{"status":21007}"#), (200, valid)])
        guard case .valid(let response, let environment) = client(server).verify(receiptData: "AAAA") else {
            return XCTFail("expected a valid answer")
        }
        XCTAssertEqual(environment, .sandbox)
        XCTAssertEqual(JSONFields(response).string("environment"), "Sandbox")
        let requests = server.requests
        XCTAssertEqual(requests.map(\.path), ["/production", "/sandbox"])
        let sent = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(requests[0].body)) as? [String: Any])
        XCTAssertEqual(sent["receipt-data"] as? String, "AAAA")
        XCTAssertEqual(sent["password"] as? String, "secret")
        XCTAssertEqual(sent["exclude-old-transactions"] as? Bool, true)
    }

    func testRetryableStatusesAreRetriedThenReportedRetryable() throws {
        let server = try ScriptedServer(responses: [(200, #"{"status":21005}"#), (503, "busy"), (200, #"{"status":21100,"is-retryable":true}"#)])
        guard case .retryable(let reason) = client(server).verify(receiptData: "AAAA") else { return XCTFail("expected retryable") }
        XCTAssertTrue(reason.contains("21100"), reason)
        XCTAssertEqual(server.requests.count, 3)

        let recovering = try ScriptedServer(responses: [(200, #"{"status":21009}"#), (200, #"{"status":0,"environment":"Production"}"#)])
        guard case .valid(_, let environment) = client(recovering).verify(receiptData: "AAAA") else { return XCTFail("expected valid") }
        XCTAssertEqual(environment, .production)
    }

    func testPermanentStatusesAndUnreachableServer() throws {
        let server = try ScriptedServer(responses: [(200, #"{"status":21003}"#)])
        guard case .rejected(let status, _) = client(server).verify(receiptData: "AAAA") else { return XCTFail("expected rejected") }
        XCTAssertEqual(status, 21003)
        let production = try ScriptedServer(responses: [(200, #"{"status":21008}"#), (200, #"{"status":21008}"#)])
        // 21008 on production → production again once, then the status stands.
        guard case .rejected(let twice, _) = client(production).verify(receiptData: "AAAA") else { return XCTFail("expected rejected") }
        XCTAssertEqual(twice, 21008)
        let closed = VerifyReceiptClient(productionURL: URL(string: "http://127.0.0.1:9/verifyReceipt")!, maxAttempts: 2,
                                         initialBackoff: .milliseconds(1), timeout: 2)
        guard case .retryable = closed.verify(receiptData: "AAAA") else { return XCTFail("expected retryable") }
    }

    /// An answer larger than the transport's limit is cut off as it arrives (never buffered whole)
    /// and reported retryable, like any answer that is not Apple's; one under the limit is read.
    func testAnAnswerOverTheByteLimitIsCutOff() throws {
        let big = Self.sandboxAnswer
        let server = try ScriptedServer(responses: [(200, big), (200, big)])
        let small = VerifyReceiptClient(productionURL: server.url("/production"), maxAttempts: 1, timeout: 5,
                                        transport: URLSessionTransport(maxResponseBytes: big.utf8.count - 1))
        guard case .retryable(let reason) = small.verify(receiptData: "AAAA") else { return XCTFail("expected retryable") }
        XCTAssertTrue(reason.contains("limit"), reason)
        let enough = VerifyReceiptClient(productionURL: server.url("/production"), maxAttempts: 1, timeout: 5,
                                         transport: URLSessionTransport(maxResponseBytes: big.utf8.count))
        guard case .valid = enough.verify(receiptData: "AAAA") else { return XCTFail("expected valid at exactly the limit") }
    }

    /// The bounded exchange every client that talks to Apple or to a webhook uses: a redirect is the
    /// answer, never followed (one request reaches the server, with every kind of redirect), and in
    /// status-only mode a body over the limit still gives the status.
    func testTheBoundedExchangeDoesNotFollowRedirectsAndCanReadTheStatusAlone() throws {
        for status in [301, 302, 303, 307, 308] {
            let server = try ScriptedServer(responses: [(status, "{}"), (200, "{}")])
            var request = URLRequest(url: server.url("/hook"))
            request.httpMethod = "POST"
            request.httpBody = Data("signed".utf8)
            let answer = try BoundedHTTPExchange.send(request, limit: 1024, timeout: 5).get()
            XCTAssertEqual(answer.status, status)
            XCTAssertEqual(server.requests.map(\.path), ["/hook"], "\(status) was not followed")
        }
        let big = String(repeating: "x", count: 10_000)
        let server = try ScriptedServer(responses: [(200, big), (200, big)])
        let whole = BoundedHTTPExchange.send(URLRequest(url: server.url("/a")), limit: 1_000, timeout: 5)
        XCTAssertEqual(whole.failureValue?.isOverLimit, true)
        XCTAssertEqual(try BoundedHTTPExchange.send(URLRequest(url: server.url("/b")), limit: 1_000, timeout: 5, statusOnly: true).get().status, 200)
    }

    /// verifyReceipt answers status 0 for any app's receipt: an answer about another bundle is refused.
    /// A kept client sends its exchanges over the connection it opened first (keep-alive: one TCP and
    /// TLS handshake per connection, not per request); a one-off exchange opens its own.
    func testAKeptClientReusesItsConnection() throws {
        let server = try ScriptedServer(responses: Array(repeating: (200, "{}"), count: 8), keepAlive: true)
        let client = BoundedHTTPClient()
        for index in 0..<5 {
            var request = URLRequest(url: server.url("/\(index)"))
            request.httpMethod = "POST"
            request.httpBody = Data("{\"n\":\(index)}".utf8)
            XCTAssertEqual(try client.send(request, limit: 1024, timeout: 5).get().status, 200)
        }
        XCTAssertEqual(server.requests.map(\.path), ["/0", "/1", "/2", "/3", "/4"])
        XCTAssertEqual(server.connections, 1, "five exchanges, one connection")
        XCTAssertEqual(try BoundedHTTPExchange.send(URLRequest(url: server.url("/once")), limit: 1024, timeout: 5).get().status, 200)
        XCTAssertEqual(server.connections, 2, "a one-off exchange has a session, and a connection, of its own")
    }

    func testAnAnswerAboutAnotherAppsReceiptIsRefused() throws {
        let body = Array(#"{"user_id":"u","receipt_data":"AAAA"}"#.utf8)
        let server = try ScriptedServer(responses: [(200, Self.sandboxAnswer), (200, Self.sandboxAnswer)])
        let ours = ReceiptUploadDecoder(validation: .verifyReceipt, verifier: nil, verifyReceipt: client(server), bundleIds: ["com.example.app"])
        XCTAssertFalse(try ours.decode(body: body, receivedAtMs: 1, rawPosition: nil).get().isEmpty)
        let theirs = ReceiptUploadDecoder(validation: .verifyReceipt, verifier: nil, verifyReceipt: client(server), bundleIds: ["com.other.app"])
        guard case .permanent(let failure)? = theirs.decode(body: body, receivedAtMs: 1, rawPosition: nil).failureValue else {
            return XCTFail("expected a permanent failure")
        }
        XCTAssertEqual(failure.kind, ReceiptFailure.wrongBundle)
        XCTAssertTrue(failure.reason.contains("com.example.app"), failure.reason)
    }

    func testUploadViaVerifyReceiptBecomesEventsWithRenewalInfo() throws {
        let body = Self.sandboxAnswer
        let server = try ScriptedServer(responses: [(200, body)])
        let upload = ReceiptUploadDecoder(validation: .verifyReceipt, verifier: nil, verifyReceipt: client(server))
        let request = [UInt8](try JSONSerialization.data(withJSONObject: ["user_id": "u9", "receipt_data": "AAAA"]))
        let events = try upload.decode(body: request, receivedAtMs: 3, rawPosition: nil).get()
        let event = try XCTUnwrap(events.first { $0.subscriptionKey == "1000000318012065@Sandbox" })
        XCTAssertEqual(event.source, .verifyReceipt)
        XCTAssertEqual(event.appUserId, "u9")
        XCTAssertEqual(event.environment, "Sandbox")
        XCTAssertEqual(event.bundleId, "com.example.app")
        XCTAssertEqual(event.renewalInfo?.autoRenewProductId, "testproduct")
        XCTAssertEqual(event.renewalInfo?.autoRenewStatus, false)
        XCTAssertEqual(event.statedAtMs, 1_498_000_000_000 + 5 * 604_800_000, "Apple's answer is as of the request, not the receipt")
        // in_app (3) and latest_receipt_info (4) overlap: 5 distinct transactions.
        XCTAssertEqual(event.transactions.count, 5)
        XCTAssertEqual(Set(event.transactions.map(\.transactionId)).count, event.transactions.count)
        XCTAssertTrue(event.transactions.contains { $0.transactionId == "1000000318420598" && $0.expiresDateMs == 1_501_024_000_000 })

        let failing = try ScriptedServer(responses: [(200, #"{"status":21005}"#), (200, #"{"status":21005}"#), (200, #"{"status":21005}"#)])
        let retrying = ReceiptUploadDecoder(validation: .verifyReceipt, verifier: nil, verifyReceipt: client(failing))
        guard case .retryable? = retrying.decode(body: request, receivedAtMs: 3, rawPosition: nil).failureValue else {
            return XCTFail("21005 must be retryable, never dead-lettered")
        }
    }

    /// Apple's own verifyReceipt answers (one test: it needs ../shared).
    func testApplesOwnResponseShapes() throws {
        let context = ReceiptUploadDecoder.EventContext(digest: "d", userId: nil, receivedAtMs: 0, rawPosition: nil)
        func events(_ relative: String) throws -> [AppleEvent] {
            try VerifyReceiptResponse.events(JSONFields(try Fixtures.jsonObject(relative)), endpoint: .production, context).get()
        }
        let aporat = try events("verify-receipt/aporat/inAppPurchaseResponse.json")
        XCTAssertTrue(aporat.flatMap(\.transactions).contains { $0.transactionId == "1000000156455961" && $0.productId == "myapp.1" })
        let legacy = try events("verify-receipt/itunes-iap/autorenew_response_legacy.json")
        XCTAssertEqual(legacy.flatMap(\.transactions).count, 1)
        XCTAssertEqual(try events("verify-receipt/itunes-iap/response_legacy2.json").first?.subscriptionKey, "1000000012345678")
        let imdhemy = try events("verify-receipt/imdhemy-appstore-iap/verify_receipt_response.json")
        // 42 in_app plus one newer latest_receipt_info transaction.
        XCTAssertEqual(Set(imdhemy.flatMap(\.transactions).map(\.transactionId)).count, 43)
        XCTAssertEqual(imdhemy.first?.renewalInfo?.expirationIntent, "1")
        XCTAssertEqual(try events("verify-receipt/itunes-iap/autorenew_response1.json").first?.subscriptionKey, "1000000155715958")
    }

    func testBackoffIsCappedExponential() {
        let client = VerifyReceiptClient(initialBackoff: .milliseconds(100), maxBackoff: .milliseconds(500))
        XCTAssertEqual((1...5).map { client.backoff(attempt: $0) },
                       [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(500), .milliseconds(500)])
    }
}

/// A one-connection-at-a-time HTTP/1.1 server on 127.0.0.1 answering scripted responses in order.
final class ScriptedServer: Sendable {
    struct Request: Sendable { let path: String; let body: [UInt8] }
    let port: UInt16
    /// Answers on a connection until the client closes it (each connection on a thread of its own);
    /// otherwise one answer per connection, then close.
    let keepAlive: Bool
    private let socketFD: Int32
    private let recorded = Mutex<[Request]>([])
    private let script: Mutex<[(Int, String)]>
    private let accepted = Mutex(0)

    init(responses: [(Int, String)], keepAlive: Bool = false) throws {
        script = Mutex(responses)
        self.keepAlive = keepAlive
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else { throw VerifyReceiptTransportError("cannot listen") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        socketFD = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in self.serve() }
        thread.start()
    }

    deinit { close(socketFD) }

    var requests: [Request] { recorded.withLock { $0 } }
    /// Connections accepted so far.
    var connections: Int { accepted.withLock { $0 } }

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    private func serve() {
        while true {
            let client = accept(socketFD, nil, nil)
            guard client >= 0 else { return }
            accepted.withLock { $0 += 1 }
            guard keepAlive else {
                handle(client)
                close(client)
                continue
            }
            Thread.detachNewThread { [self] in
                handle(client)
                close(client)
            }
        }
    }

    private func handle(_ client: Int32) {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(client, &buffer, buffer.count)
            guard count > 0 else { return }
            data += buffer[0..<count]
            let text = String(decoding: data, as: UTF8.self)
            guard let headerEnd = text.range(of: "\r\n\r\n") else { continue }
            let head = String(text[..<headerEnd.lowerBound])
            let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            let bodyStart = text.utf8.distance(from: text.startIndex, to: headerEnd.upperBound)
            guard data.count - bodyStart >= length else { continue }
            let path = head.split(separator: " ").dropFirst().first.map(String.init) ?? "/"
            recorded.withLock { $0.append(Request(path: path, body: Array(data[bodyStart..<(bodyStart + length)]))) }
            let (status, body) = script.withLock { $0.isEmpty ? (500, "script exhausted") : $0.removeFirst() }
            // A redirect points back at this server: a client that followed it would ask again.
            let location = (300..<400).contains(status) ? "Location: \(url("/redirected"))\r\n" : ""
            let connection = keepAlive ? "" : "Connection: close\r\n"
            let response = "HTTP/1.1 \(status) X\r\nContent-Type: application/json\r\n\(location)Content-Length: \(body.utf8.count)\r\n\(connection)\r\n\(body)"
            _ = Array(response.utf8).withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            guard keepAlive else { return }
            data = Array(data[(bodyStart + length)...])
        }
    }
}
