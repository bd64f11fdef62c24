import CMicroHTTPD
import Foundation
import Synchronization

public enum HTTPServerError: Error, Equatable, CustomStringConvertible {
    case invalidConfiguration(String)
    case cannotResolveHost(String)
    case startFailed(String)
    case alreadyStarted

    public var description: String {
        switch self {
        case .invalidConfiguration(let reason): "invalid HTTP server configuration: \(reason)"
        case .cannotResolveHost(let reason): "cannot resolve listen host: \(reason)"
        case .startFailed(let reason): "HTTP server failed to start: \(reason)"
        case .alreadyStarted: "HTTP server was already started (a server starts at most once)"
        }
    }
}

/// An HTTP/1.1 server on libmicrohttpd: a pool of `threads` epoll loops calls `handler`
/// with each complete request. The handler answers through its `HTTPResponder`, at once or
/// later from any thread; an unanswered request parks its connection without holding a
/// pool thread. Do not call `stop()` from inside the handler (it joins the pool threads).
public final class HTTPServer: Sendable {
    public let host: String
    public let requestedPort: Int
    public let threads: Int
    public let maxBodyBytes: Int
    public let connectionLimit: Int
    public let connectionTimeoutSeconds: Int
    public let connectionsPerAddress: Int
    private let core: ServerCore
    private let lifecycle = Mutex(Lifecycle.idle)
    private let port = Atomic<Int>(0)

    private enum Lifecycle {
        case idle
        case running(DaemonHandle)
        case stopped
    }

    /// - Parameters:
    ///   - port: 0 picks a free port; read it from `boundPort` after `start()`.
    ///   - maxBodyBytes: larger bodies are answered 413 without being buffered.
    ///   - connectionLimit: connections over this are refused by the library.
    ///   - connectionTimeoutSeconds: idle connections are closed after this (parked ones never are);
    ///     it is also the longest a client may pause while sending its headers.
    ///   - connectionsPerAddress: connections one client IP address may hold at once (0: no limit
    ///     beyond `connectionLimit`), so slow clients from one place cannot take every slot; the
    ///     host's own address is exempt (AddressLimit).
    ///   - reservedForApple: of `connectionLimit`, connections only Apple's 17.0.0.0/8 may take, so
    ///     slow clients from many places cannot take the last ones Apple's notifications need.
    ///   - bodyTimeout: the longest a body may take to arrive once the headers are in; a slower
    ///     client is hung up on.
    public init(host: String = "127.0.0.1", port: Int, threads: Int, maxBodyBytes: Int,
                connectionLimit: Int = 1024, connectionTimeoutSeconds: Int = 30, connectionsPerAddress: Int = 0,
                reservedForApple: Int = 0, bodyTimeout: Duration = .seconds(60),
                handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void) {
        self.host = host
        self.requestedPort = port
        self.threads = threads
        self.maxBodyBytes = maxBodyBytes
        self.connectionLimit = connectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.connectionsPerAddress = connectionsPerAddress
        self.core = ServerCore(handler: handler, maxBodyBytes: maxBodyBytes, bodyTimeout: bodyTimeout,
                               connectionsPerAddress: connectionsPerAddress,
                               othersLimit: reservedForApple > 0 ? max(1, connectionLimit - reservedForApple) : .max)
    }

    deinit { stop() }

    /// The port the server listens on; 0 until `start()` succeeded.
    public var boundPort: Int { port.load(ordering: .acquiring) }

    /// Requests handed to the handler whose exchange has not finished (answer sent or client
    /// gone). A gauge for metrics, and what `stop(drainTimeout:)` waits on.
    public var inFlightCount: Int { core.inFlight.load(ordering: .relaxed) }

    /// Binds and starts the pool threads. A server starts at most once.
    public func start() throws(HTTPServerError) {
        try validateConfiguration()
        let address = try listenAddress(host: host, port: requestedPort)
        try lifecycle.withLock { (lifecycle: inout Lifecycle) throws(HTTPServerError) in
            guard case .idle = lifecycle else { throw .alreadyStarted }
            let daemon = try startDaemon(address: address)
            port.store(Int(storeledger_mhd_bound_port(daemon.pointer)), ordering: .releasing)
            lifecycle = .running(daemon)
        }
    }

    /// Stops the server; safe to call repeatedly, and before or without `start()`.
    ///
    /// With a `drainTimeout`, it first stops accepting connections and waits up to that long
    /// for in-flight requests to be answered. Requests still parked after that are answered
    /// 503 (best effort: the client may just see the connection close), and every later
    /// `respond` is a harmless no-op.
    public func stop(drainTimeout: Duration = .zero) {
        let taken: DaemonHandle? = lifecycle.withLock { lifecycle in
            defer { lifecycle = .stopped }
            guard case .running(let daemon) = lifecycle else { return nil }
            return daemon
        }
        guard let daemon = taken else { return }
        var quiescedSocket: Int32 = -1
        if drainTimeout > .zero {
            quiescedSocket = MHD_quiesce_daemon(daemon.pointer)
            let deadline = ContinuousClock.now + drainTimeout
            while core.inFlight.load(ordering: .relaxed) > 0 && ContinuousClock.now < deadline {
                usleep(1_000)
            }
        }
        // MHD_stop_daemon panics on a suspended connection: wake them all first.
        core.unparkAll()
        MHD_stop_daemon(daemon.pointer)
        // After a quiesce the listening socket is ours to close, and only after the stop.
        if quiescedSocket >= 0 { close(quiescedSocket) }
        Unmanaged.passUnretained(core).release()
    }

    // MARK: Starting

