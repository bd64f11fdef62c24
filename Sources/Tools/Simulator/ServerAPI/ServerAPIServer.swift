import Crypto
import Foundation
import HTTPServer
import Synchronization

/// The simulated App Store Server API, as Apple serves it at api.storekit(-sandbox).itunes.apple.com,
/// with both environments on one port: `/production/inApps/...` and `/sandbox/inApps/...`
/// (`baseURL(for:)`). Every request needs a bearer token that `APITokenPolicy` accepts (else 401);
/// answers come from the store's ground truth, transactions and renewal infos signed with the
/// simulator's test chain exactly like notifications. An id the environment does not know gets
/// Apple's 404 error codes (so a client can fall back to the sandbox), histories are paged with
/// opaque cursors (`pageSize` per page, Apple uses 20), and `state.rateLimit` makes it answer 429
/// with `Retry-After`.
/// https://developer.apple.com/documentation/appstoreserverapi
public final class ServerAPIServer: Sendable {
    public let state = ServerAPIState()
    public let pageSize: Int
    private let server: HTTPServer
    let store: AppStore
    let emitter: WireEmitter
    let policy: APITokenPolicy
    let clockMs: @Sendable () -> Int64
    /// Sends a test notification to StoreLedger; true if it answered 2xx.
    let testNotificationSink: (@Sendable (Delivery) -> Bool)?
    private let encodedHeader: String

