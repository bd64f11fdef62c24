import Domain
import Foundation
import HTTPServer
import Kafka
import Postgres
import Runtime
import Synchronization

public struct IngestConfig: Sendable {
    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    public var threads: Int = 4
    /// Apple's notifications are a few KB; receipts with long histories reach a few hundred KB.
    /// The largest body that still fits into a raw record and its dead letter (KafkaLimits).
    public var maxBodyBytes: Int = KafkaLimits.maxValueBytes
    /// How long a write may stay unconfirmed before the caller gets 503 (Apple retries on 5xx).
    public var writeTimeout: Duration = .seconds(3)
    public var kafka: KafkaConfig
    public var databaseURL: String?
    public var offers = OfferSettings.fromEnvironment()

    public init(kafka: KafkaConfig, databaseURL: String?) {
        self.kafka = kafka
        self.databaseURL = databaseURL
    }
}

/// The edge: accepts Apple's notifications and apps' receipts, writes them to the raw topics and
/// answers 200 only after the broker acknowledged the write (ARCHITECTURE.md: nothing
/// acknowledged is lost). Also serves the membership read API from PostgreSQL.
public final class IngestService: Sendable {
    private let config: IngestConfig
    private let producer: KafkaProducer
    private let reads: MembershipReads?
    private let offers: OfferEndpoints
    private let logger = Logger(component: "ingest")
    private let server: HTTPServer

    public init(config: IngestConfig) throws {
        var kafka = config.kafka
        // The broker must confirm within the HTTP write timeout, else the request fails with 503.
        kafka.deliveryTimeout = config.writeTimeout
        self.config = config
        self.producer = try KafkaProducer(config: kafka)
        self.reads = config.databaseURL.map { MembershipReads(pool: PGPool(url: $0, size: max(2, config.threads))) }
        self.offers = try OfferEndpoints(settings: config.offers, kafka: config.kafka, pool: reads?.pool)
        let routes = Routes()
        self.server = HTTPServer(host: config.host, port: config.port, threads: config.threads,
                                 maxBodyBytes: config.maxBodyBytes) { request, responder in
            routes.handle(request, responder)
        }
        routes.service.withLock { $0 = self }
    }

    public var port: Int { server.boundPort }

    public func start() throws {
        try server.start()
        logger.info("ingest_listening", ["url": .string("http://\(config.host):\(server.boundPort)")])
    }

