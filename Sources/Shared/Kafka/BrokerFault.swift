/// One command of `storeledger broker --control-port`'s fault channel, parsed from an HTTP request
/// (pure: no I/O), so a chaos driver in another process can break the embedded broker on cue:
///
///     POST /brokers/{id|all}/down            disconnect and refuse connections
///     POST /brokers/{id|all}/up
///     POST /brokers/{id|all}/rtt?ms=N        added round-trip time (0 removes it)
///     POST /errors?api=Produce&error=NOT_ENOUGH_REPLICAS&count=N
///                                            the next N requests of that kind fail
///     POST /errors/clear?api=Produce
public enum BrokerFault: Sendable, Equatable {
    case down(broker: Int32)
    case up(broker: Int32)
    case roundTripTime(broker: Int32, milliseconds: Int32)
    case requestErrors(KafkaRequestKind, KafkaInjectedError, count: Int)
    case clearErrors(KafkaRequestKind)

    /// Most errors one command may queue (bounded: a typo must not wedge the broker for hours).
    public static let maxErrorCount = 10_000
    /// Largest added round-trip time.
    public static let maxRoundTripMs: Int32 = 60_000

    /// Parses a request; the error is the reason for a 4xx answer.
    public static func parse(method: String, path: String, query: [String: String]) -> Result<BrokerFault, BrokerFaultError> {
        guard method == "POST" else { return .failure(.init(status: 405, reason: "fault commands are POST")) }
        let parts = path.split(separator: "/").map(String.init)
        switch parts.count {
        case 3 where parts[0] == "brokers":
            guard let broker = parts[1] == "all" ? -1 : Int32(parts[1]), broker == -1 || broker >= 1 else {
                return .failure(.init(status: 400, reason: "broker must be a 1-based id or all"))
            }
            switch parts[2] {
            case "down": return .success(.down(broker: broker))
            case "up": return .success(.up(broker: broker))
            case "rtt":
                guard let text = query["ms"], let ms = Int32(text), (0...maxRoundTripMs).contains(ms) else {
                    return .failure(.init(status: 400, reason: "rtt needs ms=0...\(maxRoundTripMs)"))
                }
                return .success(.roundTripTime(broker: broker, milliseconds: ms))
            default: break
            }
        case 1 where parts[0] == "errors", 2 where parts[0] == "errors" && parts[1] == "clear":
            guard let name = query["api"], let api = KafkaRequestKind(name: name) else {
                let known = KafkaRequestKind.allCases.map(\.description).joined(separator: ", ")
                return .failure(.init(status: 400, reason: "api must be one of \(known)"))
            }
            if parts.count == 2 { return .success(.clearErrors(api)) }
            guard let errorName = query["error"], let error = KafkaInjectedError(name: errorName) else {
                let known = KafkaInjectedError.allCases.map(\.description).joined(separator: ", ")
                return .failure(.init(status: 400, reason: "error must be one of \(known)"))
            }
            let count = query["count"].map { Int($0) } ?? 1
            guard let count, (1...maxErrorCount).contains(count) else {
                return .failure(.init(status: 400, reason: "count must be 1...\(maxErrorCount)"))
            }
            return .success(.requestErrors(api, error, count: count))
        default: break
        }
        return .failure(.init(status: 404, reason: "unknown fault command \(path)"))
    }

    public func apply(to broker: EmbeddedBroker) throws(KafkaError) {
        // The mock looks brokers up by id, so "all" is each id in turn.
        func each(_ id: Int32, _ body: (Int32) throws(KafkaError) -> Void) throws(KafkaError) {
            for one in id == -1 ? Array(1...Int32(broker.brokerCount)) : [id] { try body(one) }
        }
        switch self {
        case .down(let id): try each(id) { (one) throws(KafkaError) in try broker.setBrokerDown(one) }
        case .up(let id): try each(id) { (one) throws(KafkaError) in try broker.setBrokerUp(one) }
        case .roundTripTime(let id, let ms): try each(id) { (one) throws(KafkaError) in try broker.setRoundTripTime(one, milliseconds: ms) }
        case .requestErrors(let api, let error, let count): try broker.pushRequestErrors(api, Array(repeating: error, count: count))
        case .clearErrors(let api): try broker.clearRequestErrors(api)
        }
    }
}

public struct BrokerFaultError: Error, Sendable, Equatable {
    public let status: Int
    public let reason: String
}
