import CMicroHTTPD
import Foundation
import Runtime
import Synchronization

/// What libmicrohttpd's callbacks reach through their `cls` pointer: the handler, the
/// limits, and the set of parked requests that `stop()` must wake before MHD_stop_daemon
/// (which panics on a suspended connection).
final class ServerCore: Sendable {
    let handler: @Sendable (HTTPRequest, HTTPResponder) -> Void
    let maxBodyBytes: Int
    let bodyTimeout: Duration
    /// Past the limit we read and drop at most this much more, so an ordinary client still
    /// gets its 413; a client that keeps sending after that is hung up on.
    let discardLimit: Int
    let logger = Logger(component: "http_server")
    /// Requests given to the handler whose completion MHD has not reported yet.
    let inFlight = Atomic<Int>(0)
    /// The latest diagnostic from libmicrohttpd, quoted when `start()` fails.
    let lastLibraryMessage = Mutex<String?>(nil)
    private let parking = Mutex(Parking())

    private struct Parking {
        var stopping = false
        var parked: [ObjectIdentifier: HTTPResponder] = [:]
    }

    /// Connections per client address and room kept for Apple (nil: only the global limit).
    let addressLimit: AddressLimit?

    init(handler: @escaping @Sendable (HTTPRequest, HTTPResponder) -> Void, maxBodyBytes: Int, bodyTimeout: Duration = .seconds(60),
         connectionsPerAddress: Int = 0, othersLimit: Int = .max) {
        self.handler = handler
        self.addressLimit = connectionsPerAddress > 0 || othersLimit < .max
            ? AddressLimit(perAddress: connectionsPerAddress, othersLimit: othersLimit) : nil
        self.maxBodyBytes = maxBodyBytes
        self.bodyTimeout = bodyTimeout
        self.discardLimit = max(maxBodyBytes, 4 << 20)
    }

    // MARK: Access handler

