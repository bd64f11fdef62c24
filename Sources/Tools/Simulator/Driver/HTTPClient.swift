import Foundation
import Synchronization

/// The service API key the simulator's app-side requests present to ingest (receipt uploads,
/// reads, offer requests): set by whoever starts a run (`storeledger dev --demo`, `simulate --dev`,
/// tests), else from Setting.apiKey at the simulator command's start. Apple's endpoint gets none, as from Apple.
public enum IngestCredential {
    private static let key = Mutex<String?>(nil)

    public static var apiKey: String? {
        get { key.withLock { $0 } }
        set { key.withLock { $0 = newValue } }
    }
}

/// A small blocking HTTP/1.1 client over one keep-alive TCP connection: the simulator makes
/// hundreds of thousands of requests, and one connection per worker thread keeps that cheap and
/// predictable (URLSession on Linux adds a thread hop and a libcurl handle per request).
final class HTTPConnection {
    struct Response {
        var status: Int
        var body: [UInt8]
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let host: String
    let port: UInt16
    let timeoutSeconds: Int
    private var fd: Int32 = -1
    private var buffer: [UInt8] = []

    init(baseURL: String, timeoutSeconds: Int = 15) throws {
        guard let components = URLComponents(string: baseURL), components.scheme == "http", let host = components.host else {
            throw Failure(description: "only http://host:port URLs are supported, got \(baseURL)")
        }
        self.host = host == "localhost" ? "127.0.0.1" : host
        self.port = UInt16(components.port ?? 80)
        self.timeoutSeconds = timeoutSeconds
    }

    deinit { disconnect() }

    func get(_ path: String) throws -> Response { try request("GET", path, body: nil) }
    func post(_ path: String, body: [UInt8]) throws -> Response { try request("POST", path, body: body) }

    /// One request; a connection the server closed while idle is reopened once before the write.
    func request(_ method: String, _ path: String, body: [UInt8]?) throws -> Response {
        if fd < 0 { try connect() }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nUser-Agent: storeledger-simulator\r\n"
        if let key = IngestCredential.apiKey, !path.hasPrefix("/v1/notifications/") { head += "Authorization: Bearer \(key)\r\n" }
        if let body { head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n" }
        head += "\r\n"
        let bytes = Array(head.utf8) + (body ?? [])
        do {
            try write(bytes)
            return try readResponse()
        } catch {
            // A keep-alive connection may have been closed by the server between requests.
            disconnect()
            try connect()
            try write(bytes)
            return try readResponse()
        }
    }

    private func connect() throws {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket() failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(socket)
            throw Failure(description: "\(host) is not an IPv4 address")
        }
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Foundation.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            let code = errno
            close(socket)
            throw Failure(description: "cannot connect to \(host):\(port): errno \(code)")
        }
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        fd = socket
        buffer.removeAll(keepingCapacity: true)
    }

    func disconnect() {
        if fd >= 0 { close(fd) }
        fd = -1
        buffer.removeAll(keepingCapacity: true)
    }

    private func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a peer that closed must be an error, not a SIGPIPE that kills us.
            let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw Failure(description: "send failed: errno \(errno)") }
            offset += sent
        }
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { throw Failure(description: count == 0 ? "connection closed by \(host):\(port)" : "recv failed: errno \(errno)") }
        buffer.append(contentsOf: chunk[0..<count])
    }

    private func readResponse() throws -> Response {
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = Self.find([13, 10, 13, 10], in: buffer)
            if headerEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        buffer.removeFirst(headerEnd! + 4)
        let lines = head.components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure(description: "bad status line \(lines[0])") }
        var length: Int?
        var chunked = false
        var closeAfter = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if name == "content-length" { length = Int(value) }
            if name == "transfer-encoding", value.lowercased().contains("chunked") { chunked = true }
            if name == "connection", value.lowercased() == "close" { closeAfter = true }
        }
        var body: [UInt8] = []
        if chunked {
            while true {
                var lineEnd = Self.find([13, 10], in: buffer)
                while lineEnd == nil { try fill(); lineEnd = Self.find([13, 10], in: buffer) }
                let sizeText = String(decoding: buffer[0..<lineEnd!], as: UTF8.self).split(separator: ";")[0]
                guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { throw Failure(description: "bad chunk size") }
                buffer.removeFirst(lineEnd! + 2)
                while buffer.count < size + 2 { try fill() }
                body += buffer[0..<size]
                buffer.removeFirst(size + 2)
                if size == 0 { break }
            }
        } else if let length {
            while buffer.count < length { try fill() }
            body = Array(buffer[0..<length])
            buffer.removeFirst(length)
        }
        if closeAfter { disconnect() }
        return Response(status: status, body: body)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        var i = 0
        while i <= haystack.count - needle.count {
            if haystack[i] == needle[0], Array(haystack[i..<(i + needle.count)]) == needle { return i }
            i += 1
        }
        return nil
    }
}

/// Waits until ingest answers `/healthz` with 200 (a freshly started StoreLedger).
public enum IngestHealth {
    public static func wait(_ baseURL: String, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let connection = try? HTTPConnection(baseURL: baseURL, timeoutSeconds: 2),
               (try? connection.get("/healthz").status) == 200 { return true }
            usleep(100_000)
        }
        return false
    }
}

/// One-off HTTP calls for tools built on the simulator (the demo, the CLI).
public enum SimpleHTTP {
    /// The status of one GET, any body (health probes).
    public static func status(_ baseURL: String, _ path: String, timeoutSeconds: Int) throws -> Int {
        try HTTPConnection(baseURL: baseURL, timeoutSeconds: timeoutSeconds).get(path).status
    }

    public static func get(_ baseURL: String, _ path: String) throws -> (status: Int, json: [String: Any]?) {
        let response = try HTTPConnection(baseURL: baseURL).get(path)
        return (response.status, response.json)
    }

    public static func post(_ baseURL: String, _ path: String, body: [UInt8]) throws -> (status: Int, json: [String: Any]?) {
        let response = try HTTPConnection(baseURL: baseURL).post(path, body: body)
        return (response.status, response.json)
    }
}
