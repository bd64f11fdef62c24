import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
@testable import Runtime
import XCTest

/// Contract: every test runs a real libmicrohttpd daemon on an ephemeral loopback port and
/// talks to it over TCP (URLSession, or a raw socket for bytes URLSession will not send).
/// The handler sees complete requests (method, decoded path and query, all headers, the
/// whole body, client address, arrival time) and may answer at once or later from any
/// thread; bodies over the limit get 413 without reaching the handler; stop() never hangs,
/// and late or duplicate answers are harmless.
final class HTTPServerTests: XCTestCase {

    /// What the echo handler saw, sent back as JSON.
    struct Echo: Codable, Sendable {
        var method: String
        var path: String
        var query: [[String]]
        var customValues: [String]
        var userAgentViaLowercase: String?
        var body: [UInt8]
        var remoteAddress: String
        var receivedAt: Double
    }

    private func echoServer(maxBodyBytes: Int = 256 * 1024) throws -> HTTPServer {
        try startedServer(maxBodyBytes: maxBodyBytes) { request, responder in
            let echo = Echo(method: request.method, path: request.path,
                            query: request.query.map { [$0.name, $0.value] },
                            customValues: request.headers.values(for: "x-custom"),
                            userAgentViaLowercase: request.headers["user-agent"],
                            body: request.body, remoteAddress: request.remoteAddress,
                            receivedAt: request.receivedAt.timeIntervalSince1970)
            var response = HTTPResponse.json(status: request.method == "POST" ? 201 : 200, echo)
            response.headers.add(name: "X-Reply", value: "echo")
            responder.respond(response)
        }
    }