    public init(store: AppStore, pki: SimulatorPKI, policy: APITokenPolicy, pageSize: Int = 20, port: Int = 0,
                clockMs: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) },
                testNotificationSink: (@Sendable (Delivery) -> Bool)? = nil) {
        self.store = store
        self.emitter = WireEmitter(pki: pki, config: store.config)
        self.policy = policy
        self.pageSize = max(1, pageSize)
        self.clockMs = clockMs
        self.testNotificationSink = testNotificationSink
        self.encodedHeader = Base64URL.encode(JSONText.encode(["alg": "ES256", "x5c": pki.chain.x5c] as [String: Any]))
        let routes = LateBoundRoutes<ServerAPIServer> { $0.handle($1) }
        self.server = routes.server(port: port, maxBodyBytes: 64 * 1024)
        routes.bind(self)
    }

    public func start() throws { try server.start() }
    public func stop() { server.stop() }
    public var url: String { "http://127.0.0.1:\(server.boundPort)" }
    public func baseURL(for environment: SimEnvironment) -> String { "\(url)/\(environment == .production ? "production" : "sandbox")" }

    // MARK: - Routing

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        var components = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard components.count >= 4, components[0].isEmpty, components[2] == "inApps",
              let environment: SimEnvironment = components[1] == "production" ? .production : components[1] == "sandbox" ? .sandbox : nil else {
            return .error(status: 404, reason: "expected /production/inApps/... or /sandbox/inApps/...")
        }
        components.removeFirst(3)
        let route = components.map { $0.allSatisfy(\.isNumber) && !$0.isEmpty ? "{id}" : $0 }.prefix(4).joined(separator: "/")
        let response = authorizedAnswer(request, environment: environment, path: components)
        state.state.withLock { $0.requests["\(request.method) \(environment.rawValue) \(route) \(response.status)", default: 0] += 1 }
        return response
    }

    private func authorizedAnswer(_ request: HTTPRequest, environment: SimEnvironment, path: [String]) -> HTTPResponse {
        if let problem = policy.problem(authorization: request.headers["Authorization"], nowSeconds: clockMs() / 1000) {
            state.state.withLock { $0.lastAuthProblem = problem }
            return HTTPResponse(status: 401)
        }
        let limited: Int? = state.state.withLock { state in
            guard let plan = state.rateLimited else { return nil }
            state.rateLimited = plan.remaining > 1 ? (plan.remaining - 1, plan.retryAfterSeconds) : nil
            return plan.retryAfterSeconds
        }
        if let retryAfter = limited {
            var response = apiError(429, 4_290_000, "Rate limit exceeded.")
            response.headers.set(name: "Retry-After", value: String(retryAfter))
            return response
        }
        let query = request.query
        switch (request.method, path.count, path.first) {
        case ("GET", 3, "v1") where path[1] == "transactions":
            return transactionInfo(path[2], environment)
        case ("GET", 3, "v2") where path[1] == "history":
            return history(path[2], query, environment)
        case ("GET", 3, "v1") where path[1] == "subscriptions":
            return statuses(path[2], query, environment)
        case ("GET", 4, "v2") where path[1] == "refund" && path[2] == "lookup":
            return refunds(path[3], query, environment)
        case ("GET", 3, "v1") where path[1] == "lookup":
            return orderLookup(path[2], environment)
        case ("PUT", 4, "v2") where path[1] == "transactions" && path[2] == "consumption":
            return consumption(path[3], request.body, environment)
        case ("PUT", 4, "v1") where path[1] == "transactions" && path[3] == "appAccountToken":
            return setAppAccountToken(path[2], request.body, environment)
        case ("PUT", 4, "v1") where path[1] == "subscriptions" && path[2] == "extend" && path[3] != "mass":
            return extend(path[3], request.body, environment)
        case ("POST", 4, "v1") where path[1] == "subscriptions" && path[2] == "extend" && path[3] == "mass":
            return massExtend(request.body, environment)
        case ("GET", 6, "v1") where path[1] == "subscriptions" && path[2] == "extend" && path[3] == "mass":
            return massExtendStatus(productId: path[4], requestId: path[5], environment)
        case ("POST", 3, "v1") where path[1] == "notifications" && path[2] == "history":
            return notificationHistory(request.body, query, environment)
        case ("POST", 3, "v1") where path[1] == "notifications" && path[2] == "test":
            return requestTest(environment)
        case ("GET", 4, "v1") where path[1] == "notifications" && path[2] == "test":
            return testStatus(path[3], environment)
        default:
            return apiError(404, 4_040_000, "No such endpoint.")
        }
    }

    // MARK: - Answers

    func apiError(_ status: Int, _ code: Int64, _ message: String) -> HTTPResponse {
        .json(status: status, data: Data(JSONText.encode(["errorCode": code, "errorMessage": message] as [String: Any])))
    }

    func json(_ object: [String: Any], status: Int = 200) -> HTTPResponse {
        if state.misbehavior == .notJSON { return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array("<html>oops".utf8)) }
        return .json(status: status, data: Data(JSONText.encode(object)))
    }

    /// A cursor, signed items and app fields as the configured misbehavior bends them.
    func bent(cursor: String, asked: String?, hasMore: Bool, items: [String]) -> (cursor: String, hasMore: Bool, items: [String]) {
        switch state.misbehavior {
        case .repeatCursor: return (asked ?? cursor, true, items)
        case .inflatePage(let count): return (cursor, hasMore, items.first.map { Array(repeating: $0, count: count) } ?? items)
        case .longCursor: return (String(repeating: "c", count: 5000), hasMore, items)
        default: return (cursor, hasMore, items)
        }
    }

    func sign(_ payload: [String: Any]) -> String {
        (try? JSONSigner.sign(encodedHeader: encodedHeader, payload: payload, key: emitter.pki.chain.leaf.key)) ?? ""
    }

    func appFields(_ environment: SimEnvironment) -> [String: Any] {
        let bundle = state.misbehavior == .foreignBundle ? "com.example.someone.else" : store.config.bundleId
        var fields: [String: Any] = ["bundleId": bundle, "environment": environment.rawValue]
        if environment == .production { fields["appAppleId"] = store.config.appAppleId }
        return fields
    }

    static func isTransactionId(_ text: String) -> Bool { !text.isEmpty && text.count <= 32 && text.allSatisfy(\.isNumber) }

    /// The subscription and transaction an id names in `environment` (a restored copy's id too).
    func find(_ id: String, _ environment: SimEnvironment) -> (SimSubscription, SimTransaction)? {
        store.read { state in
            for subscription in state.subscriptions.values where subscription.environment == environment {
                if let t = subscription.transactions.first(where: { $0.transactionId == id || $0.restoredIds.contains(id) }) {
                    return (subscription, t)
                }
            }
            return nil
        }
    }

    /// Every subscription of the customer (Apple ID) that owns `id`, in `environment`.
    func customer(_ id: String, _ environment: SimEnvironment) -> [SimSubscription]? {
        guard let (owner, _) = find(id, environment) else { return nil }
        return store.read { state in
            state.subscriptions.values.filter {
                $0.userId == owner.userId && $0.appleIdIndex == owner.appleIdIndex && $0.environment == environment
            }.sorted { $0.originalTransactionId < $1.originalTransactionId }
        }
    }

    func notFound() -> HTTPResponse { apiError(404, 4_040_010, "Transaction id not found.") }

    func transactionInfo(_ id: String, _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(id) else { return apiError(400, 4_000_006, "Invalid transaction id.") }
        guard let (_, t) = find(id, environment) else { return notFound() }
        return json(["signedTransactionInfo": sign(emitter.v2Transaction(t, atMs: clockMs()))])
    }

    /// Cursors are opaque to clients: "<kind>.<offset>", base64url.
    static func cursor(_ kind: String, _ offset: Int) -> String { Base64URL.encode(Array("\(kind).\(offset)".utf8)) }

    static func offset(_ kind: String, _ cursor: String?) -> Int?? {
        guard let cursor else { return .some(0) }
        guard let bytes = Base64URL.decode(cursor), let text = String(bytes: bytes, encoding: .utf8), text.hasPrefix(kind + "."),
              let offset = Int(text.dropFirst(kind.count + 1)), offset >= 0 else { return .none }
        return .some(offset)
    }

    func paged<T>(_ items: [T], kind: String, cursor: String?) -> (page: ArraySlice<T>, next: String, hasMore: Bool)? {
        guard let start = Self.offset(kind, cursor).flatMap({ $0 }) else { return nil }
        let from = min(start, items.count), to = min(from + pageSize, items.count)
        return (items[from..<to], Self.cursor(kind, to), to < items.count)
    }

    func history(_ id: String, _ query: [HTTPField], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(id) else { return apiError(400, 4_000_006, "Invalid transaction id.") }
        guard let subscriptions = customer(id, environment) else { return notFound() }
        func value(_ name: String) -> String? { query.first { $0.name == name }?.value }
        let products = Set(query.filter { $0.name == "productId" }.map(\.value))
        let start = value("startDate").flatMap { Int64($0) }, end = value("endDate").flatMap { Int64($0) }
        var transactions = subscriptions.flatMap(\.transactions).filter { t in
            (products.isEmpty || products.contains(t.productId)) && start.map { t.purchaseMs >= $0 } != false
                && end.map { t.purchaseMs < $0 } != false
                && value("revoked").map { ($0 == "true") == (t.cancellationMs != nil && !t.isUpgraded) } != false
        }
        transactions.sort { ($0.purchaseMs, $0.transactionId) < ($1.purchaseMs, $1.transactionId) }
        if value("sort") == "DESCENDING" { transactions.reverse() }
        guard let (page, next, hasMore) = paged(transactions, kind: "history", cursor: value("revision")) else {
            return apiError(400, 4_000_005, "Invalid request revision.")
        }
        let now = clockMs()
        let out = bent(cursor: next, asked: value("revision"), hasMore: hasMore, items: page.map { sign(emitter.v2Transaction($0, atMs: now)) })
        var answer = appFields(environment)
        answer["revision"] = out.cursor
        answer["hasMore"] = out.hasMore
        answer["signedTransactions"] = out.items
        return json(answer)
    }

    func statuses(_ id: String, _ query: [HTTPField], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(id) else { return apiError(400, 4_000_006, "Invalid transaction id.") }
        guard let subscriptions = customer(id, environment) else { return notFound() }
        let wanted = Set(query.filter { $0.name == "status" }.compactMap { Int($0.value) })
        guard wanted.allSatisfy({ (1...5).contains($0) }) else { return apiError(400, 4_000_031, "Invalid status.") }
        let now = clockMs()
        var groups: [String: [[String: Any]]] = [:]
        for subscription in subscriptions where subscription.kind == .autoRenewable {
            guard let latest = subscription.latest else { continue }
            let status = emitter.v2Status(subscription, atMs: now)
            guard wanted.isEmpty || wanted.contains(status) else { continue }
            groups[subscription.group, default: []].append([
                "status": status,
                "originalTransactionId": subscription.originalTransactionId,
                "signedTransactionInfo": sign(emitter.v2Transaction(latest, atMs: now)),
                "signedRenewalInfo": sign(emitter.v2Renewal(subscription, atMs: now)),
            ])
        }
        var answer = appFields(environment)
        answer["data"] = groups.keys.sorted().map { ["subscriptionGroupIdentifier": $0, "lastTransactions": groups[$0]!] as [String: Any] }
        return json(answer)
    }

    func refunds(_ id: String, _ query: [HTTPField], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(id) else { return apiError(400, 4_000_006, "Invalid transaction id.") }
        guard let subscriptions = customer(id, environment) else { return notFound() }
        let refunded = subscriptions.flatMap(\.transactions).filter { $0.cancellationMs != nil && !$0.isUpgraded }
            .sorted { ($0.cancellationMs!, $0.transactionId) < ($1.cancellationMs!, $1.transactionId) }
        guard let (page, next, hasMore) = paged(refunded, kind: "refund", cursor: query.first { $0.name == "revision" }?.value) else {
            return apiError(400, 4_000_005, "Invalid request revision.")
        }
        let now = clockMs()
        let out = bent(cursor: next, asked: query.first { $0.name == "revision" }?.value, hasMore: hasMore,
                       items: page.map { sign(emitter.v2Transaction($0, atMs: now)) })
        return json(["signedTransactions": out.items, "revision": out.cursor, "hasMore": out.hasMore])
    }

    /// The simulator's order ids: "SIM" + the id of the purchase (not renewal) that started the order.
    public static func orderId(of transaction: SimTransaction) -> String { "SIM" + transaction.transactionId }

    func orderLookup(_ orderId: String, _ environment: SimEnvironment) -> HTTPResponse {
        let purchaseId = orderId.hasPrefix("SIM") ? String(orderId.dropFirst(3)) : ""
        guard Self.isTransactionId(purchaseId), let (_, t) = find(purchaseId, environment), !t.isRenewal else {
            return json(["status": 1, "signedTransactions": [String]()])
        }
        return json(["status": 0, "signedTransactions": [sign(emitter.v2Transaction(t, atMs: clockMs()))]])
    }

    func body(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    /// JSONSerialization gives NSNumber for numbers and booleans alike; only booleans have objCType "c".
    static func isBoolean(_ number: NSNumber) -> Bool { number.objCType.pointee == CChar(UInt8(ascii: "c")) }

    static func bool(_ value: Any?) -> Bool? {
        guard let number = value as? NSNumber, isBoolean(number) else { return nil }
        return number.boolValue
    }

    static func int(_ value: Any?) -> Int? {
        guard let number = value as? NSNumber, !isBoolean(number) else { return nil }
        let double = number.doubleValue
        guard double.rounded() == double, abs(double) < 1e15 else { return nil }
        return Int(double)
    }

    func consumption(_ id: String, _ bytes: [UInt8], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(id) else { return apiError(400, 4_000_006, "Invalid transaction id.") }
        guard let fields = body(bytes) else { return apiError(400, 4_000_000, "Invalid request.") }
        guard Self.bool(fields["customerConsented"]) == true else { return apiError(400, 4_000_035, "Invalid customer consented.") }
        let deliveries = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
        guard let delivery = fields["deliveryStatus"] as? String, deliveries.contains(delivery) else {
            return apiError(400, 4_000_036, "Invalid delivery status.")
        }
        guard Self.bool(fields["sampleContentProvided"]) != nil else { return apiError(400, 4_000_041, "Invalid sample content provided.") }
        if let percentage = fields["consumptionPercentage"] {
            guard let value = Self.int(percentage), (0...100_000).contains(value) else {
                return apiError(400, 4_000_034, "Invalid consumption percentage.")
            }
        }
        if let preference = fields["refundPreference"] {
            guard let text = preference as? String, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(text) else {
                return apiError(400, 4_000_000, "Invalid refund preference.")
            }
        }
        guard let (_, transaction) = find(id, environment) else { return notFound() }
        // Apple's rules between the fields (ConsumptionRequest, consumptionPercentage, refundPreference).
        let percentage = Self.int(fields["consumptionPercentage"])
        if percentage != nil, transaction.kind == .autoRenewable {
            return apiError(400, 4_000_034, "Consumption percentage is unsupported for auto-renewable subscription transactions.")
        }
        if let percentage, percentage != 0, delivery != "DELIVERED" {
            return apiError(400, 4_000_034, "Consumption percentage must be zero for the provided delivery status.")
        }
        if fields["refundPreference"] as? String == "GRANT_PRORATED", let percentage, percentage == 0 {
            return apiError(400, 4_000_034, "GRANT_PRORATED needs a consumption percentage greater than 0.")
        }
        let answer = ServerAPIState.ConsumptionAnswer(transactionId: id, environment: environment, body: fields, receivedMs: clockMs())
        state.state.withLock { $0.consumption.append(answer) }
        return HTTPResponse(status: 202)
    }

    func setAppAccountToken(_ otid: String, _ bytes: [UInt8], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(otid) else { return apiError(400, 4_000_008, "Invalid original transaction id.") }
        guard let token = body(bytes)?["appAccountToken"] as? String, UUID(uuidString: token) != nil else {
            return apiError(400, 4_000_183, "Invalid app account token: it must be a UUID.")
        }
        guard let (subscription, t) = find(otid, environment) else { return apiError(404, 4_040_005, "Original transaction id not found.") }
        guard t.transactionId == subscription.originalTransactionId else {
            return apiError(400, 4_000_187, "The transaction id is not an original transaction id.")
        }
        store.mutate { state in
            var updated = subscription
            for index in updated.transactions.indices { updated.transactions[index].appAccountToken = token.lowercased() }
            state.replace(updated)
        }
        return HTTPResponse(status: 200)
    }

    /// Checks an extension request's fields as Apple does; nil when they are fine.
    func extensionProblem(_ fields: [String: Any]) -> HTTPResponse? {
        guard let days = Self.int(fields["extendByDays"]), (1...90).contains(days) else { return apiError(400, 4_000_009, "Invalid extend by days.") }
        guard let reason = Self.int(fields["extendReasonCode"]), (0...3).contains(reason) else {
            return apiError(400, 4_000_010, "Invalid extend reason code.")
        }
        guard let id = fields["requestIdentifier"] as? String, !id.isEmpty, id.utf8.count <= 128 else {
            return apiError(400, 4_000_011, "Invalid request identifier.")
        }
        return nil
    }

    /// Moves the current period's end `days` later; nil if the subscription is not active now.
    func applyExtension(_ otid: String, days: Int, now: Int64) -> SimTransaction? {
        store.mutate { state -> SimTransaction? in
            guard var subscription = state.subscriptions[otid], subscription.kind == .autoRenewable,
                  var latest = subscription.latest, let end = latest.expiresMs, end > now,
                  latest.cancellationMs == nil else { return nil }
            latest.expiresMs = end + Int64(days) * 86_400_000
            subscription.transactions[subscription.transactions.count - 1] = latest
            state.replace(subscription)
            state.log(subscription.userId, now, "renewal date extended by \(days) days: otid \(otid) until \(AppleDates.readable(latest.expiresMs!))")
            return latest
        }
    }

    func extend(_ otid: String, _ bytes: [UInt8], _ environment: SimEnvironment) -> HTTPResponse {
        guard Self.isTransactionId(otid) else { return apiError(400, 4_000_008, "Invalid original transaction id.") }
        guard let fields = body(bytes) else { return apiError(400, 4_000_000, "Invalid request.") }
        if let problem = extensionProblem(fields) { return problem }
        guard let (subscription, _) = find(otid, environment), subscription.originalTransactionId == otid else {
            return apiError(404, 4_040_005, "Original transaction id not found.")
        }
        let requestId = fields["requestIdentifier"] as! String
        let days = Self.int(fields["extendByDays"])!
        // Apple applies one request identifier once; a retry answers the same.
        let key = "\(otid)/\(requestId)"
        let first = state.state.withLock { $0.appliedExtensions.insert(key).inserted }
        let now = clockMs()
        let extended = first ? applyExtension(otid, days: days, now: now) : find(otid, environment)?.0.latest
        guard let latest = extended else {
            state.state.withLock { _ = $0.appliedExtensions.remove(key) }
            return apiError(403, 4_030_004, "The subscription is not eligible for a renewal date extension.")
        }
        return json(["originalTransactionId": otid, "webOrderLineItemId": latest.webOrderLineItemId ?? "", "success": true,
                     "effectiveDate": latest.expiresMs ?? now])
    }

    func massExtend(_ bytes: [UInt8], _ environment: SimEnvironment) -> HTTPResponse {
        guard let fields = body(bytes) else { return apiError(400, 4_000_000, "Invalid request.") }
        if let problem = extensionProblem(fields) { return problem }
        guard let productId = fields["productId"] as? String, store.config.catalog.product(productId) != nil else {
            return apiError(400, 4_000_023, "Invalid product id.")
        }
        let storefronts = Set((fields["storefrontCountryCodes"] as? [String]) ?? [])
        let requestId = fields["requestIdentifier"] as! String
        let days = Self.int(fields["extendByDays"])!
        let now = clockMs()
        if state.state.withLock({ $0.massExtensions[requestId] != nil }) { return json(["requestIdentifier": requestId]) }
        let candidates = store.read { state in
            state.subscriptions.values.filter {
                $0.environment == environment && $0.kind == .autoRenewable && $0.productId == productId
                    && (storefronts.isEmpty || storefronts.contains($0.latest?.storefront ?? ""))
            }.map(\.originalTransactionId)
        }
        var succeeded = 0, failed = 0
        for otid in candidates {
            if applyExtension(otid, days: days, now: now) != nil { succeeded += 1 } else { failed += 1 }
        }
        let record = ServerAPIState.MassExtension(productId: productId, environment: environment, succeeded: succeeded, failed: failed, completeMs: now)
        state.state.withLock { $0.massExtensions[requestId] = record }
        return json(["requestIdentifier": requestId])
    }

    func massExtendStatus(productId: String, requestId: String, _ environment: SimEnvironment) -> HTTPResponse {
        guard let record = state.state.withLock({ $0.massExtensions[requestId] }), record.productId == productId,
              record.environment == environment else {
            return apiError(404, 4_040_009, "Status request not found.")
        }
        let sign = state.misbehavior == .negativeCounts ? -1 : 1
        return json(["requestIdentifier": requestId, "complete": true, "completeDate": record.completeMs,
                     "succeededCount": sign * record.succeeded, "failedCount": sign * max(record.failed, 1)])
    }

    func notificationHistory(_ bytes: [UInt8], _ query: [HTTPField], _ environment: SimEnvironment) -> HTTPResponse {
        guard let fields = body(bytes) else { return apiError(400, 4_000_000, "Invalid request.") }
        guard let start = Self.int(fields["startDate"]) else { return apiError(400, 4_000_015, "Invalid start date.") }
        guard let end = Self.int(fields["endDate"]) else { return apiError(400, 4_000_016, "Invalid end date.") }
        guard start < end else { return apiError(400, 4_000_013, "Start date after end date.") }
        let onlyFailures = Self.bool(fields["onlyFailures"]) ?? false
        let transactionId = fields["transactionId"] as? String
        let type = fields["notificationType"] as? String
        if transactionId != nil, type != nil { return apiError(400, 4_000_019, "Multiple filters supplied.") }
        let records = state.notifications.filter { record in
            record.environment == environment && Int64(start) <= record.signedDateMs && record.signedDateMs < Int64(end)
                && (!onlyFailures || !record.delivered)
                && transactionId.map { record.transactionIds.contains($0) } != false
                && type.map { record.notificationType == $0 } != false
        }
        let asked = query.first { $0.name == "paginationToken" }?.value
        guard let (page, next, hasMore) = paged(records, kind: "notifications", cursor: asked) else {
            return apiError(400, 4_000_014, "Invalid pagination token.")
        }
        let out = bent(cursor: next, asked: asked, hasMore: hasMore, items: page.map(\.signedPayload))
        let attempts = Dictionary(page.map { ($0.signedPayload, $0.attempts) }) { first, _ in first }
        var answer: [String: Any] = [
            "hasMore": out.hasMore,
            "notificationHistory": out.items.map { signed in
                ["signedPayload": signed,
                 "sendAttempts": (attempts[signed] ?? []).map { ["attemptDate": $0.dateMs, "sendAttemptResult": $0.result] as [String: Any] }] as [String: Any]
            },
        ]
        if out.hasMore { answer["paginationToken"] = out.cursor }
        return json(answer)
    }

    func requestTest(_ environment: SimEnvironment) -> HTTPResponse {
        let now = clockMs()
        var data: [String: Any] = ["bundleId": store.config.bundleId, "environment": environment.rawValue]
        if environment == .production { data["appAppleId"] = store.config.appAppleId }
        let payload: [String: Any] = ["notificationType": "TEST", "notificationUUID": UUID().uuidString.lowercased(), "data": data,
                                      "version": "2.0", "signedDate": now]
        let signed = sign(payload)
        let delivery = Delivery(channel: .notificationV2, body: JSONText.encode(["signedPayload": signed]), simMs: now, userId: "",
                                label: "V2 TEST", environment: environment)
        let delivered = testNotificationSink?(delivery)
        let attempts = delivered.map { [ServerAPIState.SendAttempt(dateMs: now, result: $0 ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE")] } ?? []
        let token = UUID().uuidString.lowercased() + "_" + String(now)
        state.state.withLock { state in
            state.notifications.append(.init(signedPayload: signed, environment: environment, signedDateMs: now, notificationType: "TEST",
                                             transactionIds: [], attempts: attempts))
            state.testTokens[token] = state.notifications.count - 1
        }
        return json(["testNotificationToken": token])
    }

    func testStatus(_ token: String, _ environment: SimEnvironment) -> HTTPResponse {
        guard let record = state.state.withLock({ state in state.testTokens[token].map { state.notifications[$0] } }),
              record.environment == environment else {
            return apiError(404, 4_040_008, "Test notification not found.")
        }
        return json(["signedPayload": record.signedPayload,
                     "sendAttempts": record.attempts.map { ["attemptDate": $0.dateMs, "sendAttemptResult": $0.result] as [String: Any] }])
    }
}

/// ES256 compact JWS with a pre-encoded `x5c` header and the simulator's JSON writer.
enum JSONSigner {
    static func sign(encodedHeader: String, payload: [String: Any], key: P256PrivateKey) throws -> String {
        try JWSSigner.signES256(encodedHeader: encodedHeader, encodedPayload: Base64URL.encode(JSONText.encode(payload)), key: key)
    }
}
