import Foundation
import Synchronization

/// A stop flag shared by a process's long-running loops. SIGINT/SIGTERM/SIGHUP set it; loops poll it
/// between batches so a stop is always graceful: finish in-flight work, commit, close.
public final class StopSignal: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let waiters = Mutex<[DispatchSemaphore]>([])

    public init() {}

    public var isStopped: Bool { stopped.load(ordering: .acquiring) }

    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let pending = waiters.withLock { list -> [DispatchSemaphore] in
            defer { list.removeAll() }
            return list
        }
        pending.forEach { $0.signal() }
    }

    /// Blocks the calling thread until `stop()` is called (or the timeout passes). Returns true if stopped.
    @discardableResult
    public func wait(timeout: Duration? = nil) -> Bool {
        let semaphore = DispatchSemaphore(value: 0)
        let already = waiters.withLock { list -> Bool in
            if isStopped { return true }
            list.append(semaphore)
            return false
        }
        if already { return true }
        if let timeout {
            _ = semaphore.wait(timeout: .now() + .nanoseconds(Int(timeout.nanoseconds)))
        } else {
            semaphore.wait()
        }
        return isStopped
    }

    /// Routes SIGINT, SIGTERM and SIGHUP (a closed terminal) of this process to `stop()`, and stops
    /// when a supervising parent dies.
    public func installSignalHandlers(logger: Logger? = nil) {
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [self] in
                logger?.info("signal_received", ["signal": .of(Int(sig))])
                stop()
            }
            source.resume()
            SignalSources.keep(source)
        }
        stopWhenParentExits()
    }
}

/// Signal sources must stay alive for the life of the process.
private enum SignalSources {
    // Safe: the sources are only appended under the mutex and never touched again.
    private struct Held: @unchecked Sendable { var list: [any DispatchSourceSignal] = [] }
    private static let sources = Mutex(Held())
    static func keep(_ source: any DispatchSourceSignal) {
        let held = Held(list: [source])
        sources.withLock { $0.list += held.list }
    }
}

extension Duration {
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
    public var milliseconds: Int64 { nanoseconds / 1_000_000 }
    public var secondsDouble: Double { Double(nanoseconds) / 1e9 }
}

/// Milliseconds since 1970, the pipeline's time unit (Apple's too).
public func currentTimeMs() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