    func testGetRoundTripCarriesDecodedPathQueryAndHeaders() async throws {
        let server = try echoServer()
        defer { server.stop() }
        let before = Date().timeIntervalSince1970
        var request = URLRequest(url: url(server, "/items/a%20b?x=1&y=hello%20world&y=2&flag&plus=a+b"))
        request.setValue("Tester/1.0", forHTTPHeaderField: "User-Agent")
        request.setValue("first", forHTTPHeaderField: "X-Custom")
        let (data, response) = try await fetch(request)

        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.value(forHTTPHeaderField: "X-Reply"), "echo")
        XCTAssertEqual(response.value(forHTTPHeaderField: "Content-Type"), "application/json")
        let echo = try JSONDecoder().decode(Echo.self, from: data)
        XCTAssertEqual(echo.method, "GET")
        XCTAssertEqual(echo.path, "/items/a b")
        XCTAssertEqual(echo.query, [["x", "1"], ["y", "hello world"], ["y", "2"], ["flag", ""], ["plus", "a b"]])
        XCTAssertEqual(echo.customValues, ["first"])
        XCTAssertEqual(echo.userAgentViaLowercase, "Tester/1.0")
        XCTAssertEqual(echo.body, [])
        XCTAssertEqual(echo.remoteAddress, "127.0.0.1")
        XCTAssertGreaterThanOrEqual(echo.receivedAt, before - 0.001)
        XCTAssertLessThanOrEqual(echo.receivedAt, Date().timeIntervalSince1970)
    }

    func testRepeatedHeadersKeepEveryValueAndOriginalNames() throws {
        let seen = Collected<HTTPHeaders>()
        let server = try startedServer { request, responder in
            seen.append(request.headers)
            responder.respond(.text("ok"))
        }
        defer { server.stop() }
        let client = try RawConnection(port: server.boundPort)
        client.send("GET / HTTP/1.1\r\nHost: t\r\nX-Trace-ID: one\r\nx-trace-id: two\r\n\r\n")
        let reply = client.readResponse()
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.body, "ok")
        let headers = try XCTUnwrap(seen.all.first)
        XCTAssertEqual(headers.values(for: "X-TRACE-ID"), ["one", "two"])
        XCTAssertEqual(headers["x-trace-id"], "one")
        XCTAssertEqual(headers.fields.filter { $0.value == "one" || $0.value == "two" }.map(\.name),
                       ["X-Trace-ID", "x-trace-id"])
    }

    func testPostRoundTripDeliversWholeBinaryBody() async throws {
        let server = try echoServer()
        defer { server.stop() }
        let body = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        var request = URLRequest(url: url(server, "/upload"))
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await fetch(request)

        XCTAssertEqual(response.statusCode, 201)
        let echo = try JSONDecoder().decode(Echo.self, from: data)
        XCTAssertEqual(echo.method, "POST")
        XCTAssertEqual(echo.path, "/upload")
        XCTAssertEqual(echo.body, body)
    }

    func testChunkedBodyWithinLimitIsAssembled() throws {
        let bodies = Collected<[UInt8]>()
        let server = try startedServer(maxBodyBytes: 64) { request, responder in
            bodies.append(request.body)
            responder.respond(.text("got \(request.body.count)"))
        }
        defer { server.stop() }
        let client = try RawConnection(port: server.boundPort)
        client.send("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        let reply = client.readResponse()
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.body, "got 11")
        XCTAssertEqual(bodies.all, [Array("hello world".utf8)])
    }

    /// Twenty requests answered 200 ms later from other threads, on a two-thread pool, finish
    /// in about one delay: parked requests hold no pool thread.
    func testDelayedAnswersFromOtherThreadsDoNotBlockThePool() async throws {
        let delay = 0.2
        let server = try startedServer(threads: 2) { request, responder in
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                responder.respond(.text("late \(request.path)"))
            }
        }
        defer { server.stop() }
        let started = ContinuousClock.now
        let bodies = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<20 {
                group.addTask {
                    let (data, response) = try await fetch(URLRequest(url: url(server, "/r\(index)")))
                    XCTAssertEqual(response.statusCode, 200)
                    return String(decoding: data, as: UTF8.self)
                }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        let elapsed = ContinuousClock.now - started
        XCTAssertEqual(bodies, Set((0..<20).map { "late /r\($0)" }))
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(190))
        XCTAssertLessThan(elapsed, .milliseconds(1_500), "20 × 200 ms serially would be 4 s")
        XCTAssertTrue(waitUntil { server.inFlightCount == 0 })
    }

    func testSecondRespondIsIgnored() async throws {
        let outcomes = Collected<[Bool]>()
        let server = try startedServer { _, responder in
            let first = responder.respond(.text(status: 202, "first"))
            let second = responder.respond(.text(status: 500, "second"))
            DispatchQueue.global().async { outcomes.append([first, second, responder.respond(.text("third"))]) }
        }
        defer { server.stop() }
        let (data, response) = try await fetch(URLRequest(url: url(server, "/")))
        XCTAssertEqual(response.statusCode, 202)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "first")
        XCTAssertTrue(waitUntil { outcomes.count == 1 })
        XCTAssertEqual(outcomes.all, [[true, false, false]])
    }

    func testDeclaredOversizedBodyGets413WithoutReachingHandler() async throws {
        let calls = Collected<String>()
        let server = try startedServer(maxBodyBytes: 1_000) { request, responder in
            calls.append(request.path)
            responder.respond(.text("ok"))
        }
        defer { server.stop() }

        var request = URLRequest(url: url(server, "/big"))
        request.httpMethod = "POST"
        request.httpBody = Data(repeating: 0x41, count: 1_001)
        let (data, response) = try await fetch(request)
        XCTAssertEqual(response.statusCode, 413)
        let reason = try JSONDecoder().decode([String: String].self, from: data)
        XCTAssertEqual(reason, ["error": "request body exceeds 1000 bytes"])

        // A huge declared length is refused from the headers alone: no body is ever sent.
        let client = try RawConnection(port: server.boundPort)
        client.send("POST /huge HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n")
        XCTAssertEqual(client.readResponse().status, 413)

        // A client that sends a moderately oversized body without waiting reads its 413 after
        // the body is drained, never a reset connection.
        let eager = try RawConnection(port: server.boundPort)
        eager.send("POST /eager HTTP/1.1\r\nHost: t\r\nContent-Length: 200000\r\n\r\n" + String(repeating: "e", count: 200_000))
        XCTAssertEqual(eager.readResponse().status, 413)

        // At the limit exactly is fine.
        request.httpBody = Data(repeating: 0x41, count: 1_000)
        let (_, accepted) = try await fetch(request)
        XCTAssertEqual(accepted.statusCode, 200)
        XCTAssertEqual(calls.all, ["/big"])
    }

    func testChunkedBodyOverLimitGets413WithoutReachingHandler() throws {
        let calls = Collected<String>()
        let server = try startedServer(maxBodyBytes: 1_000) { request, responder in
            calls.append(request.path)
            responder.respond(.text("ok"))
        }
        defer { server.stop() }
        let client = try RawConnection(port: server.boundPort)
        let chunk = String(repeating: "z", count: 400)
        client.send("POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in 0..<3 { client.send("190\r\n\(chunk)\r\n") }
        client.send("0\r\n\r\n")
        let reply = client.readResponse()
        XCTAssertEqual(reply.status, 413)
        XCTAssertTrue(reply.body.contains("request body exceeds 1000 bytes"), reply.body)
        XCTAssertEqual(calls.all, [])
    }

    func testPortZeroBindsARealPort() throws {
        let first = HTTPServer(port: 0, threads: 1, maxBodyBytes: 10) { _, responder in responder.respond(.text("1")) }
        XCTAssertEqual(first.boundPort, 0)
        try first.start()
        defer { first.stop() }
        let second = try startedServer { _, responder in responder.respond(.text("2")) }
        defer { second.stop() }
        XCTAssertGreaterThan(first.boundPort, 0)
        XCTAssertGreaterThan(second.boundPort, 0)
        XCTAssertNotEqual(first.boundPort, second.boundPort)
        let client = try RawConnection(port: first.boundPort)
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(client.readResponse().body, "1")
    }

    /// A port picked for a child lies below the ephemeral range, where no outgoing connection's
    /// source port can take it before the child binds it; no two picks in a process are the same.
    func testPickedPortsLieBelowTheEphemeralRangeAndAreNeverHandedOutTwice() throws {
        let low = FreePort.ephemeralLow()
        try XCTSkipUnless(low - FreePort.floor >= 1_000, "this machine's ephemeral range starts at \(low): the kernel chooses")
        let ports = try (0..<50).map { _ in try FreePort.loopback() }
        XCTAssertEqual(Set(ports).count, ports.count)
        for port in ports { XCTAssertTrue((FreePort.floor..<low).contains(port), "\(port)") }
        let server = HTTPServer(port: ports[0], threads: 1, maxBodyBytes: 10) { _, responder in responder.respond(.text("ok")) }
        try server.start()
        defer { server.stop() }
        XCTAssertEqual(server.boundPort, ports[0])
    }

    func testStartFailuresAreTypedErrors() throws {
        let running = try startedServer { _, responder in responder.respond(.text("x")) }
        defer { running.stop() }
        XCTAssertThrowsError(try running.start()) { XCTAssertEqual($0 as? HTTPServerError, .alreadyStarted) }

        let clash = HTTPServer(port: running.boundPort, threads: 1, maxBodyBytes: 10) { _, _ in }
        XCTAssertThrowsError(try clash.start()) { error in
            guard case .startFailed(let reason) = error as? HTTPServerError else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("\(running.boundPort)"), reason)
        }
        let badThreads = HTTPServer(port: 0, threads: 0, maxBodyBytes: 10) { _, _ in }
        XCTAssertThrowsError(try badThreads.start()) {
            XCTAssertEqual($0 as? HTTPServerError, .invalidConfiguration("threads 0 is not in 1...1024"))
        }
        let badHost = HTTPServer(host: "no.such.host.invalid", port: 0, threads: 1, maxBodyBytes: 10) { _, _ in }
        XCTAssertThrowsError(try badHost.start()) {
            guard case .cannotResolveHost = $0 as? HTTPServerError else { return XCTFail("\($0)") }
        }
    }

    func testStopWhileRequestsAreParkedReturnsPromptlyAndLateRespondIsHarmless() throws {
        let parked = Collected<HTTPResponder>()
        let server = try startedServer { _, responder in parked.append(responder) }
        let clients = try (0..<3).map { index in
            let client = try RawConnection(port: server.boundPort)
            client.send("GET /wait\(index) HTTP/1.1\r\nHost: t\r\n\r\n")
            return client
        }
        XCTAssertTrue(waitUntil { parked.count == 3 && server.inFlightCount == 3 })

        let started = ContinuousClock.now
        server.stop()
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(2))
        server.stop()  // idempotent
        XCTAssertEqual(server.inFlightCount, 0)
        for responder in parked.all {
            XCTAssertFalse(responder.respond(.text("too late")))
        }
        for client in clients {
            // Either the 503 made it out before the sockets closed, or the connection closed.
            let status = client.readResponse().status
            XCTAssertTrue(status == nil || status == 503, "status \(String(describing: status))")
        }
    }

    func testClientVanishingWhileParkedIsHarmless() async throws {
        let parked = Collected<HTTPResponder>()
        let server = try startedServer { request, responder in
            if request.path == "/park" { parked.append(responder) } else { responder.respond(.text("alive")) }
        }
        defer { server.stop() }
        for index in 1...2 {
            let client = try RawConnection(port: server.boundPort)
            client.send("GET /park HTTP/1.1\r\nHost: t\r\n\r\n")
            XCTAssertTrue(waitUntil { parked.count == index })
            client.reset()
        }
        usleep(50_000)
        XCTAssertEqual(server.inFlightCount, 2, "MHD does not watch parked sockets")

        // Answering the vanished clients resumes their connections; MHD then finds them gone.
        for responder in parked.all { responder.respond(.text("nobody listens")) }
        XCTAssertTrue(waitUntil { server.inFlightCount == 0 })
        for responder in parked.all { XCTAssertFalse(responder.respond(.text("again"))) }

        let (data, response) = try await fetch(URLRequest(url: url(server, "/other")))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "alive")
    }

    func testDrainingStopWaitsForParkedAnswers() throws {
        let server = try startedServer { _, responder in
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { responder.respond(.text("drained")) }
        }
        let client = try RawConnection(port: server.boundPort)
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertTrue(waitUntil { server.inFlightCount == 1 })
        server.stop(drainTimeout: .seconds(3))
        let reply = client.readResponse()
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.body, "drained")
        XCTAssertThrowsError(try RawConnection(port: server.boundPort), "no longer listening")
    }

    func testMalformedRequestsAreRefusedAndServerKeepsServing() async throws {
        let server = try startedServer { _, responder in responder.respond(.text("fine")) }
        defer { server.stop() }
        // Each is refused by libmicrohttpd with a 4xx or a closed connection.
        let refused: [[UInt8]] = [
            Array("NOT HTTP AT ALL\r\n\r\n".utf8),
            Array("GET / HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n".utf8),
            Array("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: banana\r\n\r\n".utf8),
            Array("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nxx\r\n".utf8),
            [UInt8](repeating: 0x41, count: 200_000),
            Array("GET /".utf8) + [UInt8](repeating: 0x61, count: 100_000) + Array(" HTTP/1.1\r\n\r\n".utf8),
        ]
        for bytes in refused {
            let client = try RawConnection(port: server.boundPort)
            client.send(bytes)
            let status = client.readResponse().status
            XCTAssertTrue(status == nil || (400..<500).contains(status!), "status \(String(describing: status))")
        }
        // Control bytes, NUL and invalid UTF-8 in a header value are passed through (repaired
        // to valid Swift strings), not a crash.
        let odd = try RawConnection(port: server.boundPort)
        odd.send(Array("GET / HTTP/1.1\r\nHost: t\r\nX: \u{01}".utf8) + [0, 0xFF, 0xFE] + Array("\r\n\r\n".utf8))
        XCTAssertEqual(odd.readResponse().status, 200)

        // A client that connects and leaves mid-headers.
        let quitter = try RawConnection(port: server.boundPort)
        quitter.send("GET / HTTP/1.1\r\nHo")
        quitter.reset()

        let (data, response) = try await fetch(URLRequest(url: url(server, "/")))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "fine")
    }

    func testInvalidStatusBecomes500AndBadHeadersAreDropped() throws {
        let server = try startedServer { request, responder in
            if request.path == "/bad-status" {
                responder.respond(HTTPResponse(status: 42))
            } else {
                responder.respond(HTTPResponse(status: 200, headers: ["X-Evil": "a\r\nInjected: yes", "X-Good": "ok",
                                                                      "Content-Length": "9999"],
                                               body: Array("body".utf8)))
            }
        }
        defer { server.stop() }
        let first = try RawConnection(port: server.boundPort)
        first.send("GET /bad-status HTTP/1.1\r\nHost: t\r\n\r\n")
        let bad = first.readResponse()
        XCTAssertEqual(bad.status, 500)
        XCTAssertTrue(bad.body.contains("invalid status 42"), bad.body)

        let second = try RawConnection(port: server.boundPort)
        second.send("GET /headers HTTP/1.1\r\nHost: t\r\n\r\n")
        let good = second.readResponse()
        XCTAssertEqual(good.status, 200)
        XCTAssertEqual(good.body, "body")
        XCTAssertTrue(good.headers.contains("X-Good: ok"), good.headers)
        XCTAssertFalse(good.headers.contains("Injected"), good.headers)
        XCTAssertFalse(good.headers.contains("9999"), good.headers)
    }
}

