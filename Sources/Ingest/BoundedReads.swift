import Dispatch
import HTTPServer
import Runtime
import Synchronization

/// Runs the read API's PostgreSQL work off the HTTP threads with two bounds, so a hung or stopped
/// server cannot hold clients or threads (issue 9): every read answers within `timeout` (503 when
/// PostgreSQL has not answered by then; the late result is dropped), and at most `maxInFlight` reads
/// wait on PostgreSQL at once (more get 503 at once rather than piling up blocked threads).
final class BoundedReads: Sendable {
    let timeout: Duration
    let maxInFlight: Int
    private let inFlight = Atomic<Int>(0)
    private let logger = Logger(component: "ingest")
    /// Each of these repeats per request during an outage: one line per 10 s each.
    private let failures = ThrottledLog(), timeouts = ThrottledLog(), refusals = ThrottledLog()

    init(timeout: Duration, maxInFlight: Int) {
        self.timeout = timeout
        self.maxInFlight = maxInFlight
    }

    /// For a request that answers on its own after its read (an offer signature waits on the signer
    /// next): takes one of the `maxInFlight` places, false when they are taken. `leave()` after the read.
    func enter() -> Bool {
        guard inFlight.add(1, ordering: .relaxed).newValue <= maxInFlight else {
            leave()
            refusals.log { held in
                logger.warning("read_refused_saturated", ["in_flight": .int(Int64(maxInFlight)), "held_back": .int(Int64(held))])
            }
            return false
        }
        return true
    }

    func leave() { inFlight.subtract(1, ordering: .relaxed) }

    /// Answers `responder` with `body`'s response, or 503 on timeout, saturation or a thrown error;
    /// `answered` gets the status of the answer actually sent.
    func run(_ responder: HTTPResponder, _ body: @escaping @Sendable () throws -> HTTPResponse,
             answered: @escaping @Sendable (Int) -> Void) {
        guard enter() else {
            if responder.respond(.error(status: 503, reason: "too many reads waiting on the database; retry later")) { answered(503) }
            return
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
            if responder.respond(.error(status: 503, reason: "the database did not answer in time; retry later")) {
                timeouts.log { held in
                    logger.warning("read_timeout", ["timeout_ms": .int(Int64(seconds * 1000)), "held_back": .int(Int64(held))])
                }
                answered(503)
            }
        }
        DispatchQueue.global().async { [self] in
            defer { self.leave() }
            let response: HTTPResponse
            do {
                response = try body()
            } catch {
                self.failures.log { held in
                    self.logger.error("read_failed", ["error": .string(String(describing: error)), "held_back": .int(Int64(held))])
                }
                response = .error(status: 503, reason: "database unavailable")
            }
            if responder.respond(response) { answered(response.status) }
        }
    }
}
