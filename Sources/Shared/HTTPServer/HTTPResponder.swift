import CMicroHTTPD
import Foundation
import Synchronization

/// The one way to answer a request. Call `respond` exactly once, from any thread, now or
/// later: a request not answered before the handler returns is parked (its connection
/// suspended, no pool thread blocked) until `respond` is called. Later calls, and calls
/// after the client left or the server stopped, are ignored and return false.
public final class HTTPResponder: Sendable {
    let connection: ConnectionHandle
    let state = Mutex(ExchangeState())
    let receivedAt: Date
    /// Told the status of the answer given, once (metrics of routes that answer from many places).
    private let observer = Mutex<(@Sendable (Int) -> Void)?>(nil)

    init(connection: ConnectionHandle, receivedAt: Date) {
        self.connection = connection
        self.receivedAt = receivedAt
    }

    /// Hands `response` to the connection. Returns false if the request was already
    /// answered or is gone (client disconnected, server stopped).
    @discardableResult
    public func respond(_ response: HTTPResponse) -> Bool {
        let accepted = hand(response)
        if accepted, let observe = observer.withLock({ $0 }) { observe(response.status) }
        return accepted
    }

    /// `hook` is called with the status of the answer once it is given.
    public func onRespond(_ hook: @escaping @Sendable (Int) -> Void) {
        observer.withLock { $0 = hook }
    }

    private func hand(_ response: HTTPResponse) -> Bool {
        state.withLock { state in
            switch state.phase {
            case .handling(nil):
                // The handler has not returned yet: it will queue this itself.
                state.phase = .handling(response)
                return true
            case .suspended:
                // Resuming under the lock orders it after the suspend and before the
                // request-completed callback can mark the connection closed.
                state.phase = .resumed(response)
                MHD_resume_connection(connection.pointer)
                return true
            case .receiving, .rejected, .handling(.some), .resumed, .answered, .closed:
                return false
            }
        }
    }
}

/// Where one request is in its life. Mutated only under `HTTPResponder.state`.
struct ExchangeState {
    enum Phase {
        /// Headers in, body arriving.
        case receiving
        /// The body is over the limit: the rest is discarded and this answer sent at the end.
        case rejected(HTTPResponse)
        /// The handler is running; holds its answer if it already gave one.
        case handling(HTTPResponse?)
        /// The handler returned without answering; the connection is suspended.
        case suspended
        /// Answered while suspended; MHD will call the access handler again to queue it.
        case resumed(HTTPResponse)
        /// The answer is with MHD.
        case answered
        /// MHD reported the request finished; the connection pointer must not be used.
        case closed
    }

    var phase = Phase.receiving
    var body: [UInt8] = []
    /// Bytes thrown away after the limit was crossed.
    var discarded = 0
    /// The handler saw this request, so it counts as in flight until completion.
    var handedToHandler = false
}

/// An MHD connection pointer. Safe to send: it is dereferenced only by libmicrohttpd;
/// we call MHD_resume_connection (documented thread-safe) only under the exchange lock while
/// the connection is suspended, and everything else on the connection's own pool thread.
struct ConnectionHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
