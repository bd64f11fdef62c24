import Domain
import Foundation
import Postgres
import Store
import TestSupport
import XCTest

/// The webhook tables against PostgreSQL: one deliverer per endpoint, and a resend's fresh retry
/// window (its backoff starts again at the first step).
final class WebhookStoreTests: PGTestCase {
    private func outboxRow(_ db: PGConnection, entry: Int64, seq: Int64) throws {
        try db.execute("""
            INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, relay_seq, kafka_partition)
            VALUES ('u-1', \(entry), 's', 'membership.granted', '{}', \(seq), 0)
            """)
    }

    func testOneDelivererPerEndpointUntilItsSessionEnds() throws {
        let url = try migratedDatabaseURL()
        let first = try PGConnection(url: url)
        let second = try PGConnection(url: url)
        defer { second.close() }
        XCTAssertTrue(try WebhookStore(first).tryTakeDelivererLock(endpoint: "crm"))
        XCTAssertFalse(try WebhookStore(second).tryTakeDelivererLock(endpoint: "crm"), "the endpoint has its deliverer")
        XCTAssertTrue(try WebhookStore(second).tryTakeDelivererLock(endpoint: "billing"), "another endpoint is free")
        first.close()
        // The server lets the lock go once the closed session's backend has exited.
        var taken = false
        let deadline = Date().addingTimeInterval(10)
        while !taken, Date() < deadline {
            taken = try WebhookStore(second).tryTakeDelivererLock(endpoint: "crm")
            if !taken { Thread.sleep(forTimeInterval: 0.05) }
        }
        XCTAssertTrue(taken, "the standby takes over when the session ends")
    }

    /// An endpoint added later starts with the events ordered from then on (or, asked to, with all
    /// of them); the cursor is made once, so later events reach it either way.
    func testANewEndpointStartsNowUnlessAskedForTheWholeOutbox() throws {
        let db = try migratedDatabase()
        defer { db.close() }
        try outboxRow(db, entry: 1, seq: 1)
        try outboxRow(db, entry: 2, seq: 2)
        let store = WebhookStore(db)
        XCTAssertEqual(try store.enqueue(endpoint: "late"), 0, "events before the endpoint existed are not sent")
        XCTAssertEqual(try store.enqueue(endpoint: "archive", start: .beginning), 2)
        try outboxRow(db, entry: 3, seq: 3)
        XCTAssertEqual(try store.enqueue(endpoint: "late"), 1)
        XCTAssertEqual(try store.enqueue(endpoint: "archive", start: .now), 1, "start matters only when the cursor is made")
    }

    func testAResendStartsTheBackoffAgainFromItsFirstStep() throws {
        let db = try migratedDatabase()
        defer { db.close() }
        try outboxRow(db, entry: 7, seq: 1)
        let store = WebhookStore(db)
        XCTAssertEqual(try store.enqueue(endpoint: "crm", start: .beginning), 1)
        let policy = WebhookRetryPolicy(baseDelayMs: 10_000, maxDelayMs: 3_600_000, giveUpAfterMs: 259_200_000)
        // The rows' times come from the server's clock (`now()`): count from it.
        var now = try db.query("SELECT (extract(epoch FROM now()) * 1000)::bigint AS ms").first!.int64("ms") + 1_000
        func failOnce() throws -> WebhookStore.Due {
            let due = try XCTUnwrap(try store.due(endpoint: "crm", nowMs: now).first)
            let next = due.afterFailure(policy, startedMs: now, endedMs: now)
            try store.record(endpoint: "crm", entryId: due.entryId, attempt: due.attempts + 1, atMs: now, durationMs: 1,
                             outcome: .failed(status: 500, error: "HTTP 500", next: next))
            now += 4_000_000
            return due
        }
        XCTAssertEqual(try (0..<5).map { _ in try failOnce().windowAttempts }, [0, 1, 2, 3, 4])
        XCTAssertTrue(try store.resend(endpoint: "crm", entryId: 7))
        let resent = try failOnce()
        XCTAssertEqual(resent.attempts, 5, "attempts keep counting for the log")
        XCTAssertEqual(resent.windowAttempts, 0, "a resend opens a new window")
        let retry = try XCTUnwrap(try store.due(endpoint: "crm", nowMs: now).first)
        XCTAssertEqual(retry.windowAttempts, 1)
        let next = try db.query("SELECT (extract(epoch FROM next_attempt_at) * 1000)::bigint - (extract(epoch FROM last_attempt_at) * 1000)::bigint AS wait FROM webhook_deliveries").first!.int64("wait")
        XCTAssertEqual(next, 10_000, "the first failure after the resend waits the first step, not the cap")
        // The log in pages: every attempt once, oldest first.
        let pages = try (0..<4).map { try store.log(endpoint: "crm", limit: 2, offset: $0 * 2).map(\.attempt) }
        XCTAssertEqual(pages, [[1, 2], [3, 4], [5, 6], []])
    }
}
