import HTTPServer
import Synchronization

/// `/readyz` answers anyone, so it must not let anyone load the broker or PostgreSQL through it (each
/// check is a metadata request and a database ping) nor take the read places the read API needs: one
/// check runs at a time and its answer is reused for a second; a caller while it runs gets the last
/// answer, or 503 when there is none recent. A check still running after `staleMs` (a hung database)
/// no longer holds the others back: the next caller starts another.
final class ReadinessProbe: Sendable {
    enum Decision {
        case answer(HTTPResponse)
        /// This caller runs the check and reports it with `finished`.
        case check
    }

    private struct State {
        var last: (response: HTTPResponse, atMs: Int64)?
        /// When the running check started.
        var checkingSinceMs: Int64?
    }

    private let state = Mutex(State())
    /// An answer this young is given again without a check.
    let reuseMs: Int64 = 1_000
    /// While a check runs, an answer this young still stands; an older one is no answer.
    let staleMs: Int64 = 10_000

    func decide(nowMs: Int64) -> Decision {
        state.withLock { state in
            if let last = state.last, nowMs - last.atMs < reuseMs { return .answer(last.response) }
            if let since = state.checkingSinceMs, nowMs - since < staleMs {
                if let last = state.last, nowMs - last.atMs < staleMs { return .answer(last.response) }
                return .answer(.error(status: 503, reason: "readiness is being checked; retry shortly"))
            }
            state.checkingSinceMs = nowMs
            return .check
        }
    }

    func finished(_ response: HTTPResponse, nowMs: Int64) {
        state.withLock { state in
            state.last = (response, nowMs)
            state.checkingSinceMs = nil
        }
    }
}
