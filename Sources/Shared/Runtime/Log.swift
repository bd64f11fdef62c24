import Foundation
import Synchronization

/// A value in a structured log line. Keep secrets out: nothing here redacts for you.
public enum LogValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public static func of(_ value: Int) -> LogValue { .int(Int64(value)) }

    var json: Any {
        switch self {
        case .string(let s): return s
        case .int(let i): return i
        case .double(let d): return d
        case .bool(let b): return b
        }
    }
}

public enum LogLevel: Int, Sendable, Comparable {
    case debug = 0, info, warning, error
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    var name: String { ["debug", "info", "warning", "error"][rawValue] }
    public static func named(_ name: String?) -> LogLevel? {
        switch name?.lowercased() {
        case "debug": return .debug
        case "info": return .info
        case "warning", "warn": return .warning
        case "error": return .error
        default: return nil
        }
    }
}

/// JSON-lines logger writing to standard error: one object per line with `ts`, `level`,
/// `component`, `event` and the given fields. Event names are snake_case facts (`stage_started`,
/// `dead_letter`); secrets never go into fields.
public struct Logger: Sendable {
    public let component: String
    /// Setting.logLevel = debug | info | warning | error (default info), applied at process start (`ProcessSetup`).
    private static let minimum = Atomic<Int>(LogLevel.info.rawValue)
    private static let lock = Mutex(())

    public init(component: String) { self.component = component }

    public static func setMinimumLevel(_ level: LogLevel) { minimum.store(level.rawValue, ordering: .relaxed) }

    public func debug(_ event: String, _ fields: [String: LogValue] = [:]) { write(.debug, event, fields) }
    public func info(_ event: String, _ fields: [String: LogValue] = [:]) { write(.info, event, fields) }
    public func warning(_ event: String, _ fields: [String: LogValue] = [:]) { write(.warning, event, fields) }
    public func error(_ event: String, _ fields: [String: LogValue] = [:]) { write(.error, event, fields) }

    public func write(_ level: LogLevel, _ event: String, _ fields: [String: LogValue]) {
        guard level.rawValue >= Logger.minimum.load(ordering: .relaxed) else { return }
        var object: [String: Any] = [
            "ts": ISO8601DateFormatter.string(from: Date(), timeZone: .gmt,
                                              formatOptions: [.withInternetDateTime, .withFractionalSeconds]),
            "level": level.name, "component": component, "event": event,
        ]
        for (key, value) in fields { object[key] = value.json }
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        data.append(0x0A)
        Logger.lock.withLock { _ in FileHandle.standardError.write(data) }
    }
}

/// One log line per `interval` for an event that can repeat per request (a read failing during a
/// PostgreSQL outage would otherwise log once per call); the next line says how many were held back.
public final class ThrottledLog: Sendable {
    private let interval: Duration
    private let state = Mutex<(last: ContinuousClock.Instant?, held: Int)>((nil, 0))

    public init(interval: Duration = .seconds(10)) { self.interval = interval }

    /// Calls `write` with the number of lines held back since the last one, or holds this one back.
    public func log(_ write: (_ heldBack: Int) -> Void) {
        let now = ContinuousClock.now
        let held: Int? = state.withLock { state in
            if let last = state.last, now - last < interval {
                state.held += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.held
        }
        if let held { write(held) }
    }
}
