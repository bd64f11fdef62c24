import Domain
import Foundation
import HTTPServer
import Kafka
import Postgres
import Runtime

/// `/support/...`: the pages support staff answer customers with (R4).
///
///     GET /support                                  the search form
///     GET /support/search?q=ID                      a user id, transaction id or original transaction id
///     GET /support/users/{id}                       timeline and ledger of one user
///     GET /support/raw/{topic}/{partition}/{offset} one pipeline record, decoded, secrets redacted
///
/// Every request passes `admit` first and nothing else: that is where the admin/support credential
/// is checked once authentication exists.
struct SupportRoutes: Sendable {
    let reads: SupportReads?
    let kafka: KafkaConfig
    /// nil admits the request; a response refuses it (401/403, 429 over the admin key's rate) and is sent as is.
    let admit: @Sendable (HTTPRequest) -> HTTPResponse?
    /// The read API's bounds (timeout, reads waiting at once), shared with it: a hung PostgreSQL
    /// must not hold support clients or pile up threads either.
    let bounded: BoundedReads
    private let logger = Logger(component: "support")

    static let prefix = "/support"

    init(pool: PGPool?, kafka: KafkaConfig, bounded: BoundedReads,
         admit: @escaping @Sendable (HTTPRequest) -> HTTPResponse? = { _ in nil }) {
        self.reads = pool.map(SupportReads.init(pool:))
        self.kafka = kafka
        self.bounded = bounded
        self.admit = admit
    }

    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        if let refusal = admit(request) {
            responder.respond(refusal)
            return
        }
        guard request.method == "GET" || request.method == "HEAD" else {
            responder.respond(Self.page(SupportPage.message("Method not allowed", "The support pages only answer GET."), status: 405))
            return
        }
        let path = String(request.path.dropFirst(Self.prefix.count))
        if path.isEmpty || path == "/" {
            responder.respond(Self.page(SupportPage.message("Find a customer", "Search by user id, transaction id or original transaction id.")))
        } else if path == "/search" {
            search(request.queryValue("q") ?? "", responder)
        } else if path.hasPrefix("/users/") {
            // The rest of the path, slashes included: a user id is whatever the app sent.
            userPage(String(path.dropFirst("/users/".count)), responder)
        } else if path.hasPrefix("/raw/") {
            rawRecord(path.dropFirst("/raw/".count).split(separator: "/", omittingEmptySubsequences: false).map(String.init), responder)
        } else {
            responder.respond(Self.page(SupportPage.message("Not found", "There is no support page at this address."), status: 404))
        }
    }

    private func search(_ typed: String, _ responder: HTTPResponder) {
        // Pasted text often brings spaces or a line end along.
        let query = typed.trimmingCharacters(in: .whitespacesAndNewlines)
        if let reason = EdgeChecks.pathIdentifier(query, "search text") {
            responder.respond(Self.page(SupportPage.message("Cannot search for this", reason), status: 400))
            return
        }
        database(responder) { reads in
            let matches = try reads.search(query)
            // One user found: go straight to the page (303, so a reload repeats the GET).
            if matches.count == 1, let user = matches[0].userId {
                return HTTPResponse(status: 303, headers: ["Location": "/support/users/\(HTML.percentEncoded(user))"])
            }
            return Self.page(SupportPage.searchResults(query, matches), status: matches.isEmpty ? 404 : 200)
        }
    }

    private func userPage(_ user: String, _ responder: HTTPResponder) {
        if let reason = EdgeChecks.pathIdentifier(user, "user id") {
            responder.respond(Self.page(SupportPage.message("Not a user id", reason), status: 400))
            return
        }
        database(responder) { reads in
            guard let timeline = try reads.timeline(user: user, nowMs: Int64(Date().timeIntervalSince1970 * 1000)) else {
                return Self.page(SupportPage.searchResults(user, []), status: 404)
            }
            return Self.page(SupportPage.user(timeline))
        }
    }

    /// `{topic}/{partition}/{offset}`, each bounded before the broker is asked.
    private func rawRecord(_ parts: [String], _ responder: HTTPResponder) {
        guard parts.count == 3, RawRecordView.shownTopics.contains(parts[0]),
              let partition = Int32(parts[1]), (0...10_000).contains(partition),
              let offset = Int64(parts[2]), offset >= 0 else {
            responder.respond(Self.page(SupportPage.message("Not a record position",
                                                            "Expected /support/raw/{topic}/{partition}/{offset} on a pipeline topic."), status: 400))
            return
        }
        // Each read opens a broker client and may wait seconds for an absent broker: it takes one of
        // the bounded read places, so a burst of them cannot pile up blocked threads.
        guard bounded.enter() else {
            responder.respond(Self.page(SupportPage.message("Too many reads", "Too many reads are waiting; try again later."), status: 503))
            return
        }
        let (topic, kafka, logger, bounded) = (parts[0], self.kafka, self.logger, self.bounded)
        // Reading blocks on the broker: keep it off the HTTP pool threads.
        DispatchQueue.global().async {
            defer { bounded.leave() }
            do {
                switch try KafkaRecordReader.read(config: kafka, topic: topic, partition: partition, offset: offset) {
                case .found(let record):
                    responder.respond(Self.page(SupportPage.rawRecord(RawRecordView(record))))
                case .notHeld(let low, let high):
                    responder.respond(Self.page(SupportPage.message("Record not held",
                        "\(topic)[\(partition)] holds offsets \(low) to \(high - 1) now; \(offset) is not among them (retention may have dropped it)."),
                        status: 404))
                }
            } catch {
                logger.error("support_raw_read_failed", ["error": .string(String(describing: error))])
                responder.respond(Self.page(SupportPage.message("Broker unavailable", "The record could not be read; try again later."), status: 503))
            }
        }
    }

    private func database(_ responder: HTTPResponder, _ body: @escaping @Sendable (SupportReads) throws -> HTTPResponse) {
        guard let reads else {
            responder.respond(Self.page(SupportPage.message("No database", "The support pages need DATABASE_URL."), status: 503))
            return
        }
        // Reads block on PostgreSQL: off the HTTP pool threads, answered 503 in time if it hangs.
        bounded.run(responder, { [logger] in
            do {
                return try body(reads)
            } catch {
                logger.error("support_read_failed", ["error": .string(String(describing: error))])
                return Self.page(SupportPage.message("Database unavailable", "Try again later."), status: 503)
            }
        }, answered: { _ in })
    }

    /// The headers every support page carries: nothing may load from elsewhere or run (no script
    /// at all), the page is personal data (not cached, not framed, no referrer).
    static func page(_ html: HTML, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: [
            "Content-Type": "text/html; charset=utf-8",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
        ], body: Array(html.markup.utf8))
    }
}