    /// One call of MHD's access handler. MHD calls it once when the headers are in, once per
    /// chunk of body (`uploadSize > 0`), once when the request is complete, and again after
    /// each resume.
    func access(connection: OpaquePointer, url: String, method: String,
                upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
                context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let opaque = context.pointee else {
            return begin(connection: connection, context: context)
        }
        let responder = Unmanaged<HTTPResponder>.fromOpaque(opaque).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            uploadSize.pointee = 0
            return receive(upload, count: count, into: responder)
        }
        return finish(responder, url: url, method: method)
    }

    /// Headers are in: create the per-request state (released in `completed`) and refuse a
    /// declared body over the limit before reading any of it.
    private func begin(connection: OpaquePointer,
                       context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        let responder = HTTPResponder(connection: ConnectionHandle(pointer: connection), receivedAt: Date())
        context.pointee = Unmanaged.passRetained(responder).toOpaque()
        guard let declared = MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length") else {
            return MHD_Result.YES
        }
        let length = plainContentLength(declared) ?? Int(String(cString: declared).trimmingCharacters(in: .whitespaces)) ?? Int.max
        guard length > maxBodyBytes else { return MHD_Result.YES }
        if length <= maxBodyBytes + discardLimit {
            // Read and drop the body, then answer: a client that sends without waiting for
            // "100 Continue" (URLSession on Linux) would otherwise write into a closed socket
            // and see a broken pipe instead of its 413.
            responder.state.withLock { $0.phase = .rejected(tooLarge()) }
            return MHD_Result.YES
        }
        // Too large even to drain: queued before the body is read, MHD skips "100 Continue"
        // and closes after answering.
        responder.state.withLock { $0.phase = .answered }
        return queue(tooLarge(), on: connection)
    }

    private func receive(_ upload: UnsafePointer<CChar>?, count: Int, into responder: HTTPResponder) -> MHD_Result {
        guard let upload else { return MHD_Result.YES }
        // A client trickling its body (a byte now and then resets MHD's idle timeout) is hung up on.
        if Date().timeIntervalSince(responder.receivedAt) > Double(bodyTimeout.components.seconds) { return MHD_Result.NO }
        return responder.state.withLock { state in
            switch state.phase {
            case .receiving:
                if state.body.count + count > maxBodyBytes {
                    state.phase = .rejected(tooLarge())
                    state.discarded = state.body.count + count
                    state.body = []
                } else {
                    upload.withMemoryRebound(to: UInt8.self, capacity: count) {
                        state.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                    }
                }
                return MHD_Result.YES
            case .rejected:
                state.discarded += count
                return state.discarded > maxBodyBytes + discardLimit ? MHD_Result.NO : MHD_Result.YES
            case .handling, .suspended, .resumed, .answered, .closed:
                return MHD_Result.YES
            }
        }
    }

    private func tooLarge() -> HTTPResponse {
        .error(status: 413, reason: "request body exceeds \(maxBodyBytes) bytes")
    }

    /// The request is complete (or resumed): run the handler, or queue the answer it gave.
    private func finish(_ responder: HTTPResponder, url: String, method: String) -> MHD_Result {
        let connection = responder.connection.pointer
        enum Next { case handle([UInt8]), queue(HTTPResponse), wait }
        let next: Next = responder.state.withLock { state in
            switch state.phase {
            case .receiving:
                state.phase = .handling(nil)
                state.handedToHandler = true
                defer { state.body = [] }
                return .handle(state.body)
            case .rejected(let response), .resumed(let response):
                state.phase = .answered
                return .queue(response)
            case .handling, .suspended, .answered, .closed:
                return .wait
            }
        }
        switch next {
        case .queue(let response):
            return queue(response, on: connection)
        case .wait:
            return MHD_Result.YES
        case .handle(let body):
            inFlight.add(1, ordering: .relaxed)
            let request = HTTPRequest(
                method: method, path: url,
                query: connectionValues(connection, kind: MHD_ValueKind.GET_ARGUMENT_KIND),
                headers: HTTPHeaders(connectionValues(connection, kind: MHD_ValueKind.HEADER_KIND)),
                body: body, remoteAddress: clientAddress(connection), receivedAt: responder.receivedAt)
            handler(request, responder)
            return settle(responder)
        }
    }

    /// After the handler returned: queue its answer, or park the connection until `respond`.
    private func settle(_ responder: HTTPResponder) -> MHD_Result {
        let connection = responder.connection.pointer
        let answer: HTTPResponse? = responder.state.withLock { state in
            guard case .handling(let given) = state.phase else { return nil }
            if let given {
                state.phase = .answered
                return given
            }
            guard park(responder) else {
                state.phase = .answered
                return .error(status: 503, reason: "server is shutting down")
            }
            // Under the exchange lock, so `respond` cannot resume before this suspend.
            MHD_suspend_connection(connection)
            state.phase = .suspended
            return nil
        }
        guard let answer else { return MHD_Result.YES }
        return queue(answer, on: connection)
    }

    // MARK: Parking and shutdown

    /// Records a request about to be suspended; false once stopping began, so nothing is
    /// suspended after `unparkAll` took its snapshot.
    private func park(_ responder: HTTPResponder) -> Bool {
        parking.withLock { parking in
            guard !parking.stopping else { return false }
            parking.parked[ObjectIdentifier(responder)] = responder
            return true
        }
    }

    /// Stops further parking and answers every parked request with 503, resuming its
    /// connection so MHD_stop_daemon finds none suspended.
    func unparkAll() {
        let parked = parking.withLock { parking in
            parking.stopping = true
            return Array(parking.parked.values)
        }
        for responder in parked {
            responder.respond(.error(status: 503, reason: "server is shutting down"))
        }
    }

    // MARK: Completion

    /// MHD's request-completed callback: the request is over (answered, failed or the
    /// client left). Marks the responder closed so a late `respond` is a no-op, and frees it.
    func completed(context: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        guard let opaque = context.pointee else { return }
        context.pointee = nil
        let responder = Unmanaged<HTTPResponder>.fromOpaque(opaque).takeRetainedValue()
        let wasHanded = responder.state.withLock { state in
            state.phase = .closed
            state.body = []
            return state.handedToHandler
        }
        _ = parking.withLock { $0.parked.removeValue(forKey: ObjectIdentifier(responder)) }
        if wasHanded { inFlight.subtract(1, ordering: .relaxed) }
    }
}

