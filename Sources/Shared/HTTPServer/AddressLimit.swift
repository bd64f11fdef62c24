import CMicroHTTPD
import Foundation
import Synchronization

/// Connections one client address may hold, counted by the server rather than by libmicrohttpd's
/// per-IP limit so that the host's own address is exempt: a proxy on the same host (and the host's
/// own tools) connects from 127.0.0.1 or ::1 on behalf of every client, so capping that address
/// would cap everyone. Other loopback addresses (127.0.0.2 …) count like any remote address, and
/// IPv6 clients count per /64, the share one site usually holds.
final class AddressLimit: Sendable {
    /// One client address as counted: IPv4 (an IPv4-mapped IPv6 address too) or an IPv6 /64.
    struct Key: Hashable, Sendable {
        let isIPv6: Bool
        let bits: UInt64
    }

    /// Per client address (0: no per-address cap).
    let perAddress: Int
    /// Connections from outside Apple's 17.0.0.0/8 together (the server's whole limit less the
    /// room kept for Apple's notifications): a crowd of slow clients from many addresses cannot
    /// take the last connections Apple's retries need.
    let othersLimit: Int
    private let open = Mutex<(byKey: [Key: Int], others: Int)>(([:], 0))

    init(perAddress: Int, othersLimit: Int = .max) {
        self.perAddress = perAddress
        self.othersLimit = othersLimit
    }

    /// Whether a connection from `address` may be accepted now.
    func admits(_ address: UnsafePointer<sockaddr>) -> Bool {
        let key = Self.key(address), apple = Self.isApple(address)
        return open.withLock { open in
            if !apple, open.others >= othersLimit { return false }
            guard perAddress > 0, let key else { return true }
            return open.byKey[key, default: 0] < perAddress
        }
    }

    func opened(_ address: UnsafePointer<sockaddr>) {
        let key = Self.key(address), apple = Self.isApple(address)
        open.withLock { open in
            if !apple { open.others += 1 }
            if let key { open.byKey[key, default: 0] += 1 }
        }
    }

    func closed(_ address: UnsafePointer<sockaddr>) {
        let key = Self.key(address), apple = Self.isApple(address)
        open.withLock { open in
            if !apple { open.others = max(0, open.others - 1) }
            guard let key else { return }
            let left = open.byKey[key, default: 0] - 1
            open.byKey[key] = left > 0 ? left : nil
        }
    }

    /// Apple's App Store servers connect from 17.0.0.0/8 (Apple's published range for its
    /// notifications), as IPv4 or IPv4-mapped IPv6.
    static func isApple(_ address: UnsafePointer<sockaddr>) -> Bool {
        ipv4(address).map { $0 >> 24 == 17 } ?? false
    }

    static func ipv4(_ address: UnsafePointer<sockaddr>) -> UInt32? {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) }
        case AF_INET6:
            let bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
            }
            guard bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return nil }
            return bytes[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        default:
            return nil
        }
    }

    /// nil for the exempt host addresses (127.0.0.1, ::1, ::ffff:127.0.0.1) and unknown families. An
    /// IPv4-mapped IPv6 address is its IPv4 address; other IPv6 addresses count by their /64.
    static func key(_ address: UnsafePointer<sockaddr>) -> Key? {
        if let ipv4 = ipv4(address) { return ipv4 == 0x7F00_0001 ? nil : Key(isIPv6: false, bits: UInt64(ipv4)) }
        guard Int32(address.pointee.sa_family) == AF_INET6 else { return nil }
        let bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
            withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
        }
        let high = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let low = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        if high == 0, low == 1 { return nil }                           // ::1
        return Key(isIPv6: true, bits: high)
    }
}

/// libmicrohttpd asks before it accepts a connection: refused when its address holds its share.
let acceptPolicyCallback: MHD_AcceptPolicyCallback = { cls, address, _ in
    guard let cls, let address, let limit = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().addressLimit else {
        return MHD_Result.YES
    }
    return limit.admits(address) ? MHD_Result.YES : MHD_Result.NO
}

/// Counts each accepted connection from its start to its close.
let connectionNotifyCallback: MHD_NotifyConnectionCallback = { cls, connection, _, code in
    guard let cls, let connection, let limit = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().addressLimit,
          let address = storeledger_mhd_client_address(connection) else { return }
    // MHD_CONNECTION_NOTIFY_STARTED (0) and MHD_CONNECTION_NOTIFY_CLOSED (1), by value: Swift
    // imports the C enum without usable case names.
    switch code.rawValue {
    case 0: limit.opened(address)
    case 1: limit.closed(address)
    default: break
    }
}
