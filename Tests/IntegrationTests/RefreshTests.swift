import Foundation
import Postgres
import Runtime
import Simulator
import XCTest

/// Contract: a customer none of whose notifications ever reached StoreLedger (a purchase, two
/// renewals, the first renewal refunded) is made right — the membership API equals the oracle — by
/// one `storeledger refresh --transaction-id`, whose tokens come from the signer; every ledger
/// line it causes names the cause `server-api`. The history revision is stored per subscription:
/// after Apple refunds the current period (again unannounced), the next refresh reads no history
/// again, and the statuses' signed transaction makes the correction, a cut whose cause is `server-api`.
/// That second refresh is asked of ingest's admin endpoint (`POST /v1/admin/refresh/{id}`).
final class RefreshTests: XCTestCase {
    func testOneRefreshMakesRightAUserWhoseNotificationsWereAllLostAndTheNextReadsOnlyChanges() throws {
        let api = try ServerAPICluster()
        defer { api.stop() }
        let day: Int64 = 86_400_000
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let userId = StoreState.userUUID(seed: 0x16, index: 7)
        let otid = try api.subscriber(userId, atMs: nowMs - 100 * day).originalTransactionId
        try api.sim.store.mutate { state in
            let renewal = try state.renew(otid)
            _ = try state.renew(otid)
            _ = try state.refund(otid, transactionId: renewal.transactionId, atMs: renewal.purchaseMs + 5 * day)
        }
        let checker = MembershipChecker(ingestURL: api.sim.ingestURL)
        func expectation() -> UserExpectation { api.sim.store.read { Oracle.expectation(for: $0.users[userId]!, in: $0) } }
        XCTAssertFalse(checker.check([expectation()]).isEmpty, "StoreLedger has heard nothing of this customer yet")

        let first = try refresh(otid, api)
        XCTAssertEqual(first.historyTransactions, 3)
        XCTAssertEqual(first.statuses, 1)
        XCTAssertFalse(first.resumedFromRevision)
        XCTAssertNil(first.error)
        try waitUntil("the membership API equals the oracle after one refresh", timeout: 120, interval: 0.5) {
            checker.check([expectation()]).isEmpty
        }
        let database = try api.sim.cluster.database()
        defer { database.close() }
        let lines = try ledger(otid, database)
        XCTAssertEqual(lines.filter { $0.kind == "grant" }.count, 3, "\(lines)")
        XCTAssertTrue(lines.allSatisfy { $0.source == "server-api" && $0.provenance == "server-api" }, "\(lines)")
        XCTAssertNotNil(try database.query("SELECT revision FROM api_revisions WHERE subscription_key = \(otid)").first)

        // Apple refunds the current period and the notification is lost too.
        _ = try api.sim.store.mutate { state in
            let latest = try state.subscription(otid).transactions.last!
            return try state.refund(otid, transactionId: latest.transactionId, atMs: latest.purchaseMs + 2 * day)
        }
        let adminPort = try FreePort.loopback()
        try api.sim.cluster.supervisor.start(.init(role: "ingest-admin", arguments: ["ingest", "--port", String(adminPort)],
                                                   environment: api.cliEnvironment.merging(TestCredentials.environment) { $1 }.merging(["STORELEDGER_INGEST_SERVER_API": "on"]) { $1 },
                                                   onExit: .restart))
        let adminURL = "http://127.0.0.1:\(adminPort)"
        try waitUntil("ingest with the admin routes answers", timeout: 120, interval: 0.5) { (try? HTTP.get("\(adminURL)/healthz").status) == 200 }
        let answer = try HTTP.post("\(adminURL)/v1/admin/refresh/\(otid)", body: Data(), timeout: 60,
                                   authorization: TestCredentials.bearer(TestCredentials.adminKey))
        XCTAssertEqual(answer.status, 200, String(decoding: answer.body, as: UTF8.self))
        let second = try XCTUnwrap(try JSONDecoder().decode([String: Report].self, from: answer.body)["refresh"])
        XCTAssertTrue(second.resumedFromRevision)
        XCTAssertEqual(second.historyTransactions, 0, "no transaction was added since the stored revision")
        try waitUntil("the refund shows", timeout: 120, interval: 0.5) { checker.check([expectation()]).isEmpty }
        let corrected = try ledger(otid, database)
        let cuts = corrected.dropFirst(lines.count).filter { $0.kind == "cut" }
        XCTAssertEqual(cuts.count, 1, "the correction is one cut: \(corrected)")
        XCTAssertTrue(cuts.allSatisfy { $0.source == "server-api" && $0.provenance == "server-api" }, "\(corrected)")

        // A stored revision Apple no longer takes (4000005) is dropped: the history is read from the start.
        try database.execute("UPDATE api_revisions SET revision = 'stale-revision' WHERE subscription_key = \(otid)")
        let third = try refresh(otid, api)
        XCTAssertNil(third.error)
        XCTAssertFalse(third.resumedFromRevision)
        XCTAssertEqual(third.historyTransactions, 3)
        XCTAssertNotEqual(try database.query("SELECT revision FROM api_revisions WHERE subscription_key = \(otid)").first?.string("revision"),
                          "stale-revision")
    }

    struct Report: Decodable {
        var historyTransactions: Int
        var statuses: Int
        var resumedFromRevision: Bool
        var recordsFed: Int
        var error: String?
    }

    func refresh(_ transactionId: String, _ api: ServerAPICluster) throws -> Report {
        let output = try RecoverNotificationsTests.run(["refresh", "--transaction-id", transactionId, "--json"], environment: api.cliEnvironment)
        print("[refresh] \(output)")
        return try JSONDecoder().decode([String: Report].self, from: Data(output.utf8))["refresh"]!
    }

    struct Line: CustomStringConvertible {
        var kind: String
        var source: String?
        var provenance: String?
        var description: String { "\(kind) (\(source ?? "-"), \(provenance ?? "-"))" }
    }

    func ledger(_ subscriptionKey: String, _ database: PGConnection) throws -> [Line] {
        try database.query("""
            SELECT kind, cause->>'source' AS source, cause->>'provenance' AS provenance FROM ledger
            WHERE subscription_key = \(subscriptionKey) ORDER BY entry_id
            """).map { Line(kind: try $0.string("kind"), source: try $0.decode("source"), provenance: try $0.decode("provenance")) }
    }
}
