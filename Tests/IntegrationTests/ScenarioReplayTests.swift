import Domain
import Foundation
import Postgres
import XCTest

/// Contract: the ledger is the truth and the pipeline is deterministic. The scenario set (V1 and
/// signed V2 bodies) fed through the running system yields exactly what the pure domain computes
/// from the same bytes; feeding the same bytes again writes nothing (byte-identical ledger rows,
/// states and projections); feeding the set under other ids in a shuffled order yields
/// byte-identical membership projections and the same ledger fold (the ledgers differ only as
/// histories: an out-of-order refund is granted short instead of granted then cut, S15); and the
/// stored projections equal the ledger folded from scratch (rebuild).
final class ScenarioReplayTests: XCTestCase {
    func testSameSetTwiceWritesNothingShuffledConvergesAndProjectionsRebuildFromTheLedger() throws {
        let world = try ScenarioWorld()
        defer { world.stop() }
        let db = try world.cluster.database()
        defer { db.close() }
        let first = "runa", second = "runb"
        let inputs = try ScenarioFeed.inputs(prefix: first, signer: world.signer)

        // 1. The set in its written order; the system catches up with the oracle.
        var oracle = try ScenarioFeed.Oracle()
        for input in inputs { try oracle.feed(input) }
        for input in inputs { try world.notify(input) }
        let expected = LedgerProjection(entries: oracle.ledger)
        try waitUntil("the system's ledger folds to what the domain computes", timeout: 60, interval: 0.2) {
            LedgerProjection(entries: try ScenarioDatabase.ledger(db, where: prefixed(first))) == expected
        }
        let expectedUser = groupMemberships(of: oracle.book.states(ofUser: "user-\(first)"))
        let user = try world.user("user-\(first)") { $0.groups == expectedUser }
        XCTAssertEqual(user.group()?.subscriptionKeys, ["\(first)-s10", "\(first)-s3", "\(first)-s8"].map { ScenarioWorld.key($0) })
        let snapshot = try stableSnapshot(db, prefix: first)

        // 2. The same bytes again: every delivery is seen, nothing is written.
        for input in inputs { try world.notify(input) }
        try waitUntil("dedupe saw every input twice", timeout: 60, interval: 0.2) {
            let row = try db.query("SELECT coalesce(sum(deliveries), 0)::bigint AS d, count(*) AS n FROM seen_events WHERE " + prefixed(first)).first
            return try row?.int("n") == inputs.count && row?.int("d") == 2 * inputs.count
        }
        XCTAssertEqual(try self.snapshot(db, prefix: first), snapshot, "replaying unchanged inputs writes nothing")

        // 3. The set under other ids, shuffled: the same membership, byte for byte.
        var generator = SystemRandomNumberGenerator()
        let shuffled = try ScenarioFeed.inputs(prefix: second, signer: world.signer).shuffled(using: &generator)
        for input in shuffled { try world.notify(input) }
        let normalizedExpected = try projectionText(LedgerProjection(entries: try ScenarioDatabase.ledger(db, where: prefixed(first))))
        try waitUntil("the shuffled set folds to the same ledger projection", timeout: 60, interval: 0.2) {
            let folded = LedgerProjection(entries: try ScenarioDatabase.ledger(db, where: prefixed(second)))
            return try projectionText(folded).replacingOccurrences(of: second, with: first) == normalizedExpected
        }
        let shuffledSnapshot = try stableSnapshot(db, prefix: second)
        XCTAssertEqual(shuffledSnapshot.userMembership.replacingOccurrences(of: second, with: first), snapshot.userMembership)
        XCTAssertEqual(shuffledSnapshot.grants.replacingOccurrences(of: second, with: first), snapshot.grants)

        // 4. Rebuild: the projections stored by the stage equal the ledger folded from scratch.
        let everything = try ScenarioDatabase.ledger(db)
        XCTAssertEqual(LedgerProjection(entries: everything), LedgerProjection(states: try ScenarioDatabase.states(db)))
        let rebuilt = LedgerProjection(entries: everything).entitlements
        for row in try db.query("SELECT user_id, group_id, intervals::text AS i FROM user_membership WHERE user_id LIKE 'user-run%'") {
            let stored = try JSONDecoder().decode([Interval].self, from: Data(try row.string("i").utf8))
            XCTAssertEqual(rebuilt["user:\(try row.string("user_id"))"]?[try row.string("group_id")] ?? [], stored)
        }
    }

    private func prefixed(_ prefix: String) -> SQL { "subscription_key LIKE \(prefix + "-%")" }

    private func projectionText(_ projection: LedgerProjection) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(projection), as: UTF8.self)
    }

    struct Snapshot: Equatable {
        var ledger: String
        var states: String
        var userMembership: String
        var grants: String
    }

    /// Everything the membership stage writes for one prefix, as text (ledger rows in full).
    private func snapshot(_ db: PGConnection, prefix: String) throws -> Snapshot {
        func text(_ sql: SQL) throws -> String {
            try db.query(sql).map { try $0.string("t") }.joined(separator: "\n")
        }
        let filter = prefixed(prefix)
        return Snapshot(
            ledger: try text("SELECT row_to_json(l)::text AS t FROM ledger l WHERE " + filter + " ORDER BY entry_id"),
            states: try text("SELECT state::text AS t FROM subscriptions WHERE " + filter + " ORDER BY subscription_key"),
            userMembership: try text("SELECT group_id || ' ' || view::text AS t FROM user_membership WHERE user_id = \("user-\(prefix)") ORDER BY group_id"),
            grants: try text("""
                SELECT concat_ws(' ', subscription_key, purchase_id, user_id, group_id, product_id, product_kind, is_trial, is_intro,
                                 promotional_offer_id, offer_code_ref_name, purchase_ms, expires_ms, cancellation_ms, cut_kind,
                                 granted_start_ms, granted_end_ms) AS t
                FROM grants
                """ + " WHERE " + filter + " ORDER BY subscription_key, purchase_id"))
    }

    /// The snapshot once two consecutive reads 1 s apart agree (the stages have gone quiet).
    private func stableSnapshot(_ db: PGConnection, prefix: String) throws -> Snapshot {
        var last = try snapshot(db, prefix: prefix)
        var stableSince = Date()
        try waitUntil("the \(prefix) projections are quiet", timeout: 30, interval: 0.25) {
            let now = try snapshot(db, prefix: prefix)
            if now != last {
                last = now
                stableSince = Date()
            }
            return Date().timeIntervalSince(stableSince) >= 1
        }
        return last
    }
}
