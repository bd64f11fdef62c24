import Configuration
import Foundation

/// Test-only crash points (Setting.failpoint, docs/configuration.md): a chaos test makes a
/// worker die by SIGKILL exactly where a crash is most dangerous (outputs published but the
/// PostgreSQL transaction open; effects committed but offsets not), not just wherever a random
/// kill happens to land. Pure parsing; `hit` draws from an injected random source.
public struct Failpoints: Sendable, Equatable {
    /// Where the consumer loop can crash.
    public enum Point: String, Sendable, CaseIterable {
        /// The batch's outputs and dead letters are acknowledged by the broker; COMMIT not yet sent.
        case afterPublish = "after-publish"
        /// The PostgreSQL transaction is committed; offsets not yet committed.
        case afterPGCommit = "after-pg-commit"
        /// About to commit offsets (for stages without PostgreSQL: outputs published, offsets not committed).
        case beforeOffsetCommit = "before-offset-commit"
    }

    public static let none = Failpoints()
    public private(set) var probabilities: [Point: Double] = [:]
    /// Test-only SIGSTOP of the process once, before its first COMMIT (a zombie with an open transaction).
    public private(set) var stopBeforeCommit = false

    /// Where crashes are logged and how many may happen (`Setting.failpointLog`, `Setting.failpointMax`).
    public var logPath: String?
    public var maxLoggedCrashes: Int?

    public init() {}

    /// `name[:probability],...`, e.g. `after-pg-commit:0.02,before-offset-commit` (probability 1 when omitted).
    public static func parse(_ text: String) throws(FailpointError) -> Failpoints {
        var points = Failpoints()
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            let parts = item.split(separator: ":", maxSplits: 1).map(String.init)
            if parts[0] == "stop-before-commit", parts.count == 1 {
                points.stopBeforeCommit = true
                continue
            }
            guard let point = Point(rawValue: parts[0]) else {
                let known = (["stop-before-commit"] + Point.allCases.map(\.rawValue)).joined(separator: ", ")
                throw FailpointError(description: "unknown \(Setting.failpoint) \(parts[0]) (known: \(known))")
            }
            let probability = parts.count == 2 ? Double(parts[1]) : 1
            guard let probability, (0...1).contains(probability) else {
                throw FailpointError(description: "\(Setting.failpoint) \(parts[0]) needs a probability in 0...1")
            }
            points.probabilities[point] = probability
        }
        return points
    }

    /// Whether to crash at `point` now; `draw` returns a uniform number in [0, 1).
    public func hit(_ point: Point, draw: () -> Double = { Double.random(in: 0..<1) }) -> Bool {
        guard let probability = probabilities[point], probability > 0 else { return false }
        return draw() < probability
    }

    /// Crashes this process by SIGKILL at `point` if it is armed and drawn; first appends
    /// `<pid> <point> <ms since epoch>` to Setting.failpointLog (when set), so a test can
    /// count the hits. With Setting.failpointMax too, points stop firing once the log holds
    /// that many hits (across restarts of every worker sharing the log): a bounded chaos run.
    public func crashIfHit(_ point: Point) {
        guard hit(point) else { return }
        if let path = logPath, !path.isEmpty {
            if let max = maxLoggedCrashes,
               let log = FileManager.default.contents(atPath: path), log.count(where: { $0 == 0x0A }) >= max {
                return
            }
            let line = "\(getpid()) \(point.rawValue) \(currentTimeMs())\n"
            let fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
            if fd >= 0 {
                _ = line.withCString { write(fd, $0, strlen($0)) }
                close(fd)
            }
        }
        kill(getpid(), SIGKILL)
    }
}

public struct FailpointError: Error, CustomStringConvertible {
    public let description: String
}