    public func stop() {
        server.stop()
        producer.close()
        offers.close()
    }

    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        let segments = request.path.split(separator: "/").map(String.init)
        let route = (request.method, segments.joined(separator: "/"))
        switch route {
        case ("GET", "healthz"):
            responder.respond(.json(["status": "ok"]))
        case ("GET", "readyz"):
            responder.respond(readiness())
        case ("GET", "metrics"):
            responder.respond(.text(Metrics.shared.exposition()))
        case ("POST", "v1/notifications/appstore"):
            acceptNotification(request, responder)
        case ("POST", "v1/receipts"):
            acceptReceipt(request, responder)
        case ("POST", "v1/offers/signature"):
            offers.sign(request, responder)
        case (_, "v1/notifications/appstore"), (_, "v1/receipts"):
            responder.respond(.error(status: 405, reason: "use POST"))
        default:
            if request.method == "GET", segments.count == 3, segments[0] == "v1", segments[1] == "subscriptions" {
                let key = segments[2]
                read(responder) { try $0.subscription(key) }
            } else if request.method == "GET", segments.count == 4, segments[0] == "v1", segments[1] == "users" {
                let user = segments[2]
                switch segments[3] {
                case "membership":
                    read(responder) { try $0.userMembership(user) }
                case "offers":
                    offers.userOffers(user: user, request, responder)
                case "ledger":
                    let limit = Int(request.queryValue("limit") ?? "") ?? 200
                    read(responder) { try $0.userLedger(user, limit: limit) }
                default:
                    responder.respond(.error(status: 404, reason: "no route for \(request.method) \(request.path)"))
                }
            } else {
                responder.respond(.error(status: 404, reason: "no route for \(request.method) \(request.path)"))
            }
        }
    }

    private func count(_ route: String, _ status: Int) {
        Metrics.shared.increment("storeledger_ingest_requests_total", ["route": route, "status": String(status)])
    }

    /// Apple's POST, kept byte for byte: decode verifies and interprets it later.
    private func acceptNotification(_ request: HTTPRequest, _ responder: HTTPResponder) {
        guard (try? JSONSerialization.jsonObject(with: Data(request.body))) is [String: Any] else {
            count("notification", 400)
            responder.respond(.error(status: 400, reason: "body is not a JSON object"))
            return
        }
        write(request, topic: Topic.notificationsRaw, source: .appStoreNotification, route: "notification", responder)
    }

    /// An app's receipt upload: `{"user_id": ..., "receipt_data": base64, ...}`. Client fields such as
    /// `transactionDate` may be missing (R7); only the two required ones are checked here.
    private func acceptReceipt(_ request: HTTPRequest, _ responder: HTTPResponder) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any] else {
            count("receipt", 400)
            responder.respond(.error(status: 400, reason: "body is not a JSON object"))
            return
        }
        guard let user = object["user_id"] as? String, !user.isEmpty else {
            count("receipt", 400)
            responder.respond(.error(status: 400, reason: "user_id (a non-empty string) is required"))
            return
        }
        guard let receipt = object["receipt_data"] as? String, !receipt.isEmpty else {
            count("receipt", 400)
            responder.respond(.error(status: 400, reason: "receipt_data (base64 string) is required"))
            return
        }
        write(request, topic: Topic.receiptsRaw, source: .appReceipt, route: "receipt", responder)
    }

    private func write(_ request: HTTPRequest, topic: String, source: RawSource, route: String,
                       _ responder: HTTPResponder) {
        let receivedAt = Int64(request.receivedAt.timeIntervalSince1970 * 1000)
        var headers = [
            KafkaHeader(name: RecordHeader.receivedAt, value: Array(String(receivedAt).utf8)),
            KafkaHeader(name: RecordHeader.source, value: Array(source.rawValue.utf8)),
        ]
        for field in request.headers {
            headers.append(KafkaHeader(name: RecordHeader.httpPrefix + field.name.lowercased(), value: Array(field.value.utf8)))
        }
        let logger = self.logger
        producer.send(topic: topic, key: nil, value: request.body, headers: headers) { [self] result in
            switch result {
            case .success(let report):
                if responder.respond(.json(["status": "accepted", "offset": "\(report.partition)@\(report.offset)"])) {
                    count(route, 200)
                }
            case .failure(let error):
                if responder.respond(.error(status: 503, reason: "could not confirm the write to the broker; retry later")) {
                    count(route, 503)
                    logger.warning("write_unconfirmed", ["topic": .string(topic), "error": .string(error.description)])
                }
            }
        }
        // A guard in case the delivery report itself is late: the caller never waits unbounded.
        let deadline = config.writeTimeout + .seconds(1)
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(deadline.nanoseconds))) { [self] in
            if responder.respond(.error(status: 503, reason: "broker did not confirm the write in time; retry later")) {
                count(route, 503)
            }
        }
    }

    private func readiness() -> HTTPResponse {
        guard let reads else { return .json(["status": "ready", "database": "not configured"]) }
        do {
            try reads.ping()
            return .json(["status": "ready"])
        } catch {
            return .error(status: 503, reason: "database unavailable")
        }
    }

    private func read(_ responder: HTTPResponder, _ body: @escaping @Sendable (MembershipReads) throws -> HTTPResponse) {
        guard let reads else {
            responder.respond(.error(status: 503, reason: "read API needs DATABASE_URL"))
            return
        }
        // Reads block on PostgreSQL: keep them off the HTTP pool threads.
        DispatchQueue.global().async { [logger] in
            do {
                responder.respond(try body(reads))
            } catch {
                logger.error("read_failed", ["error": .string(String(describing: error))])
                responder.respond(.error(status: 503, reason: "database unavailable"))
            }
        }
    }
}

/// Breaks the init cycle between the server's handler and the service.
private final class Routes: Sendable {
    let service = Mutex<IngestService?>(nil)
    func handle(_ request: HTTPRequest, _ responder: HTTPResponder) {
        guard let service = service.withLock({ $0 }) else {
            responder.respond(.error(status: 503, reason: "starting"))
            return
        }
        service.handle(request, responder)
    }
}
