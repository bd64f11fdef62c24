import Foundation
import Synchronization

/// One difference between the oracle and StoreLedger's membership API.
public struct Mismatch: Sendable, CustomStringConvertible {
    public var userId: String
    public var group: String
    public var expected: [Span]
    public var actual: [Span]
    public var expectedBalance: Int?
    public var actualBalance: Int?
    /// Set when the API could not be read at all.
    public var problem: String?

    public var description: String {
        if let problem { return "user \(userId): \(problem)" }
        var text = "user \(userId) group \(group):"
        if expected != actual {
            text += "\n    expected \(expected.isEmpty ? "nothing" : expected.map(\.description).joined(separator: " "))"
            text += "\n    actual   \(actual.isEmpty ? "nothing" : actual.map(\.description).joined(separator: " "))"
        }
        if (expectedBalance ?? 0) != (actualBalance ?? 0) {
            text += "\n    balance expected \(expectedBalance ?? 0), actual \(actualBalance.map(String.init) ?? "none")"
        }
        return text
    }
}

/// What the membership API says about one user, normalized like the oracle (second precision).
public struct ObservedMembership: Sendable {
    public var spans: [String: [Span]]
    public var balances: [String: Int]
}

/// Compares oracle expectations with `GET /v1/users/{user_id}/membership`, with a few keep-alive
/// connections in parallel.
public struct MembershipChecker: Sendable {
    public let ingestURL: String
    public let connections: Int

    public init(ingestURL: String, connections: Int = 8) {
        self.ingestURL = ingestURL
        self.connections = connections
    }

    public func check(_ expectations: [UserExpectation]) -> [Mismatch] {
        let results = Mutex<[Mismatch]>([])
        let next = Atomic<Int>(0)
        let threads = max(1, min(connections, expectations.count))
        let group = DispatchGroup()
        for _ in 0..<threads {
            group.enter()
            Thread {
                defer { group.leave() }
                var connection = try? HTTPConnection(baseURL: ingestURL)
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index < expectations.count else { break }
                    let expectation = expectations[index]
                    let found: [Mismatch]
                    do {
                        if connection == nil { connection = try HTTPConnection(baseURL: ingestURL) }
                        found = Self.compare(expectation, try Self.read(expectation.userId, connection!))
                    } catch {
                        connection = nil
                        found = [Mismatch(userId: expectation.userId, group: "", expected: [], actual: [],
                                          problem: "membership API unreadable: \(error)")]
                    }
                    if !found.isEmpty { results.withLock { $0 += found } }
                }
            }.start()
        }
        group.wait()
        return results.withLock { $0 }.sorted { ($0.userId, $0.group) < ($1.userId, $1.group) }
    }

    static func read(_ userId: String, _ connection: HTTPConnection) throws -> ObservedMembership {
        let response = try connection.get("/v1/users/\(userId)/membership")
        if response.status == 404 { return ObservedMembership(spans: [:], balances: [:]) }
        guard response.status == 200, let json = response.json else {
            throw SimulatorError("GET /v1/users/\(userId)/membership answered \(response.status)")
        }
        return parse(json)
    }

    /// `{"groups": [{"group": "vip", "intervals": [{"startMs": 1, "endMs": 2}], "balance": 100}]}`.
    public static func parse(_ json: [String: Any]) -> ObservedMembership {
        var observed = ObservedMembership(spans: [:], balances: [:])
        for group in json["groups"] as? [[String: Any]] ?? [] {
            guard let name = group["group"] as? String else { continue }
            let intervals = (group["intervals"] as? [[String: Any]] ?? []).compactMap { interval -> Span? in
                guard let start = (interval["startMs"] as? NSNumber)?.int64Value else { return nil }
                return Span(startMs: start, endMs: (interval["endMs"] as? NSNumber)?.int64Value)
            }
            let union = Span.union(intervals)
            if !union.isEmpty { observed.spans[name] = union }
            if let balance = (group["balance"] as? NSNumber)?.intValue { observed.balances[name] = balance }
        }
        return observed
    }

    public static func compare(_ expectation: UserExpectation, _ observed: ObservedMembership) -> [Mismatch] {
        var mismatches: [Mismatch] = []
        let groups = Set(expectation.groups.keys).union(observed.spans.keys).union(observed.balances.filter { $0.value != 0 }.keys)
        for group in groups.sorted() {
            let expected = expectation.groups[group]
            let spans = observed.spans[group] ?? []
            let balance = observed.balances[group]
            if (expected?.spans ?? []) != spans || (expected?.balance ?? 0) != (balance ?? 0) {
                mismatches.append(Mismatch(userId: expectation.userId, group: group, expected: expected?.spans ?? [], actual: spans,
                                           expectedBalance: expected?.balance, actualBalance: balance))
            }
        }
        return mismatches
    }
}
