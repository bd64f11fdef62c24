import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import Synchronization
import XCTest

/// Starts a server on an ephemeral loopback port; the caller stops it.
func startedServer(threads: Int = 2, maxBodyBytes: Int = 64 * 1024,
                   handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void) throws -> HTTPServer {
    let server = HTTPServer(port: 0, threads: threads, maxBodyBytes: maxBodyBytes, handler: handler)
    try server.start()
    return server
}

/// A URLSession that opens as many parallel connections as a test asks for.
let testSession: URLSession = {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpMaximumConnectionsPerHost = 64
    configuration.timeoutIntervalForRequest = 10
    return URLSession(configuration: configuration)
}()

func url(_ server: HTTPServer, _ pathAndQuery: String) -> URL {
    URL(string: "http://127.0.0.1:\(server.boundPort)\(pathAndQuery)")!
}

/// Sends `request` and returns the body and response.
func fetch(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
    let (data, response) = try await testSession.data(for: request)
    return (data, response as! HTTPURLResponse)
}

/// Thread-safe collection the tests fill from handler threads.
final class Collected<Element: Sendable>: Sendable {
    private let items = Mutex<[Element]>([])
    func append(_ item: Element) { items.withLock { $0.append(item) } }
    var all: [Element] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
}

/// Polls `condition` until it holds or `timeout` passes.
func waitUntil(timeout: Duration = .seconds(5), _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        usleep(2_000)
    }
    return condition()
}

/// A blocking TCP client for bytes URLSession will not send: malformed requests, chunked
/// bodies, and clients that vanish mid-request.
final class RawConnection {
    let fd: Int32

    /// A connection to 127.0.0.1:`port`, from the loopback address `source`.
    init(port: Int, source: String = "127.0.0.1") throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { close(fd); throw POSIXError(.EADDRNOTAVAIL) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            Glibc.close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
    }

    deinit { Glibc.close(fd) }

    func send(_ text: String) { send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return }
            offset += sent
        }
    }

    /// Closes abruptly (RST rather than FIN), like a client that crashed.
    func reset() {
        var lingering = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lingering, socklen_t(MemoryLayout<linger>.size))
        shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Reads one response: until the headers and `Content-Length` bytes of body are in, or
    /// the server closes, or 5 s pass. Returns the status (nil if none) and the body text.
    func readResponse() -> (status: Int?, headers: String, body: String) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            if let (head, bodyStart) = splitHead(received) {
                let length = contentLength(head) ?? 0
                if received.count - bodyStart >= length {
                    let body = String(decoding: received[bodyStart..<(bodyStart + length)], as: UTF8.self)
                    return (status(head), head, body)
                }
            }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        guard let (head, bodyStart) = splitHead(received) else { return (nil, "", "") }
        return (status(head), head, String(decoding: received[bodyStart...], as: UTF8.self))
    }

    private func splitHead(_ bytes: [UInt8]) -> (String, Int)? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4) where Array(bytes[index..<(index + 4)]) == separator {
            return (String(decoding: bytes[0..<index], as: UTF8.self), index + 4)
        }
        return nil
    }

    private func status(_ head: String) -> Int? {
        let parts = head.split(separator: " ", maxSplits: 2)
        return parts.count >= 2 ? Int(parts[1]) : nil
    }

    private func contentLength(_ head: String) -> Int? {
        for line in head.split(separator: "\r\n") {
            let pieces = line.split(separator: ":", maxSplits: 1)
            if pieces.count == 2, pieces[0].lowercased() == "content-length" {
                return Int(pieces[1].trimmingCharacters(in: .whitespaces))
            }
        }
        return nil
    }
}