    private func validateConfiguration() throws(HTTPServerError) {
        guard (0...65_535).contains(requestedPort) else { throw .invalidConfiguration("port \(requestedPort) is not in 0...65535") }
        guard (1...1_024).contains(threads) else { throw .invalidConfiguration("threads \(threads) is not in 1...1024") }
        guard maxBodyBytes >= 0 else { throw .invalidConfiguration("maxBodyBytes \(maxBodyBytes) is negative") }
        guard (1...1_000_000).contains(connectionLimit) else {
            throw .invalidConfiguration("connectionLimit \(connectionLimit) is not in 1...1000000")
        }
        guard (0...86_400).contains(connectionTimeoutSeconds) else {
            throw .invalidConfiguration("connectionTimeoutSeconds \(connectionTimeoutSeconds) is not in 0...86400")
        }
    }

    /// Calls MHD_start_daemon_va (MHD_start_daemon is variadic, which Swift cannot call)
    /// with every option in one MHD_OPTION.ARRAY. The core is retained for the daemon's life
    /// and released by `stop()`.
    private func startDaemon(address: ListenAddress) throws(HTTPServerError) -> DaemonHandle {
        var flags = MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            | MHD_USE_ERROR_LOG.rawValue
        if address.family == AF_INET6 { flags |= MHD_USE_IPv6.rawValue }
        let coreOpaque = Unmanaged.passRetained(core).toOpaque()
        let started: OpaquePointer? = address.bytes.withUnsafeBytes { socketAddress in
            // The logger goes first, or MHD prints its earlier complaints to stderr itself.
            var options: [MHD_OptionItem] = [
                option(MHD_OPTION.EXTERNAL_LOGGER, function: unsafeBitCast(libraryLogCallback, to: UnsafeRawPointer.self),
                       context: coreOpaque),
                option(MHD_OPTION.CONNECTION_LIMIT, connectionLimit),
                option(MHD_OPTION.CONNECTION_TIMEOUT, connectionTimeoutSeconds),
                option(MHD_OPTION.SOCK_ADDR, pointer: UnsafeMutableRawPointer(mutating: socketAddress.baseAddress)),
                option(MHD_OPTION.NOTIFY_COMPLETED, function: unsafeBitCast(requestCompletedCallback, to: UnsafeRawPointer.self),
                       context: coreOpaque),
            ]
            if core.addressLimit != nil {
                options.append(option(MHD_OPTION.NOTIFY_CONNECTION, function: unsafeBitCast(connectionNotifyCallback, to: UnsafeRawPointer.self),
                                      context: coreOpaque))
            }
            // One thread means MHD's single internal thread; a "pool" of one draws a warning.
            if threads > 1 { options.append(option(MHD_OPTION.THREAD_POOL_SIZE, threads)) }
            options.append(option(MHD_OPTION.END, 0))
            return options.withUnsafeMutableBufferPointer { items in
                withVaList([MHD_OPTION.ARRAY.rawValue, items.baseAddress!, MHD_OPTION.END.rawValue] as [any CVarArg]) { arguments in
                    MHD_start_daemon_va(flags, UInt16(requestedPort), core.addressLimit != nil ? acceptPolicyCallback : nil,
                                        coreOpaque, accessHandlerCallback, coreOpaque, arguments)
                }
            }
        }
        guard let started else {
            let cause = String(cString: strerror(errno))
            Unmanaged<ServerCore>.fromOpaque(coreOpaque).release()
            let detail = core.lastLibraryMessage.withLock { $0 } ?? cause
            throw .startFailed("\(host):\(requestedPort): \(detail)")
        }
        return DaemonHandle(pointer: started)
    }
}

/// An MHD daemon pointer. Safe to send: only `stop()` uses it after start, once, having
/// taken it out of the lifecycle under the lock.
private struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

private func option(_ kind: MHD_OPTION, _ value: Int) -> MHD_OptionItem {
    MHD_OptionItem(option: kind, value: value, ptr_value: nil)
}

private func option(_ kind: MHD_OPTION, pointer: UnsafeMutableRawPointer?) -> MHD_OptionItem {
    MHD_OptionItem(option: kind, value: 0, ptr_value: pointer)
}

/// Options taking a function and its context: MHD wants the function cast to intptr_t.
private func option(_ kind: MHD_OPTION, function: UnsafeRawPointer, context: UnsafeMutableRawPointer) -> MHD_OptionItem {
    MHD_OptionItem(option: kind, value: Int(bitPattern: function), ptr_value: context)
}

/// A resolved socket address to bind, as raw `sockaddr` bytes.
private struct ListenAddress {
    var family: Int32
    var bytes: [UInt8]
}

/// Resolves `host` (a name or a numeric address) for listening, preferring IPv4 so that
/// "localhost" means 127.0.0.1 like the clients expect.
private func listenAddress(host: String, port: Int) throws(HTTPServerError) -> ListenAddress {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, String(port), &hints, &list)
    guard status == 0, let list else {
        throw .cannotResolveHost("\(host): \(String(cString: gai_strerror(status)))")
    }
    defer { freeaddrinfo(list) }
    var candidates: [ListenAddress] = []
    var entry: UnsafeMutablePointer<addrinfo>? = list
    while let current = entry {
        if let address = current.pointee.ai_addr,
           current.pointee.ai_family == AF_INET || current.pointee.ai_family == AF_INET6 {
            let bytes = UnsafeRawBufferPointer(start: address, count: Int(current.pointee.ai_addrlen))
            candidates.append(ListenAddress(family: current.pointee.ai_family, bytes: Array(bytes)))
        }
        entry = current.pointee.ai_next
    }
    guard let chosen = candidates.first(where: { $0.family == AF_INET }) ?? candidates.first else {
        throw .cannotResolveHost("\(host): no IPv4 or IPv6 address")
    }
    return chosen
}
