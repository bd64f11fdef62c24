import Domain
import Foundation
import Kafka
import XCTest

/// Contract (issue 9, acceptance line 2): hostile input never stops the flow. Against the real
/// system — ingest, broker, the four stage workers, PostgreSQL, V2 verified against Apple's test
/// chain, receipts through a verifyReceipt stand-in — each class of hostile input is posted in turn
/// (notifications, receipt uploads, offer requests, read paths): a 4 KB user id, NUL bytes in ids, Int64 extremes and 28-digit values in every numeric field (V1,
/// V2 and verifyReceipt), wrong JSON types, deeply nested JSON, records produced straight to a later
/// stage's topic, a garbage JWS. Each one gets a 4xx with a reason at the edge or a dead letter with
/// a limit kind from the stage it entered (docs/limits.md); after each class an
/// ordinary notification posted next is granted within 10 s; no process exits or restarts.
final class HostileInputTests: XCTestCase {
    typealias Tx = ScenarioBodies.Tx
    let t0 = ScenarioBodies.t0
    let run = String(Int.random(in: 100_000...999_999))

    /// What a hostile input must get.
    enum Verdict {
        case refused(reasonContains: String)          // 4xx at the edge, with the reason
        case deadLettered(kind: String?)              // accepted, then dead-lettered (any kind when nil)
        case deadLetteredBy(stage: String, kind: String)
    }

    struct Hostile {
        /// `topic`: produced straight to a later stage's topic, as if it got there some other way.
        enum Route { case notification, receipt, offer, get(String), topic(String) }
        var name: String
        var route: Route
        var body = Data()
        var verdict: Verdict
    }

    func testHostileInputNeverStopsTheFlow() throws {
        let world = try ScenarioWorld()
        defer { world.stop() }
        let roles = ["broker", "ingest"] + Cluster.stages
        let pids = roles.map { world.cluster.supervisor.pid(of: $0) }
        let producer = try KafkaProducer(config: world.cluster.kafka(clientId: "hostile-input"))
        defer { producer.close() }

        var expectedLetters: [(name: String, body: Data, stage: String, kind: String?)] = []
        var ordinary = 0
        for (category, inputs) in try categories(world) {
            for input in inputs {
                let response: HTTP.Response
                switch input.route {
                case .notification: response = try HTTP.post("\(world.cluster.ingestURL)/v1/notifications/appstore", body: input.body)
                case .receipt: response = try HTTP.post("\(world.cluster.ingestURL)/v1/receipts", body: input.body)
                case .offer: response = try HTTP.post("\(world.cluster.ingestURL)/v1/offers/signature", body: input.body)
                case .get(let path): response = try HTTP.get("\(world.cluster.ingestURL)\(path)")
                case .topic(let topic):
                    _ = try producer.sendAndWait(topic: topic, key: Array("hostile".utf8), value: [UInt8](input.body), timeout: .seconds(10))
                    response = HTTP.Response(status: 200, body: Data())
                }
                switch input.verdict {
                case .refused(let reason):
                    XCTAssertTrue((400..<500).contains(response.status), "\(input.name): \(response.status) \(response.text)")
                    XCTAssertTrue((response.json?["error"] as? String)?.contains(reason) ?? false,
                                  "\(input.name): reason \(response.text) lacks \(reason.debugDescription)")
                case .deadLettered(let kind):
                    XCTAssertEqual(response.status, 200, "\(input.name): \(response.text)")
                    expectedLetters.append((input.name, input.body, "decode", kind))
                case .deadLetteredBy(let stage, let kind):
                    expectedLetters.append((input.name, input.body, stage, kind))
                }
            }
            // The flow goes on: an ordinary notification posted next is granted within 10 s.
            ordinary += 1
            let key = "9\(run)\(ordinary)"
            let started = Date()
            try world.notify(ScenarioBodies.v1("INITIAL_BUY", otid: key, [Tx.period("\(key)0", otid: key, start: t0)]))
            let view = try world.subscription(key, timeout: 10) { $0.grants.count == 1 }
            XCTAssertEqual(view.grants.first?.interval, Interval(startMs: t0, endMs: t0 + ScenarioBodies.month), category)
            print("hostile input: \(category): \(inputs.count) inputs, then an ordinary grant in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
        }

        // Every accepted hostile input is in the dead-letter topic, with its kind.
        var letters: [Data: (stage: String, kind: String)] = [:]
        do {
            try waitUntil("\(expectedLetters.count) hostile inputs are dead-lettered", timeout: 60, interval: 0.5) {
                letters = try deadLetterKinds(world.cluster)
                return expectedLetters.allSatisfy { letters[Self.stored($0.body)] != nil }
            }
        } catch {
            throw ClusterError("\(error); missing: \(expectedLetters.filter { letters[Self.stored($0.body)] == nil }.map(\.name))")
        }
        for expected in expectedLetters {
            XCTAssertEqual(letters[Self.stored(expected.body)]?.stage, expected.stage, expected.name)
            if let wanted = expected.kind { XCTAssertEqual(letters[Self.stored(expected.body)]?.kind, wanted, expected.name) }
        }
        // No process exited or was replaced.
        for (role, pid) in zip(roles, pids) {
            XCTAssertEqual(world.cluster.supervisor.pid(of: role), pid, "\(role) restarted")
            XCTAssertEqual(pid.map { kill($0, 0) }, 0, "\(role) is not running")
        }
    }

    /// A body as ingest stores it, for matching dead letters: ingest removes a V1 body's `password`
    /// (issue 11), so bodies compare without it, in one canonical JSON form.
    static func stored(_ body: Data) -> Data {
        guard var object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any], object["password"] != nil else { return body }
        object.removeValue(forKey: "password")
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? body
    }