/// A Content-Length of 1 to 18 ASCII digits and nothing else (what clients send), read without
/// Foundation's `trimmingCharacters`, which bridges through NSString (~3 % of ingest's CPU); any
/// other spelling is nil and goes the general way, so every value reads as before.
func plainContentLength(_ text: UnsafePointer<CChar>) -> Int? {
    var value = 0
    var index = 0
    while text[index] != 0 {
        let digit = Int(UInt8(bitPattern: text[index])) - 0x30
        guard (0...9).contains(digit), index < 18 else { return nil }
        value = value * 10 + digit
        index += 1
    }
    return index == 0 ? nil : value
}

// MARK: - libmicrohttpd glue

/// Builds an MHD response from `response` and queues it. Status codes MHD would refuse
/// become a 500 so the client still gets an answer.
func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    var response = response
    if !(200...599).contains(response.status) {
        response = .error(status: 500, reason: "handler gave invalid status \(response.status)")
    }
    let created = response.body.withUnsafeBytes { bytes in
        MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                        MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
    }
    guard let mhdResponse = created else { return MHD_Result.NO }
    defer { MHD_destroy_response(mhdResponse) }
    for field in response.headers where !sameFieldName(field.name, "Content-Length") {
        // MHD refuses names or values with line breaks; such a header is dropped, not sent.
        _ = MHD_add_response_header(mhdResponse, field.name, field.value)
    }
    return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
}

/// All values of one kind (headers, query items) in arrival order.
func connectionValues(_ connection: OpaquePointer, kind: MHD_ValueKind) -> [HTTPField] {
    var fields: [HTTPField] = []
    withUnsafeMutablePointer(to: &fields) { pointer in
        _ = MHD_get_connection_values_n(connection, kind, { cls, _, key, keySize, value, valueSize in
            guard let cls, let key else { return MHD_Result.YES }
            let name = decodeUTF8(key, count: keySize)
            let text = value.map { decodeUTF8($0, count: valueSize) } ?? ""
            cls.assumingMemoryBound(to: [HTTPField].self).pointee.append(HTTPField(name: name, value: text))
            return MHD_Result.YES
        }, pointer)
    }
    return fields
}

/// Bytes as UTF-8, invalid sequences replaced: percent-decoding can produce anything.
private func decodeUTF8(_ bytes: UnsafePointer<CChar>, count: Int) -> String {
    bytes.withMemoryRebound(to: UInt8.self, capacity: count) {
        String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
    }
}

/// The client's numeric IP address, or "" if MHD has none.
func clientAddress(_ connection: OpaquePointer) -> String {
    guard let address = storeledger_mhd_client_address(connection) else { return "" }
    let length: Int
    switch Int32(address.pointee.sa_family) {
    case AF_INET: length = MemoryLayout<sockaddr_in>.size
    case AF_INET6: length = MemoryLayout<sockaddr_in6>.size
    default: return ""
    }
    var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    guard getnameinfo(address, socklen_t(length), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else {
        return ""
    }
    return nullTerminatedString(host)
}

/// A C string filled into a Swift buffer.
func nullTerminatedString(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// C entry points: they cannot capture context, so the core comes through `cls`.
let accessHandlerCallback: MHD_AccessHandlerCallback = { cls, connection, url, method, _, upload, uploadSize, context in
    guard let cls, let connection, let uploadSize, let context else { return MHD_Result.NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    return core.access(connection: connection, url: url.map { String(cString: $0) } ?? "/",
                       method: method.map { String(cString: $0) } ?? "",
                       upload: upload, uploadSize: uploadSize, context: context)
}

let requestCompletedCallback: MHD_RequestCompletedCallback = { cls, _, context, _ in
    guard let cls, let context else { return }
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().completed(context: context)
}

/// Routes libmicrohttpd's own diagnostics to our log at debug level: most are about one
/// client's bad request or early hang-up, so louder would let clients flood the log.
/// A failed start quotes the last one in its error.
let libraryLogCallback: MHD_LogCallback = { cls, format, arguments in
    guard let cls, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 512)
    _ = vsnprintf(&buffer, buffer.count, format, arguments)
    let message = nullTerminatedString(buffer).trimmingCharacters(in: .whitespacesAndNewlines)
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().libraryMessage(message)
}

extension ServerCore {
    func libraryMessage(_ message: String) {
        lastLibraryMessage.withLock { $0 = message }
        logger.debug("http_library_message", ["message": .string(message)])
    }
}
