import Foundation
import Synchronization

/// A minimal stand-in for Apple's legacy verifyReceipt, on a loopback socket: the receipt-data the
/// test uploads is base64 of the response it wants; production answers `21007` for a sandbox
/// receipt (in an HTTP 200, as Apple does), sandbox answers the response. Counts requests per path.
final class ScenarioVerifyReceiptStub: @unchecked Sendable {
    // Safe: `fd` and `port` are set once in init before the accept thread starts; mutable state is in Mutex.
    private let fd: Int32
    let port: Int
    private let requests = Mutex<[String: Int]>([:])
    private let stopped = Atomic<Bool>(false)

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw ClusterError("verifyReceipt stub could not listen")
        }
        fd = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// Requests answered, by "<path> <status>".
    var answered: [String: Int] { requests.withLock { $0 } }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(fd, nil, nil)
            guard client >= 0 else { continue }
            serve(client)
            close(client)
        }
    }

    private func serve(_ client: Int32) {
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        var expected: Int?
        var headerEnd = 0
        while expected.map({ buffer.count < headerEnd + $0 }) ?? true {
            let n = read(client, &chunk, chunk.count)
            guard n > 0 else { return }
            buffer += chunk[0..<n]
            if expected == nil, let range = findHeaderEnd(buffer) {
                headerEnd = range
                let head = String(decoding: buffer[0..<range], as: UTF8.self).lowercased()
                let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                expected = length
            }
        }
        let head = String(decoding: buffer[0..<headerEnd], as: UTF8.self)
        let path = head.split(separator: " ").dropFirst().first.map(String.init) ?? "/"
        let (status, body) = answer(path: path, body: Array(buffer[headerEnd...]))
        requests.withLock { $0["\(path) \(status)", default: 0] += 1 }
        let response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(response.utf8) + body
        _ = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
    }

    private func findHeaderEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i + 4
        }
        return nil
    }

    private func answer(path: String, body: [UInt8]) -> (Int, [UInt8]) {
        func status(_ code: Int) -> (Int, [UInt8]) { (code, Array(#"{"status":\#(code)}"#.utf8)) }
        guard let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let receipt = request["receipt-data"] as? String,
              let decoded = Data(base64Encoded: receipt),
              let response = (try? JSONSerialization.jsonObject(with: decoded)) as? [String: Any] else { return status(21002) }
        let sandbox = (response["environment"] as? String) == "Sandbox"
        if path.hasPrefix("/production"), sandbox { return status(21007) }
        if path.hasPrefix("/sandbox"), !sandbox { return status(21008) }
        return (0, [UInt8](decoded))
    }
}
