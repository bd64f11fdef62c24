import Configuration
import Foundation
import Synchronization

/// Runs a set of child processes as one unit: starts them in order, restarts one that dies
/// unexpectedly (with backoff), and on stop terminates them in reverse order (SIGTERM, then
/// SIGKILL after a grace period). Children learn our pid through Setting.parentPid and stop
/// themselves if we vanish, so nothing is left running even after a hard kill.
public final class Supervisor: Sendable {
    public struct Child: Sendable {
        public var role: String
        public var arguments: [String]
        public var environment: [String: String]
        /// What to do when the child exits on its own: restart it, or stop the whole set
        /// (a child whose state cannot be rebuilt, like the in-memory broker).
        public var onExit: ExitPolicy

        public init(role: String, arguments: [String], environment: [String: String] = [:], onExit: ExitPolicy = .restart) {
            self.role = role
            self.arguments = arguments
            self.environment = environment
            self.onExit = onExit
        }
    }

    public enum ExitPolicy: Sendable {
        case restart
        case stopAll
        case ignore
    }

    private final class Running: @unchecked Sendable {
        // Safe: `process` is replaced only under the supervisor's mutex.
        let child: Child
        var process: Process
        var restarts = 0
        /// Set by `stop(role:)`: its exit is expected and never restarted.
        let retired = Atomic<Bool>(false)
        init(child: Child, process: Process) { self.child = child; self.process = process }
    }

    private let executable: String
    private let logger = Logger(component: "supervisor")
    private let running = Mutex<[Running]>([])
    private let stopping = Atomic<Bool>(false)

    /// Called once when a `.stopAll` child exits on its own.
    private let onCriticalExit: @Sendable (String) -> Void

    public init(executable: String, onCriticalExit: @escaping @Sendable (String) -> Void = { _ in }) {
        self.executable = executable
        self.onCriticalExit = onCriticalExit
    }

    /// Starts a child; `onLine` sees each line of its standard output (e.g. "BOOTSTRAP=...").
    @discardableResult
    public func start(_ child: Child, onLine: (@Sendable (String) -> Void)? = nil) throws -> Int32 {
        let entry = Running(child: child, process: Process())
        try launch(entry, onLine: onLine)
        running.withLock { $0.append(entry) }
        return running.withLock { _ in entry.process.processIdentifier }
    }

    /// The child's pid; nil while it is being (re)launched. Never 0: `kill(0, ...)` would signal
    /// the caller's whole process group.
    public func pid(of role: String) -> Int32? {
        running.withLock { list in list.first { $0.child.role == role }?.process.processIdentifier }.flatMap { $0 > 0 ? $0 : nil }
    }

    /// How often the child of `role` died unexpectedly and was restarted (or is about to be).
    public func restarts(of role: String) -> Int {
        running.withLock { list in list.first { $0.child.role == role }?.restarts ?? 0 }
    }

    /// Stops one child for good (SIGTERM, then SIGKILL after `grace`) and forgets it, so its exit is
    /// not restarted: a consumer-group member leaving the set (scale-in). Returns its exit status
    /// (0: it stopped cleanly by itself), nil when no child has that role.
    @discardableResult
    public func stop(role: String, grace: Duration = .seconds(10)) -> Int32? {
        guard let entry = running.withLock({ list -> Running? in
            guard let index = list.firstIndex(where: { $0.child.role == role }) else { return nil }
            return list.remove(at: index)
        }) else { return nil }
        entry.retired.store(true, ordering: .releasing)
        terminate(entry, grace: grace)
        let process = running.withLock { _ in entry.process }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// Stops every child in reverse start order.
    public func stopAll(grace: Duration = .seconds(10)) {
        stopping.store(true, ordering: .releasing)
        let entries = running.withLock { $0.reversed() }
        for entry in entries { terminate(entry, grace: grace) }
    }

    private func terminate(_ entry: Running, grace: Duration) {
        let process = running.withLock { _ in entry.process }
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(grace.secondsDouble)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            logger.warning("child_killed", ["role": .string(entry.child.role)])
            kill(process.processIdentifier, SIGKILL)
            while process.isRunning { usleep(10_000) }
        }
    }

    private func launch(_ entry: Running, onLine: (@Sendable (String) -> Void)?) throws {
        let child = entry.child
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = child.arguments
        var environment = ProcessEnvironment.current
        for (key, value) in child.environment { environment[key] = value }
        environment[Setting.parentPid.name] = String(getpid())
        process.environment = environment
        if let onLine {
            let pipe = Pipe()
            process.standardOutput = pipe
            let reader = LineReader(onLine: onLine)
            pipe.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                if data.isEmpty { handle.readabilityHandler = nil } else { reader.feed(data) }
            }
        }
        // A termination handler, not a thread in waitUntilExit (which spins on Linux).
        process.terminationHandler = { [self] ended in restartIfUnexpected(entry, ended, onLine: onLine) }
        running.withLock { _ in entry.process = process }
        try process.run()
        logger.info("child_started", ["role": .string(child.role), "pid": .of(Int(process.processIdentifier))])
    }

    private func restartIfUnexpected(_ entry: Running, _ ended: Process, onLine: (@Sendable (String) -> Void)?) {
        guard !stopping.load(ordering: .acquiring), !entry.retired.load(ordering: .acquiring) else { return }
        logger.warning("child_exited", ["role": .string(entry.child.role), "status": .of(Int(ended.terminationStatus))])
        switch entry.child.onExit {
        case .ignore: return
        case .stopAll:
            onCriticalExit(entry.child.role)
            return
        case .restart: break
        }
        let attempt = running.withLock { _ in entry.restarts += 1; return entry.restarts }
        DispatchQueue.global().asyncAfter(deadline: .now() + min(5.0, 0.2 * Double(1 << min(attempt, 5)))) { [self] in
            guard !stopping.load(ordering: .acquiring), !entry.retired.load(ordering: .acquiring) else { return }
            do {
                try launch(entry, onLine: onLine)
            } catch {
                logger.error("child_restart_failed", ["role": .string(entry.child.role), "error": .string("\(error)")])
            }
        }
    }
}

/// Splits a byte stream into lines.
private final class LineReader: Sendable {
    private let buffer = Mutex<[UInt8]>([])
    private let onLine: @Sendable (String) -> Void
    init(onLine: @escaping @Sendable (String) -> Void) { self.onLine = onLine }

    func feed(_ data: Data) {
        let lines: [String] = buffer.withLock { buffer in
            buffer += data
            var lines: [String] = []
            while let newline = buffer.firstIndex(of: 0x0A) {
                lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
            }
            return lines
        }
        lines.forEach(onLine)
    }
}

extension StopSignal {
    /// Stops when the supervising parent (Setting.parentPid) is gone, so a hard-killed
    /// `storeledger dev` leaves no orphans.
    private static let supervisingParent = Mutex<Int32?>(nil)

    /// Set once at process start (`ProcessSetup`) from `Setting.parentPid`.
    public static func configureSupervisingParent(_ pid: Int32?) { supervisingParent.withLock { $0 = pid } }

    public func stopWhenParentExits() {
        guard let parent = Self.supervisingParent.withLock({ $0 }) else { return }
        Thread.detachNewThread { [self] in
            while !isStopped {
                if getppid() != parent { stop(); return }
                Thread.sleep(forTimeInterval: 0.5)
            }
        }
    }
}
