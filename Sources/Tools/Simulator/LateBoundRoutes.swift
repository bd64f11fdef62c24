import HTTPServer
import Synchronization

/// An endpoint object that owns its `HTTPServer`: the server must exist before `self` is fully
/// initialised, so its handler reaches the object through this box, bound at the end of `init`
/// (requests before that get 503).
final class LateBoundRoutes<Endpoint: AnyObject & Sendable>: Sendable {
    private let endpoint = Mutex<Endpoint?>(nil)
    private let route: @Sendable (Endpoint, HTTPRequest) -> HTTPResponse

    init(_ route: @escaping @Sendable (Endpoint, HTTPRequest) -> HTTPResponse) {
        self.route = route
    }

    func server(port: Int, maxBodyBytes: Int) -> HTTPServer {
        HTTPServer(port: port, threads: 2, maxBodyBytes: maxBodyBytes) { [self] request, responder in
            guard let target = endpoint.withLock({ $0 }) else {
                responder.respond(.error(status: 503, reason: "starting"))
                return
            }
            responder.respond(route(target, request))
        }
    }

    func bind(_ target: Endpoint) { endpoint.withLock { $0 = target } }
}
