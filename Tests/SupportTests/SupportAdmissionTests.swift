@testable import Ingest
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import Kafka
import XCTest

/// Every support route passes one admission check before anything else runs: the hook where the
/// support credential is required. Served by the real HTTP server on a loopback port.
final class SupportAdmissionTests: XCTestCase {
    private func serve(_ routes: SupportRoutes) throws -> (HTTPServer, String) {
        let server = HTTPServer(port: 0, threads: 1, maxBodyBytes: 1024) { request, responder in routes.handle(request, responder) }
        try server.start()
        return (server, "http://127.0.0.1:\(server.boundPort)")
    }

    private func get(_ url: String) throws -> (status: Int, body: String) {
        let done = DispatchSemaphore(value: 0)
        let result = Result(status: 0, body: "")
        URLSession.shared.dataTask(with: URL(string: url)!) { data, response, _ in
            result.set((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data ?? Data(), as: UTF8.self))
            done.signal()
        }.resume()
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        return result.get()
    }

    private final class Result: @unchecked Sendable {
        // Safe: written once by the completion handler before the semaphore is signalled, read after.
        private var value: (status: Int, body: String)
        init(status: Int, body: String) { value = (status, body) }
        func set(_ status: Int, _ body: String) { value = (status, body) }
        func get() -> (status: Int, body: String) { value }
    }

    private let kafka = KafkaConfig(bootstrapServers: "127.0.0.1:1", clientId: "support-admission-test")

    func testARefusedRequestReachesNoRoute() throws {
        let routes = SupportRoutes(pool: nil, kafka: kafka, bounded: BoundedReads(timeout: .seconds(5), maxInFlight: 4)) { request in
            request.headers["Authorization"] == "Bearer support" ? nil : .error(status: 401, reason: "support credential required")
        }
        let (server, base) = try serve(routes)
        defer { server.stop() }
        for path in ["/support", "/support/users/u-1", "/support/search?q=1", "/support/raw/storeledger.notifications.raw/0/0"] {
            let answer = try get(base + path)
            XCTAssertEqual(answer.status, 401, path)
            XCTAssertTrue(answer.body.contains("support credential required"), answer.body)
        }
    }

    func testAnAdmittedRequestIsRouted() throws {
        let (server, base) = try serve(SupportRoutes(pool: nil, kafka: kafka, bounded: BoundedReads(timeout: .seconds(5), maxInFlight: 4)))
        defer { server.stop() }
        XCTAssertEqual(try get(base + "/support").status, 200)
        let user = try get(base + "/support/users/u-1")
        XCTAssertEqual(user.status, 503, "routed to the database read, which is not configured here")
        XCTAssertTrue(user.body.contains("need DATABASE_URL"), user.body)
        XCTAssertEqual(try get(base + "/support/nowhere").status, 404)
    }
}
