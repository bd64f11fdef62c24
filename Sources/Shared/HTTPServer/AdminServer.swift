import Runtime
import Synchronization

/// A worker's admin endpoints (STYLE practice 14) as a service: `/healthz` (the process is
/// alive), `/readyz` (200 only while `readiness` reports nothing wrong, else 503 with the reasons)
/// and `/metrics` (Prometheus text). Loopback by default.
public final class AdminServer: Service {
    public let name = "admin"
    private let server: HTTPServer
    private let started = Atomic<Bool>(false)
    private let readiness: @Sendable () -> [String]

    /// - Parameter readiness: what keeps the process from being ready now (empty: ready).
    public init(host: String = "127.0.0.1", port: Int, readiness: @escaping @Sendable () -> [String]) {
        self.readiness = readiness
        server = HTTPServer(host: host, port: port, threads: 1, maxBodyBytes: 0) { request, responder in
            responder.respond(AdminServer.answer(request, readiness: readiness))
        }
    }

    public var isReady: Bool { started.load(ordering: .acquiring) }
    /// The bound port (useful with port 0); 0 before `run` started the server.
    public var port: Int { server.boundPort }

    /// Binds at once, so a port clash fails the process at start rather than later.
    public func start() throws {
        try server.start()
        started.store(true, ordering: .releasing)
    }

    public func run(until stop: StopSignal) throws -> Int32 {
        if !isReady { try start() }
        stop.wait()
        server.stop()
        return 0
    }

    static func answer(_ request: HTTPRequest, readiness: () -> [String]) -> HTTPResponse {
        guard request.method == "GET" else { return .error(status: 405, reason: "admin endpoints answer GET only") }
        switch request.path {
        case "/healthz":
            return .json(["status": "ok"])
        case "/readyz":
            let reasons = readiness()
            return reasons.isEmpty ? .json(["status": "ready"]) : .json(status: 503, ["status": "not_ready", "reasons": reasons.joined(separator: "; ")])
        case "/metrics":
            return .text(Metrics.shared.exposition())
        default:
            return .error(status: 404, reason: "no admin route \(request.path)")
        }
    }
}
