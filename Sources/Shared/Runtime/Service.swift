import Foundation
import Synchronization

/// One long-running part of a process (a consumer loop, an admin HTTP server), after
/// swift-service-lifecycle's `Service`: `run` blocks until `stop` is set (graceful: stop fetching,
/// finish in-flight work, commit, close) or the service fails.
public protocol Service: AnyObject, Sendable {
    var name: String { get }
    /// Whether the service can do its job now (what `/readyz` reports).
    var isReady: Bool { get }
    /// Runs on a dedicated thread until `stop`; returns the exit code (non-zero: a critical failure).
    func run(until stop: StopSignal) throws -> Int32
}

/// Runs services in one process: starts them in order, each on its own thread; when the process
/// is signalled (SIGTERM, SIGINT, SIGHUP) or any service ends on its own, stops them in reverse
/// order, each given what is left of `shutdownGrace`. Readiness is the conjunction of all.
public final class ServiceGroup: Sendable {
    public let services: [any Service]
    private let logger: Logger
    private let shutdownGrace: Duration

    public init(_ services: [any Service], logger: Logger, shutdownGrace: Duration = .seconds(10)) {
        self.services = services
        self.logger = logger
        self.shutdownGrace = shutdownGrace
    }

    public var isReady: Bool { services.allSatisfy(\.isReady) }

    /// Names of the services not ready now (for `/readyz` reasons).
    public var notReady: [String] { services.filter { !$0.isReady }.map(\.name) }

    /// Blocks until the group stopped; returns the first non-zero exit code of a service (or 1 if
    /// one threw, or one did not stop within the grace), else 0.
    public func run(until stop: StopSignal) -> Int32 {
        let ended = StopSignal()   // set by the first service that returns on its own
        let codes = Mutex<[Int32]>([])
        var running: [(service: any Service, stop: StopSignal, done: DispatchSemaphore)] = []
        for service in services {
            let own = StopSignal()
            let done = DispatchSemaphore(value: 0)
            let logger = self.logger
            let thread = Thread {
                var code: Int32
                do {
                    code = try service.run(until: own)
                } catch {
                    logger.error("service_failed", ["service": .string(service.name), "error": .string(String(describing: error))])
                    code = 1
                }
                codes.withLock { $0.append(code) }
                done.signal()
                ended.stop()
            }
            thread.name = service.name
            thread.start()
            running.append((service, own, done))
            logger.info("service_started", ["service": .string(service.name)])
        }
        // Whichever comes first: the process is told to stop, or a service ended by itself.
        Thread.detachNewThread { stop.wait(); ended.stop() }
        ended.wait()
        let deadline = ContinuousClock.now + shutdownGrace
        var overran = false
        for entry in running.reversed() {
            entry.stop.stop()
            let left = max(.zero, deadline - ContinuousClock.now)
            if entry.done.wait(timeout: .now() + .nanoseconds(Int(left.nanoseconds))) == .timedOut {
                logger.error("service_stop_overran", ["service": .string(entry.service.name), "grace_ms": .int(shutdownGrace.milliseconds)])
                overran = true
            } else {
                logger.info("service_stopped", ["service": .string(entry.service.name)])
            }
        }
        let failed = codes.withLock { $0.first { $0 != 0 } }
        return failed ?? (overran ? 1 : 0)
    }
}
