import Foundation
@testable import HTTPServer
import XCTest

/// Contract: the edge limits of issue 11 at the library level. A body trickled slower than the
/// body timeout is hung up on without reaching the handler; connections from one address beyond
/// its cap are closed at once while the first ones stay served.
final class EdgeLimitTests: XCTestCase {
    func testTrickledBodyIsHungUpOnAfterTheBodyTimeout() throws {
        let handled = Collected<String>()
        let server = HTTPServer(port: 0, threads: 2, maxBodyBytes: 1024, connectionTimeoutSeconds: 30, bodyTimeout: .seconds(1)) { request, responder in
            handled.append(request.path)
            responder.respond(.text("ok"))
        }
        try server.start()
        defer { server.stop() }
        let client = try RawConnection(port: server.boundPort)
        client.send("POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n")
        let started = Date()
        var closedAfter: TimeInterval?
        for _ in 0..<40 {
            client.send("x")
            Thread.sleep(forTimeInterval: 0.1)
            var byte: UInt8 = 0
            if recv(client.fd, &byte, 1, Int32(MSG_DONTWAIT)) == 0 {
                closedAfter = Date().timeIntervalSince(started)
                break
            }
        }
        let after = try XCTUnwrap(closedAfter, "the server kept a 10-bytes-a-second body for 4 s")
        XCTAssertGreaterThanOrEqual(after, 0.9, "not before the timeout")
        XCTAssertLessThan(after, 3.5, "soon after the timeout")
        XCTAssertEqual(handled.all, [], "the handler never saw the request")
        // An ordinary request still gets its answer.
        let ordinary = try RawConnection(port: server.boundPort)
        ordinary.send("POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        XCTAssertEqual(ordinary.readResponse().status, 200)
    }

    func testConnectionsOverThePerAddressCapAreClosed() throws {
        let server = HTTPServer(port: 0, threads: 2, maxBodyBytes: 1024, connectionsPerAddress: 3) { _, responder in
            responder.respond(.text("ok"))
        }
        try server.start()
        defer { server.stop() }
        func closedCount(_ clients: [RawConnection]) -> Int {
            clients.filter { client in
                var byte: UInt8 = 0
                let count = recv(client.fd, &byte, 1, Int32(MSG_DONTWAIT))
                return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            }.count
        }
        var clients = try (0..<6).map { _ in try RawConnection(port: server.boundPort, source: "127.0.0.2") }
        // The host's own address is exempt: a proxy on the host brings every client from there.
        let host = try (0..<6).map { _ in try RawConnection(port: server.boundPort) }
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(closedCount(clients), 3, "three over the cap of three")
        XCTAssertEqual(closedCount(host), 0, "127.0.0.1 is not capped")
        clients[0].send("GET /still HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(clients[0].readResponse().status, 200, "the ones under the cap are served")
        // Closing frees the address's share again (each connection closes its socket when released).
        clients.removeAll()
        Thread.sleep(forTimeInterval: 0.5)
        let later = try (0..<3).map { _ in try RawConnection(port: server.boundPort, source: "127.0.0.2") }
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(closedCount(later), 0, "the closed ones no longer count")
    }

    /// Calls `body` with `text` (IPv4 or IPv6) as a socket address.
    private func withAddress<T>(_ text: String, _ body: (UnsafePointer<sockaddr>) -> T) -> T {
        if text.contains(":") {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            _ = inet_pton(AF_INET6, text, &address.sin6_addr)
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(text)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }

    /// Slow clients from many addresses (and the host's own) fill at most the connections not kept
    /// for Apple: 17.0.0.0/8, as IPv4 or IPv4-mapped, is still admitted; a closed one frees its room.
    func testConnectionsKeptForAppleStayFreeWhateverTheOthersHold() {
        let limit = AddressLimit(perAddress: 2, othersLimit: 5)
        for text in ["192.0.2.1", "192.0.2.1", "192.0.2.2", "2001:db8::1", "127.0.0.1"] {
            XCTAssertTrue(withAddress(text) { limit.admits($0) }, text)
            withAddress(text) { limit.opened($0) }
        }
        XCTAssertFalse(withAddress("198.51.100.9") { limit.admits($0) }, "the others' share is full")
        XCTAssertFalse(withAddress("127.0.0.1") { limit.admits($0) }, "the host's own address is exempt from the per-address cap only")
        XCTAssertTrue(withAddress("17.58.100.1") { limit.admits($0) })
        XCTAssertTrue(withAddress("::ffff:17.1.2.3") { limit.admits($0) })
        for _ in 0..<10 { withAddress("17.58.100.1") { limit.opened($0) } }
        XCTAssertTrue(withAddress("17.58.100.2") { limit.admits($0) }, "Apple is not capped by the others' share")
        withAddress("192.0.2.2") { limit.closed($0) }
        XCTAssertTrue(withAddress("198.51.100.9") { limit.admits($0) })
        XCTAssertFalse(withAddress("192.0.2.1") { limit.admits($0) }, "the per-address cap still holds")
    }

    /// Which addresses count together: IPv4 alone, an IPv4-mapped IPv6 address as its IPv4, IPv6 by
    /// /64; the host's own addresses not at all.
    func testAddressKeys() {
        func key(_ text: String) -> AddressLimit.Key? { withAddress(text) { AddressLimit.key($0) } }
        XCTAssertNil(key("127.0.0.1"))
        XCTAssertNil(key("::1"))
        XCTAssertNil(key("::ffff:127.0.0.1"))
        XCTAssertNotNil(key("127.0.0.2"))
        XCTAssertEqual(key("::ffff:192.0.2.7"), key("192.0.2.7"))
        XCTAssertNotEqual(key("192.0.2.7"), key("192.0.2.8"))
        XCTAssertEqual(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"), "one /64")
        XCTAssertNotEqual(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"))
    }
}

/// The Content-Length reader without Foundation reads every value as the general way does.
final class ContentLengthReadingTests: XCTestCase {
    func testPlainDigitsReadAsTheGeneralWayAndAnythingElseIsLeftToIt() {
        let plain = ["0", "7", "1024", "936000", "000123", "999999999999999999"]
        let other = ["", " 12", "12 ", "\t12", "1 2", "-1", "+1", "1e3", "0x10", "banana", "1234567890123456789", "12\u{A0}", "١٢"]
        for text in plain + other {
            let general = Int(text.trimmingCharacters(in: .whitespaces)) ?? Int.max
            let fast = text.withCString { plainContentLength($0) }
            if plain.contains(text) {
                XCTAssertEqual(fast, general, text)
            } else {
                XCTAssertNil(fast, text)
            }
        }
    }
}
