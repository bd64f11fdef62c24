import Configuration
import Foundation
import Synchronization

/// Runs a set of child processes as one unit: starts them in order, restarts one that dies
/// unexpectedly (with backoff), and on stop terminates them in reverse order (SIGTERM, then
/// SIGKILL after a grace period). Children learn our pid through Setting.parentPid and stop
/// themselves if we vanish, so nothing is left running even after a hard kill. Their standard output
/// is never read; their standard error may be relayed (`StderrRoute`) so a failed start can quote it.
public final class Supervisor: Sendable {
    public struct Child: Sendable {
        public var role: String
        public var arguments: [String]
        public var environment: [String: String]
        /// What to do when the child exits on its own: restart it, or stop the whole set
        /// (a child whose state cannot be rebuilt, like the in-memory broker).
        public var onExit: ExitPolicy
        /// Where the child's standard error goes.
        public var stderr: StderrRoute

        public init(role: String, arguments: [String], environment: [String: String] = [:], onExit: ExitPolicy = .restart,
                    stderr: StderrRoute = .inherit) {
            self.role = role
            self.arguments = arguments
            self.environment = environment
            self.onExit = onExit
            self.stderr = stderr
        }
    }

    /// `.inherit`: the child writes to our standard error directly. `.relay(to:)`: through a pipe, whole
    /// lines at a time, appended to the file at the path (our standard error when nil); the supervisor
    /// keeps the last lines (`stderrTail`) to explain a child that did not come up.
    public enum StderrRoute: Sendable {
        case inherit
        case relay(to: String?)
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
        /// The last lines of standard error (`.relay` only), across restarts.
        let tail = StderrTail()
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

    /// Starts a child. Readiness is never read from its output: poll its `/readyz`.
    @discardableResult
    public func start(_ child: Child) throws -> Int32 {
        let entry = Running(child: child, process: Process())
        try launch(entry)
        running.withLock { $0.append(entry) }
        return running.withLock { _ in entry.process.processIdentifier }
    }

    /// The roles of the running children, in start order.
    public var roles: [String] { running.withLock { $0.map(\.child.role) } }

    /// The last lines the child of `role` wrote to standard error (`.relay` children; empty otherwise).
    public func stderrTail(of role: String) -> [String] {
        running.withLock { list in list.first { $0.child.role == role } }?.tail.lines ?? []
    }

    /// Whether the child of `role` runs now (false while it is being restarted, or when unknown).
    public func isRunning(_ role: String) -> Bool {
        running.withLock { list in list.first { $0.child.role == role }?.process.isRunning ?? false }
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

    private func launch(_ entry: Running) throws {
        let child = entry.child
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = child.arguments
        var environment = ProcessEnvironment.current
        for (key, value) in child.environment { environment[key] = value }
        environment[Setting.parentPid.name] = String(getpid())
        process.environment = environment
        if case .relay(let path) = child.stderr {
            let pipe = Pipe()
            process.standardError = pipe
            LineReader(tail: entry.tail, sink: try StderrSink(path: path)).drain(pipe.fileHandleForReading, role: child.role)
        }
        // A termination handler, not a thread in waitUntilExit (which spins on Linux).
        process.terminationHandler = { [self] ended in restartIfUnexpected(entry, ended) }
        running.withLock { _ in entry.process = process }
        try process.run()
        logger.info("child_started", ["role": .string(child.role), "pid": .of(Int(process.processIdentifier))])
    }

    private func restartIfUnexpected(_ entry: Running, _ ended: Process) {
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
                try launch(entry)
            } catch {
                logger.error("child_restart_failed", ["role": .string(entry.child.role), "error": .string("\(error)")])
            }
        }
    }
}

/// The last lines of a child's standard error.
final class StderrTail: Sendable {
    static let keep = 20
    private let buffer = Mutex<[String]>([])

    var lines: [String] { buffer.withLock { $0 } }

    func append(_ line: String) {
        buffer.withLock { lines in
            lines.append(line)
            if lines.count > Self.keep { lines.removeFirst(lines.count - Self.keep) }
        }
    }
}

/// Where relayed lines go: a file opened for appending (whole lines per write, so children sharing
/// one log file never interleave within a line), or our standard error.
struct StderrSink: Sendable {
    let handle: FileHandle

    init(path: String?) throws {
        guard let path else { handle = .standardError; return }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Subprocess.Failure(description: "cannot open \(path) for a child's standard error: errno \(errno)") }
        handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }
}

/// Splits a child's standard error into lines: each goes to the sink and into the tail.
private final class LineReader: Sendable {
    private let buffer = Mutex<[UInt8]>([])
    private let tail: StderrTail
    private let sink: StderrSink

    init(tail: StderrTail, sink: StderrSink) {
        self.tail = tail
        self.sink = sink
    }

    func feed(_ data: Data) {
        let lines: [[UInt8]] = buffer.withLock { buffer in
            buffer += data
            guard let last = buffer.lastIndex(of: 0x0A) else { return [] }
            let complete = Array(buffer[...last])
            buffer.removeSubrange(...last)
            return [complete]
        }
        for chunk in lines { emit(chunk) }
    }

    /// Reads `handle` to its end on a thread of its own (`readChunksUntilEnd`), then closes it.
    func drain(_ handle: FileHandle, role: String) {
        let thread = Thread { [self] in
            handle.readChunksUntilEnd { feed($0) }
            finish()
            try? handle.close()
        }
        thread.name = "stderr-\(role)"
        thread.start()
    }

    /// End of stream: a last line without a newline still counts.
    func finish() {
        let rest = buffer.withLock { buffer -> [UInt8] in defer { buffer = [] }; return buffer }
        if !rest.isEmpty { emit(rest + [0x0A]) }
    }

    private func emit(_ chunk: [UInt8]) {
        sink.handle.write(Data(chunk))
        for line in chunk.split(separator: 0x0A, omittingEmptySubsequences: true) { tail.append(String(decoding: line, as: UTF8.self)) }
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
