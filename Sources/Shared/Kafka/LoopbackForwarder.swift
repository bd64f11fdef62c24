#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import Synchronization

/// A tiny TCP relay on 127.0.0.1: accepts connections on `port` and copies bytes both ways to
/// `targetHost:targetPort`. Used to give the embedded broker a fixed bootstrap address.
///
/// One thread runs a poll(2) loop over every socket, so nothing blocks on a slow peer. When
/// either side of a connection closes or fails, both are closed (Kafka does not half-close).
final class LoopbackForwarder: Sendable {
    /// The port actually bound (differs from the requested one when that was 0).
    let port: Int
    private let listener: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let target: sockaddr_in
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(port requested: Int, targetHost: String, targetPort: UInt16) throws(KafkaError) {
        guard (0...65535).contains(requested) else { throw KafkaError(.configuration, "port \(requested) is out of range") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = targetPort.bigEndian
        guard inet_pton(AF_INET, targetHost == "localhost" ? "127.0.0.1" : targetHost, &address.sin_addr) == 1 else {
            throw KafkaError(.configuration, "forwarder target \(targetHost) is not an IPv4 address")
        }
        target = address

        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw KafkaError(.other, "forwarder socket: \(lastErrno())") }
        var on: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_port = UInt16(requested).bigEndian
        local.sin_addr.s_addr = in_addr_t(INADDR_LOOPBACK).bigEndian
        guard withSocketAddress(&local, { bind(listener, $0, $1) }) == 0, listen(listener, 128) == 0 else {
            let reason = lastErrno()
            close(listener)
            throw KafkaError(.other, "forwarder cannot listen on 127.0.0.1:\(requested): \(reason)")
        }
        var bound = sockaddr_in()
        _ = withSocketAddress(&bound) { pointer, _ in
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            return getsockname(listener, pointer, &length)
        }
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else {
            close(listener)
            throw KafkaError(.other, "forwarder pipe: \(lastErrno())")
        }
        pipeEnds.forEach(makeNonBlocking)
        self.listener = listener
        self.port = Int(UInt16(bigEndian: bound.sin_port))
        wakeRead = pipeEnds[0]
        wakeWrite = pipeEnds[1]

        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "kafka-embedded-forwarder"
        thread.start()
    }

    deinit { stop() }

    /// Stops accepting, closes every relayed connection and waits for the thread. Idempotent.
    func stop() {
        guard stopped.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        finished.wait()
        close(listener)
        close(wakeRead)
        close(wakeWrite)
    }

    /// One relayed connection and the bytes read from one side but not yet written to the other.
    private struct Relay {
        let client: Int32
        let upstream: Int32
        var toUpstream = Pending()
        var toClient = Pending()
    }

    private struct Pending {
        var bytes: [UInt8] = []
        var sent = 0
        var isEmpty: Bool { sent >= bytes.count }
    }

    private func run() {
        var relays: [Relay] = []
        var scratch = [UInt8](repeating: 0, count: 64 * 1024)
        defer { relays.forEach { close($0.client); close($0.upstream) } }
        while true {
            var fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            for relay in relays {
                fds.append(pollfd(fd: relay.client, events: interest(read: relay.toUpstream, write: relay.toClient), revents: 0))
                fds.append(pollfd(fd: relay.upstream, events: interest(read: relay.toClient, write: relay.toUpstream), revents: 0))
            }
            guard poll(&fds, nfds_t(fds.count), -1) >= 0 || errno == EINTR else { return }
            if fds[0].revents != 0 { return }

            var survivors: [Relay] = []
            for (index, var relay) in relays.enumerated() {
                let clientReady = fds[2 + 2 * index].revents, upstreamReady = fds[3 + 2 * index].revents
                if pump(from: relay.client, ready: clientReady, to: relay.upstream, &relay.toUpstream, &scratch),
                   pump(from: relay.upstream, ready: upstreamReady, to: relay.client, &relay.toClient, &scratch) {
                    survivors.append(relay)
                } else {
                    close(relay.client)
                    close(relay.upstream)
                }
            }
            relays = survivors
            if fds[1].revents & Int16(POLLIN) != 0 { relays += acceptAll() }
        }
    }

    private func interest(read pendingOut: Pending, write pendingIn: Pending) -> Int16 {
        (pendingOut.isEmpty ? Int16(POLLIN) : 0) | (pendingIn.isEmpty ? 0 : Int16(POLLOUT))
    }

    /// Reads from `source` when its outgoing buffer is empty and writes what is pending to
    /// `destination`. Returns false when the connection is finished.
    private func pump(from source: Int32, ready: Int16, to destination: Int32,
                      _ pending: inout Pending, _ scratch: inout [UInt8]) -> Bool {
        if ready & Int16(POLLNVAL) != 0 { return false }
        if pending.isEmpty, ready & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
            let count = scratch.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) }
            if count == 0 { return false }
            if count < 0 { return errno == EAGAIN || errno == EINTR }
            pending = Pending(bytes: Array(scratch[0..<count]), sent: 0)
        }
        while !pending.isEmpty {
            let count = pending.bytes.withUnsafeBytes { bytes in
                send(destination, bytes.baseAddress! + pending.sent, bytes.count - pending.sent, Int32(MSG_NOSIGNAL))
            }
            if count < 0 { return errno == EAGAIN || errno == EINTR }
            pending.sent += count
        }
        return true
    }

    private func acceptAll() -> [Relay] {
        var accepted: [Relay] = []
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return accepted }
            makeNonBlocking(client)
            guard let upstream = connectUpstream() else {
                close(client) // broker down: the client sees a closed connection and retries
                continue
            }
            setNoDelay(client)
            accepted.append(Relay(client: client, upstream: upstream))
        }
    }

    /// A blocking connect is fine: the target is on loopback, so it succeeds or fails at once.
    private func connectUpstream() -> Int32? {
        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard upstream >= 0 else { return nil }
        var address = target
        guard withSocketAddress(&address, { connect(upstream, $0, $1) }) == 0 else {
            close(upstream)
            return nil
        }
        makeNonBlocking(upstream)
        setNoDelay(upstream)
        return upstream
    }

    /// Kafka requests are small and latency-bound: do not let Nagle hold them back.
    private func setNoDelay(_ socket: Int32) {
        var on: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }
}

private func withSocketAddress<R>(_ address: inout sockaddr_in, _ body: (UnsafeMutablePointer<sockaddr>, socklen_t) -> R) -> R {
    withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}

private func makeNonBlocking(_ descriptor: Int32) {
    _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
    _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
}

private func lastErrno() -> String { String(cString: strerror(errno)) }