/// The value types alone: no server needed.
final class HTTPMessageTests: XCTestCase {
    func testHeaderLookupIgnoresCaseAndKeepsAllValues() {
        var headers: HTTPHeaders = ["Content-Type": "text/plain"]
        headers.add(name: "Set-Cookie", value: "a=1")
        headers.add(name: "set-cookie", value: "b=2")
        XCTAssertEqual(headers["content-TYPE"], "text/plain")
        XCTAssertEqual(headers.values(for: "SET-COOKIE"), ["a=1", "b=2"])
        XCTAssertNil(headers["Content-Typf"])
        XCTAssertNil(headers["Content-Typ"])
        headers.set(name: "SET-COOKIE", value: "c=3")
        XCTAssertEqual(headers.values(for: "set-cookie"), ["c=3"])
        XCTAssertEqual(headers.fields.map(\.name), ["Content-Type", "SET-COOKIE"])
    }

    func testResponseHelpers() throws {
        let error = HTTPResponse.error(status: 422, reason: "bad \"signedPayload\"")
        XCTAssertEqual(error.status, 422)
        XCTAssertEqual(error.headers["content-type"], "application/json")
        XCTAssertEqual(try JSONDecoder().decode([String: String].self, from: Data(error.body)),
                       ["error": "bad \"signedPayload\""])
        let text = HTTPResponse.text(status: 201, "héllo")
        XCTAssertEqual(text.body, Array("héllo".utf8))
        XCTAssertEqual(text.headers["Content-Type"], "text/plain; charset=utf-8")
        XCTAssertEqual(HTTPResponse.json(["b": 1, "a": 2]).body, Array(#"{"a":2,"b":1}"#.utf8))
        XCTAssertEqual(HTTPResponse.json(["a": 1]).headers["x-content-type-options"], "nosniff")
        XCTAssertEqual(error.headers["cache-control"], "no-store", "answers may carry customer data")
        XCTAssertEqual(HTTPResponse.json(Double.nan).status, 500)
    }
}
