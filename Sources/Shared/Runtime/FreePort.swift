import Foundation
import Synchronization

/// A free TCP port on 127.0.0.1 for embedded servers and child processes that must be told their
/// port before they start.
///
/// The port comes from below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port
/// the kernel handed out for `bind(0)` and we closed again is the kind it also gives the next
/// outgoing connection as its source port, and a child told to listen there then fails with
/// "Address already in use" (seen in CI: a Kafka client's connection took a worker's admin port
/// between the pick and the child's bind). Below that range only listeners that name their port
/// compete; each candidate is bound once to check it, and this process never hands out one twice.
public enum FreePort {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The lowest port we hand out (above the registered services commonly found on a machine).
    static let floor = 20_000
    private static let handedOut = Mutex<Set<Int>>([])

    public static func loopback() throws -> Int {
        let ceiling = ephemeralLow() - 1
        if ceiling - floor >= 1_000 {
            for _ in 0..<200 {
                let candidate = Int.random(in: floor...ceiling)
                let fresh = handedOut.withLock { $0.insert(candidate).inserted }
                if fresh, (try? bind(candidate)) != nil { return candidate }
            }
        }
        // A machine whose ephemeral range starts low: let the kernel choose.
        return try bind(0)
    }

    /// The first port of the ephemeral range (32768, Linux's default, when it cannot be read).
    static func ephemeralLow() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
              let first = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first,
              let low = Int(first) else { return 32_768 }
        return low
    }

    /// Binds `port` on 127.0.0.1 (0: the kernel's choice), closes it and returns the port bound.
    private static func bind(_ port: Int) throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket() failed: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                Glibc.bind(fd, socketAddress, length) == 0 && getsockname(fd, socketAddress, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "cannot find a free port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