    /// The dead letters on the topic, by original bytes (V1 passwords aside). The one place that knows their format.
    private func deadLetterKinds(_ cluster: Cluster) throws -> [Data: (stage: String, kind: String)] {
        var kinds: [Data: (stage: String, kind: String)] = [:]
        for record in try cluster.readTopic(Topic.deadLetter, atLeast: 1, timeout: 8) {
            if let letter = DeadLetterRecord(record) {
                kinds[Self.stored(Data(letter.value))] = (letter.stage, letter.kind)
            }
        }
        return kinds
    }

    // MARK: the hostile inputs

    private func categories(_ world: ScenarioWorld) throws -> [(String, [Hostile])] {
        let big = String(repeating: "u", count: 4096)
        let key = "8\(run)"
        return [
            ("4 KB user id", [
                Hostile(name: "receipt upload user_id 4 KB", route: .receipt,
                        body: try ScenarioBodies.receiptUpload(user: big, [Tx.period("\(key)10", otid: "\(key)1", start: t0)]),
                        verdict: .refused(reasonContains: "user_id is 4096 bytes long")),
                Hostile(name: "path user id 4 KB", route: .get("/v1/users/\(big)/membership"),
                        verdict: .refused(reasonContains: "user id is 4096 bytes long")),
                Hostile(name: "V1 app_account_token 4 KB", route: .notification,
                        body: try v1(key: "\(key)2") { $0["app_account_token"] = big },
                        verdict: .deadLettered(kind: "identifier_too_long")),
                Hostile(name: "V1 transaction_id 4 KB", route: .notification,
                        body: try v1(key: "\(key)3") { $0["transaction_id"] = big },
                        verdict: .deadLettered(kind: "identifier_too_long")),
                Hostile(name: "offer request user_id 4 KB", route: .offer,
                        body: try json(["user_id": big, "product_id": "vip.standard.1m"]),
                        verdict: .refused(reasonContains: "user_id is 4096 bytes long")),
                Hostile(name: "offer request application_username 4 KB", route: .offer,
                        body: try json(["user_id": "u1", "product_id": "vip.standard.1m", "application_username": big]),
                        verdict: .refused(reasonContains: "application_username is 4096 bytes long")),
                Hostile(name: "V1 top-level original_transaction_id 4 KB", route: .notification,
                        body: try v1(key: "\(key)4", top: { $0["original_transaction_id"] = big }),
                        verdict: .refused(reasonContains: "original_transaction_id is 4096 bytes long")),
            ]),
            ("NUL bytes in ids", [
                Hostile(name: "receipt upload user_id with NUL", route: .receipt,
                        body: try ScenarioBodies.receiptUpload(user: "user\u{0}1", [Tx.period("\(key)20", otid: "\(key)5", start: t0)]),
                        verdict: .refused(reasonContains: "user_id contains U+0000")),
                Hostile(name: "path user id with a control character", route: .get("/v1/users/a%01b/ledger"),
                        verdict: .refused(reasonContains: "contains U+0001")),
                Hostile(name: "offer request product_id with NUL", route: .offer,
                        body: try json(["user_id": "u1", "product_id": "vip.standard.1m\u{0}"]),
                        verdict: .refused(reasonContains: "product_id contains U+0000")),
                Hostile(name: "offer request offer_id with the signature separator U+2063", route: .offer,
                        body: try json(["user_id": "u1", "product_id": "vip.standard.1m", "offer_id": "a\u{2063}b"]),
                        verdict: .refused(reasonContains: "offer_id contains U+2063")),
                Hostile(name: "offers query group with a control character", route: .get("/v1/users/u1/offers?group=vip%07"),
                        verdict: .refused(reasonContains: "group contains U+0007")),
                Hostile(name: "V1 product_id with NUL", route: .notification,
                        body: try v1(key: "\(key)6") { $0["product_id"] = "vip.standard.1m\u{0}" },
                        verdict: .deadLettered(kind: "forbidden_character")),
                Hostile(name: "V1 original_transaction_id with NUL", route: .notification,
                        body: try v1(key: "\(key)7") { $0["original_transaction_id"] = "\(key)7\u{0}" },
                        verdict: .deadLettered(kind: "forbidden_character")),
                Hostile(name: "receipt upload transaction_id with NUL", route: .receipt,
                        body: try ScenarioBodies.receiptUpload(user: "u\(key)", [Tx.period("\(key)8\u{0}", otid: "\(key)8", start: t0)]),
                        verdict: .deadLettered(kind: "forbidden_character")),
            ]),
            ("Int64 extremes in every numeric field", try extremes(world, key: "\(key)3")),
            ("28-digit values in every numeric field", try overlong(world, key: "\(key)4")),
            ("wrong JSON types", [
                Hostile(name: "V1 notification_type a number", route: .notification,
                        body: try v1(key: "\(key)50", top: { $0["notification_type"] = 42 }),
                        verdict: .refused(reasonContains: "notification_type must be a string")),
                Hostile(name: "V1 unified_receipt a string", route: .notification,
                        body: try v1(key: "\(key)51", top: { $0["unified_receipt"] = "receipt" }),
                        verdict: .refused(reasonContains: "unified_receipt must be an object")),
                Hostile(name: "signedPayload an object", route: .notification, body: Data(#"{"signedPayload":{"a":1}}"#.utf8),
                        verdict: .refused(reasonContains: "signedPayload must be a string")),
                Hostile(name: "receipt upload user_id a number", route: .receipt, body: Data(#"{"user_id":42,"receipt_data":"AAAA"}"#.utf8),
                        verdict: .refused(reasonContains: "user_id must be a string")),
                Hostile(name: "offer request user_id a number", route: .offer, body: Data(#"{"user_id":7,"product_id":"vip.standard.1m"}"#.utf8),
                        verdict: .refused(reasonContains: "user_id has the wrong type")),
                Hostile(name: "body an array", route: .notification, body: Data("[1,2,3]".utf8),
                        verdict: .refused(reasonContains: "body is not a JSON object")),
                Hostile(name: "V1 transaction_id an array", route: .notification,
                        body: try v1(key: "\(key)52") { $0["transaction_id"] = ["1"] },
                        verdict: .deadLettered(kind: "invalid_type")),
                Hostile(name: "V1 purchase_date_ms an object", route: .notification,
                        body: try v1(key: "\(key)53") { $0["purchase_date_ms"] = ["ms": 1] },
                        verdict: .deadLettered(kind: "invalid_number")),
            ]),
            ("deeply nested JSON", [
                Hostile(name: "notification nested 10,000 deep", route: .notification,
                        body: Data((#"{"a":"# + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8),
                        verdict: .refused(reasonContains: "deeper than 32 levels")),
                Hostile(name: "receipt upload nested 100 deep", route: .receipt,
                        body: Data((#"{"user_id":"u1","receipt_data":"AAAA","x":"# + String(repeating: "{\"a\":", count: 100) + "1"
                                    + String(repeating: "}", count: 100) + "}").utf8),
                        verdict: .refused(reasonContains: "deeper than 32 levels")),
                Hostile(name: "offer request nested 1,000 deep", route: .offer,
                        body: Data((#"{"user_id":"u1","product_id":"vip.standard.1m","x":"# + String(repeating: "[", count: 1000)
                                    + String(repeating: "]", count: 1000) + "}").utf8),
                        verdict: .refused(reasonContains: "deeper than 32 levels")),
            ]),
            ("records that reached a later topic some other way", try laterTopics(key: "\(key)7")),
            ("garbage JWS", [
                Hostile(name: "signedPayload of three garbage segments", route: .notification,
                        body: Data(#"{"signedPayload":"eyJhbGciOiJFUzI1NiJ9.Z2FyYmFnZQ.c2lnbmF0dXJl"}"#.utf8),
                        verdict: .deadLettered(kind: nil)),
                Hostile(name: "signedPayload of random base64url", route: .notification,
                        body: Data("{\"signedPayload\":\"\(randomBase64URL(3000))\"}".utf8), verdict: .deadLettered(kind: nil)),
                Hostile(name: "signedPayload not base64url", route: .notification, body: Data(#"{"signedPayload":"not a jws!"}"#.utf8),
                        verdict: .refused(reasonContains: "not a compact JWS")),
            ]),
        ]
    }

    /// Each stage checks again where a record enters it: dedupe (decoded event), classify (unique
    /// event), membership (command). The first is the input that crash-looped dedupe.
    private func laterTopics(key: String) throws -> [Hostile] {
        let encoder = JSONEncoder()
        let t = TransactionFacts(transactionId: "\(key)0", originalTransactionId: key, productId: "vip.standard.1m",
                                 bundleId: ScenarioBodies.bundleId, purchaseDateMs: .min, expiresDateMs: t0 + ScenarioBodies.month)
        let event = AppleEvent(eventId: "v1:hostile:\(key)", source: .notificationV1, environment: "Production",
                               bundleId: ScenarioBodies.bundleId, subscriptionKey: key,
                               notification: NotificationMeta(type: "DID_RENEW"), transactions: [t], receivedAtMs: t0)
        var bigUser = event
        bigUser.eventId += "u"
        bigUser.transactions[0].purchaseDateMs = t0
        bigUser.appUserId = String(repeating: "u", count: 4096)
        var binaryEvent = event
        binaryEvent.eventId += "b"
        var fine = bigUser
        fine.appUserId = nil
        let unique = UniqueEvent(event: fine, purchases: [PurchaseChange(purchaseId: "\(key)|p", kind: .new, transaction: fine.transactions[0],
                                                                         aliases: ["\(key)0", "\(key)1\u{0}"])])
        let cause = Cause(source: .notificationV1, eventId: event.eventId)
        let link = MembershipCommand(commandId: "\(event.eventId)#link", subscriptionKey: key,
                                     action: .linkUser(UserLink(userId: String(repeating: "u", count: 4096), via: "receipt-upload")),
                                     reason: "hostile", cause: cause)
        let credit = MembershipCommand(commandId: "\(event.eventId)#coins", subscriptionKey: key,
                                       action: .purchase(PurchaseGrant(purchaseId: "\(key)|c", transactionId: "\(key)0", originalTransactionId: key,
                                                                       productId: "coins.100", productKind: .consumable, group: "coins",
                                                                       startMs: t0, endMs: nil, credit: .max)),
                                       reason: "hostile", cause: cause)
        return [
            Hostile(name: "decoded event with purchaseDateMs Int64.min", route: .topic(Topic.decoded), body: try encoder.encode(event),
                    verdict: .deadLetteredBy(stage: "dedupe", kind: "date_out_of_range")),
            Hostile(name: "decoded event with a 4 KB appUserId", route: .topic(Topic.decoded), body: try encoder.encode(bigUser),
                    verdict: .deadLetteredBy(stage: "dedupe", kind: "identifier_too_long")),
            Hostile(name: "unique event with a NUL in an alias", route: .topic(Topic.unique), body: try encoder.encode(unique),
                    verdict: .deadLetteredBy(stage: "classify", kind: "forbidden_character")),
            Hostile(name: "command linking a 4 KB user id", route: .topic(Topic.commands), body: try encoder.encode(link),
                    verdict: .deadLetteredBy(stage: "membership", kind: "identifier_too_long")),
            Hostile(name: "command crediting Int.max units", route: .topic(Topic.commands), body: try encoder.encode(credit),
                    verdict: .deadLetteredBy(stage: "membership", kind: "number_out_of_range")),
            // The binary encoding the stages write (TopicRecords): checked the same way, and corrupt
            // records are dead letters with their bytes.
            Hostile(name: "binary decoded event with purchaseDateMs Int64.min", route: .topic(Topic.decoded),
                    body: Data(TopicRecords.encode(binaryEvent)), verdict: .deadLetteredBy(stage: "dedupe", kind: "date_out_of_range")),
            Hostile(name: "binary unique event cut short", route: .topic(Topic.unique), body: Data(TopicRecords.encode(unique).dropLast(3)),
                    verdict: .deadLetteredBy(stage: "classify", kind: "invalid_event")),
            Hostile(name: "binary command of an unknown version", route: .topic(Topic.commands),
                    body: Data([TopicRecords.marker, TopicRecords.version + 1] + TopicRecords.encode(link).dropFirst(2)),
                    verdict: .deadLetteredBy(stage: "membership", kind: "invalid_command")),
        ]
    }

    static let v2Numbers = ["purchaseDate", "expiresDate", "revocationDate", "quantity", "price", "offerType", "revocationPercentage"]

    /// Int64.min and Int64.max in each numeric field of a V1 transaction, a V2 transaction and a
    /// verifyReceipt response, one field per input (the first violation would hide the others).
    private func extremes(_ world: ScenarioWorld, key: String) throws -> [Hostile] {
        var inputs: [Hostile] = []
        for (index, extreme) in [Int64.min, Int64.max].enumerated() {
            for field in ["purchase_date_ms", "original_purchase_date_ms", "expires_date_ms", "cancellation_date_ms", "quantity"] {
                inputs.append(Hostile(name: "V1 \(field) = \(extreme)", route: .notification,
                                      body: try v1(key: "\(key)\(index)\(inputs.count)") { $0[field] = String(extreme) },
                                      verdict: .deadLettered(kind: field == "quantity" ? "quantity_out_of_range" : "date_out_of_range")))
            }
            inputs.append(Hostile(name: "V1 auto_renew_status_change_date_ms = \(extreme)", route: .notification,
                                  body: try v1(key: "\(key)\(index)\(inputs.count)", top: { $0["auto_renew_status_change_date_ms"] = String(extreme) }),
                                  verdict: .deadLettered(kind: "date_out_of_range")))
            inputs.append(Hostile(name: "verifyReceipt purchase_date_ms = \(extreme)", route: .receipt,
                                  body: try receiptUpload(key: "\(key)\(index)r") { $0["purchase_date_ms"] = String(extreme) },
                                  verdict: .deadLettered(kind: "date_out_of_range")))
            // As JSON numbers Foundation reads these as doubles, which no longer say an exact Int64.
            for field in Self.v2Numbers {
                inputs.append(Hostile(name: "V2 \(field) = \(extreme)", route: .notification,
                                      body: try v2(world, key: "\(key)\(index)v\(inputs.count)") { $0[field] = extreme },
                                      verdict: .deadLettered(kind: "invalid_number")))
            }
        }
        // Within Int64 but outside the bounds: refused by the bounds check after decode.
        for field in Self.v2Numbers {
            inputs.append(Hostile(name: "V2 \(field) = -1", route: .notification,
                                  body: try v2(world, key: "\(key)m\(inputs.count)") { $0[field] = -1 },
                                  verdict: .deadLettered(kind: ["purchaseDate", "expiresDate", "revocationDate"].contains(field)
                                                         ? "date_out_of_range" : field == "quantity" ? "quantity_out_of_range" : "number_out_of_range")))
        }
        return inputs
    }

    /// 28-digit values (as Apple's string form and as JSON numbers) in each numeric field.
    private func overlong(_ world: ScenarioWorld, key: String) throws -> [Hostile] {
        let digits = "1745044952000100000000000000"
        var inputs: [Hostile] = []
        for field in ["purchase_date_ms", "original_purchase_date_ms", "expires_date_ms", "cancellation_date_ms", "quantity"] {
            inputs.append(Hostile(name: "V1 \(field) 28 digits", route: .notification,
                                  body: try v1(key: "\(key)\(inputs.count)") { $0[field] = digits },
                                  verdict: .deadLettered(kind: "invalid_number")))
        }
        inputs.append(Hostile(name: "V1 auto_renew_status_change_date_ms 28 digits", route: .notification,
                              body: try v1(key: "\(key)\(inputs.count)", top: { $0["auto_renew_status_change_date_ms"] = digits }),
                              verdict: .deadLettered(kind: "invalid_number")))
        for field in Self.v2Numbers {
            inputs.append(Hostile(name: "V2 \(field) 28 digits", route: .notification,
                                  body: try v2(world, key: "\(key)v\(inputs.count)") { $0[field] = 1.745044952e27 },
                                  verdict: .deadLettered(kind: "invalid_number")))
        }
        inputs.append(Hostile(name: "verifyReceipt expires_date_ms 28 digits", route: .receipt,
                              body: try receiptUpload(key: "\(key)r") { $0["expires_date_ms"] = digits },
                              verdict: .deadLettered(kind: "invalid_number")))
        return inputs
    }

    /// An ordinary V1 INITIAL_BUY of its own subscription, with its transaction (and body) edited.
    private func v1(key: String, transaction edit: (inout [String: Any]) -> Void = { _ in },
                    top: (inout [String: Any]) -> Void = { _ in }) throws -> Data {
        var body = try ScenarioBodies.v1("INITIAL_BUY", otid: key, [Tx.period("\(key)0", otid: key, start: t0)])
        var unified = body["unified_receipt"] as! [String: Any]
        var latest = unified["latest_receipt_info"] as! [[String: Any]]
        edit(&latest[0])
        unified["latest_receipt_info"] = latest
        body["unified_receipt"] = unified
        top(&body)
        return try ScenarioBodies.data(body)
    }

    /// An ordinary receipt upload (answered by the verifyReceipt stand-in) whose latest transaction
    /// in the verifyReceipt response is edited.
    private func receiptUpload(key: String, edit: (inout [String: Any]) -> Void) throws -> Data {
        var upload = try JSONSerialization.jsonObject(with: try ScenarioBodies.receiptUpload(
            user: "u\(key)", [Tx.period("\(key)0", otid: key, start: t0)])) as! [String: Any]
        var response = try JSONSerialization.jsonObject(with: Data(base64Encoded: upload["receipt_data"] as! String)!) as! [String: Any]
        var latest = response["latest_receipt_info"] as! [[String: Any]]
        edit(&latest[0])
        response["latest_receipt_info"] = latest
        upload["receipt_data"] = try JSONSerialization.data(withJSONObject: response, options: [.sortedKeys]).base64EncodedString()
        return try JSONSerialization.data(withJSONObject: upload, options: [.sortedKeys])
    }

    /// A V2 SUBSCRIBED notification signed with the test chain, its transaction payload edited.
    private func v2(_ world: ScenarioWorld, key: String, edit: (inout [String: Any]) -> Void) throws -> Data {
        let signedMs = t0 + 1000
        var transaction: [String: Any] = [
            "transactionId": "\(key)0", "originalTransactionId": key, "productId": "vip.standard.1m",
            "bundleId": ScenarioBodies.bundleId, "purchaseDate": t0, "originalPurchaseDate": t0, "expiresDate": t0 + ScenarioBodies.month,
            "quantity": 1, "type": "Auto-Renewable Subscription", "inAppOwnershipType": "PURCHASED", "signedDate": signedMs,
            "environment": "Sandbox", "webOrderLineItemId": "9\(key)0",
        ]
        edit(&transaction)
        let data: [String: Any] = ["environment": "Sandbox", "bundleId": ScenarioBodies.bundleId, "bundleVersion": "1.0", "status": 1,
                                   "signedTransactionInfo": try world.signer.sign(transaction)]
        let payload: [String: Any] = ["notificationType": "SUBSCRIBED", "subtype": "INITIAL_BUY", "notificationUUID": UUID().uuidString.lowercased(),
                                      "data": data, "version": "2.0", "signedDate": signedMs]
        return Data(#"{"signedPayload":"\#(try world.signer.sign(payload))"}"#.utf8)
    }

    private func json(_ object: [String: Any]) throws -> Data { try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) }

    private func randomBase64URL(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
        return String((0..<count).map { _ in alphabet.randomElement()! })
    }
}
