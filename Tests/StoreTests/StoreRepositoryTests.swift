import Domain
import Foundation
import Postgres
import Store
import TestSupport
import XCTest

/// Contract: Store's typed functions against a real PostgreSQL with StoreLedger's schema. What one
/// repository writes, the readers read back field for field (every column of a bulk row distinct, so
/// a value written to another column shows); locks, sequences and generations behave as the stages
/// rely on.
final class StoreRepositoryTests: PGTestCase {
    private let cause = Cause(source: .notificationV2, eventId: "event-1", notificationType: "DID_RENEW", transactionId: "t-1")

    private func entry(_ kind: LedgerEntry.Kind, key: String = "s-1", user: String? = "u-1", amount: Int? = nil,
                       command: String = "c-1") -> LedgerEntry {
        LedgerEntry(kind: kind, subscriptionKey: key, userId: user, purchaseId: "p-1", productId: "vip.1m", group: "vip",
                    interval: Interval(startMs: 1_000, endMs: 2_000), amount: amount, before: [],
                    after: [Interval(startMs: 1_000, endMs: 2_000)], balanceAfter: amount.map { $0 * 2 }, cutKind: kind == .cut ? .refund : nil,
                    reason: "\(kind) for the test", commandId: command, cause: cause, environment: "Sandbox")
    }

    private func grant(_ purchaseId: String = "p-1") -> PurchaseGrant {
        PurchaseGrant(purchaseId: purchaseId, transactionId: "t-1", originalTransactionId: "o-1", productId: "vip.1m",
                      productKind: .autoRenewable, group: "vip", startMs: 1_000, endMs: 2_000,
                      cut: Cut(atMs: 1_500, kind: .refund), finance: FinanceFlags(isTrial: true, promotionalOfferId: "promo"),
                      environment: "Sandbox")
    }

    func testLedgerRowsReadBackFieldForField() throws {
        let db = try migratedDatabase()
        let store = MembershipStore(db)
        try db.transaction { db in
            let ids = try store.reserveEntryIds(2)
            XCTAssertEqual(ids, ids.sorted())
            try store.appendLedger([LedgerRow(id: ids[0], entry: entry(.grant), cause: [UInt8](try JSONEncoder().encode(cause))),
                                    LedgerRow(id: ids[1], entry: entry(.credit, amount: 7), cause: [UInt8](try JSONEncoder().encode(cause)))])
        }
        let lines = try MembershipQueries(db).ledger(subscription: "s-1", limit: 10)
        XCTAssertEqual(lines.map(\.kind), ["grant", "credit"])
        XCTAssertEqual(try MembershipQueries(db).ledger(subscription: "s-1", limit: 1).map(\.kind), ["credit"],
                       "a bounded read keeps the newest lines")
        let credit = try XCTUnwrap(lines.last)
        XCTAssertEqual(credit.subscriptionKey, "s-1")
        XCTAssertEqual(credit.userId, "u-1")
        XCTAssertEqual(credit.purchaseId, "p-1")
        XCTAssertEqual(credit.productId, "vip.1m")
        XCTAssertEqual(credit.group, "vip")
        XCTAssertEqual(credit.interval, Interval(startMs: 1_000, endMs: 2_000))
        XCTAssertEqual(credit.amount, 7)
        XCTAssertEqual(credit.balanceAfter, 14)
        XCTAssertEqual(credit.before, [])
        XCTAssertEqual(credit.after, [Interval(startMs: 1_000, endMs: 2_000)])
        XCTAssertEqual(credit.reason, "credit for the test")
        XCTAssertEqual(credit.commandId, "c-1")
        XCTAssertEqual(credit.cause, cause)
        XCTAssertEqual(credit.environment, "Sandbox")
        XCTAssertEqual(try MembershipQueries(db).ledger(ofUser: "u-1", order: .newestFirst, limit: 1).map(\.kind), ["credit"])
        XCTAssertEqual(try MembershipQueries(db).ledger(ofUser: "u-1", order: .oldestFirst, limit: 1).map(\.kind), ["grant"])
        XCTAssertEqual(try InspectionQueries(db).ledgerCount(), 2)
        XCTAssertGreaterThanOrEqual(try InspectionQueries(db).ledgerSequence(), 2)
        XCTAssertEqual(try InspectionQueries(db).ledgerKinds().map(\.kind).sorted(), ["credit", "grant"])
        XCTAssertEqual(try InspectionQueries(db).busiestUser(among: ["u-1", "u-2"]), "u-1")
        XCTAssertEqual(Set(try InspectionQueries(db).firstEntryTimes(of: ["s-1"], after: 0).keys), ["s-1"])
        XCTAssertEqual(try InspectionQueries(db).firstEntryTimes(of: ["s-1"], after: Int64(Int32.max)), [:])
    }

    /// Batches of `BulkRows.copyThreshold` rows or more go in with COPY, smaller ones with an insert:
    /// the rows read back the same either way, field for field (every column type, NULLs included).
    func testCopiedAndInsertedBatchesReadBackTheSame() throws {
        let db = try migratedDatabase()
        let kinds: [LedgerEntry.Kind] = [.grant, .credit, .cut, .record, .renewal]
        func entries(_ key: String) -> [LedgerEntry] {
            (0..<150).map { index in
                var entry = entry(kinds[index % kinds.count], key: key, user: index % 7 == 0 ? nil : "u-\(index % 3)",
                                  amount: index % 4 == 0 ? nil : index - 70, command: "c-\(index)")
                entry.reason = "reason \(index) żółw \"quoted\" \\ back"
                return entry
            }
        }
        func append(_ entries: [LedgerEntry], batch: Int) throws {
            for start in stride(from: 0, to: entries.count, by: batch) {
                try db.transaction { db in
                    let slice = Array(entries[start..<min(start + batch, entries.count)])
                    let ids = try MembershipStore(db).reserveEntryIds(slice.count)
                    try MembershipStore(db).appendLedger(zip(ids, slice).map { LedgerRow(id: $0, entry: $1, cause: $1.cause.json) })
                }
            }
        }
        try append(entries("s-copied"), batch: 150)
        try append(entries("s-inserted"), batch: 50)
        let copied = try MembershipQueries(db).ledger(subscription: "s-copied", limit: 500)
        let inserted = try MembershipQueries(db).ledger(subscription: "s-inserted", limit: 500)
        XCTAssertEqual(copied.count, 150)
        func comparable(_ line: LedgerLine) -> String {
            var line = line
            line.entryId = 0
            line.subscriptionKey = ""
            line.createdAt = ""
            return String(describing: line)
        }
        XCTAssertEqual(copied.map(comparable), inserted.map(comparable))
        XCTAssertEqual(copied.map(\.commandId), (0..<150).map { "c-\($0)" }, "in entry order")
        XCTAssertEqual(copied[1].amount, -69)
        XCTAssertNil(copied[0].amount)
        XCTAssertNil(copied[0].userId)

        // Dedupe's rows: purchases, their aliases and the inputs seen, copied in one batch.
        let purchases = (0..<120).map { index in
            KnownPurchase(purchaseId: "p-\(index)", facts: TransactionFacts(transactionId: "t-\(index)", originalTransactionId: "o-1",
                                                                         productId: "vip.1m", purchaseDateMs: 1_000 + Int64(index)),
                          aliases: ["t-\(index)", "t-\(index)b"])
        }
        let dedupe = DedupeStore(db)
        let seen = (0..<120).map { DedupeStore.SeenEvent(subscriptionKey: "s-d", eventKey: "uuid:\($0)") }
        try db.transaction { db in
            try DedupeStore(db).save(purchases.map { DedupeStore.PurchaseRow(subscriptionKey: "s-d", purchase: $0) })
            try DedupeStore(db).record(firstSeen: seen, repeated: [:])
        }
        let state = try dedupe.batchState(of: ["s-d"], inputs: seen)
        XCTAssertEqual(state.known["s-d"]?.sorted { $0.facts.purchaseDateMs < $1.facts.purchaseDateMs }, purchases)
        XCTAssertEqual(state.seen, Set(seen))
        XCTAssertEqual(try SupportQueries(db).subscriptions(transaction: "t-77b").map(\.subscriptionKey), ["s-d"], "aliases copied")

        // Membership's other rows, each table copied in one batch: states, grants, outbox rows, per-user views.
        let states = (0..<110).map { index in
            var state = SubscriptionState(subscriptionKey: "s-m\(index)", userId: "u-m\(index % 5)")
            state.grants["p-1"] = grant()
            state.granted["p-1"] = Interval(startMs: 1_000, endMs: 1_500 + Int64(index))
            return state
        }
        let memberships = (0..<110).map { GroupMembership(group: "g-\($0)", intervals: [Interval(startMs: 1_000, endMs: nil)],
                                                          currentProduct: "vip.1m", subscriptionKeys: ["s-m\($0)"]) }
        try db.transaction { db in
            let store = MembershipStore(db)
            try store.lockUsers((0..<5).map { "u-m\($0)" })
            try store.saveStates(states.map { SubscriptionRow($0, json: $0.json) })
            try store.saveGrants(states.map { GrantRow(subscriptionKey: $0.subscriptionKey, purchaseId: "p-1", userId: $0.userId,
                                                       grant: grant(), granted: $0.granted["p-1"]) })
            try store.appendOutbox(states.indices.map { OutboxRow(eventKey: "u-m\($0 % 5)", entryId: Int64($0), subscriptionKey: "s-m\($0)",
                                                                  eventType: "granted", payload: #"{"n":\#($0)}"#) })
            try store.replaceUserMembership(users: ["u-m0"], with: memberships.map {
                UserMembershipRow(userId: "u-m0", membership: $0, view: $0.json)
            })
        }
        XCTAssertEqual(try MembershipQueries(db).subscription("s-m42"), states[42])
        XCTAssertEqual(try MembershipQueries(db).subscriptions(ofUser: "u-m3").count, 22)
        XCTAssertEqual(try FinanceReads(db).transactions(fromMs: 0, toMs: 10_000).filter { $0.subscriptionKey.hasPrefix("s-m") }.count, 110)
        XCTAssertEqual(try OutboxStore(db).unordered(limit: 500).count, 110)
        XCTAssertEqual(try MembershipQueries(db).groupMemberships(ofUser: "u-m0").sorted { $0.group < $1.group },
                       memberships.sorted { $0.group < $1.group })

        // Rows the stage believes stored are updated, and written again if they went missing.
        try db.execute("DELETE FROM grants WHERE subscription_key = 's-m7'")
        var changed = states[7]
        changed.granted["p-1"] = Interval(startMs: 1_000, endMs: 9_999)
        try db.transaction { db in
            try MembershipStore(db).saveStates([SubscriptionRow(changed, json: changed.json, isStored: true)])
            try MembershipStore(db).saveGrants([GrantRow(subscriptionKey: "s-m7", purchaseId: "p-1", userId: changed.userId, grant: grant(),
                                                         granted: changed.granted["p-1"], isStored: true)])
        }
        XCTAssertEqual(try MembershipQueries(db).subscription("s-m7"), changed)
        XCTAssertEqual(try FinanceReads(db).transactions(fromMs: 0, toMs: 10_000).first { $0.subscriptionKey == "s-m7" }?.grantedEndMs, 9_999)
    }

    /// The stages retry a unique violation only on the keys they insert where their read found no row
    /// (`RacedKeys`): those constraints exist under these names, and a second insert of a seen input
    /// names its key's constraint.
    func testRacedKeysNameTheSchemasConstraints() throws {
        let db = try migratedDatabase()
        let names = Set(try db.query("SELECT conname FROM pg_constraint WHERE contype IN ('p', 'u')").map { try $0.string("conname") })
        XCTAssertEqual(RacedKeys.constraints.subtracting(names), [])
        let seen = DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:race")
        try db.transaction { try DedupeStore($0).record(firstSeen: [seen], repeated: [:]) }
        XCTAssertThrowsError(try db.transaction { try DedupeStore($0).record(firstSeen: [seen], repeated: [:]) }) { error in
            XCTAssertEqual((error as? PGError)?.sqlState, "23505")
            XCTAssertEqual((error as? PGError)?.constraint, "seen_events_pkey")
        }
    }

    /// The finance facts say which purchases are a family member's access (Apple's `inAppOwnershipType`
    /// in the purchase's merged facts): those are no sale.
    func testFinanceReadsAFamilyMembersAccessFromThePurchaseFacts() throws {
        let db = try migratedDatabase()
        try db.transaction { db in
            try MembershipStore(db).saveGrants(["p-shared", "p-bought", "p-unknown"].map {
                GrantRow(subscriptionKey: "s-1", purchaseId: $0, userId: "u-1", grant: grant($0), granted: nil)
            })
        }
        try db.execute("""
            INSERT INTO purchases (subscription_key, purchase_id, state) VALUES
                ('s-1', 'p-shared', '{"facts": {"inAppOwnershipType": "FAMILY_SHARED"}}'),
                ('s-1', 'p-bought', '{"facts": {"inAppOwnershipType": "PURCHASED"}}')
            """)
        let shared = try FinanceReads(db).transactions(fromMs: 0, toMs: 10_000).map { ($0.purchaseId, $0.isFamilyShared) }
        XCTAssertEqual(shared.map(\.0), ["p-bought", "p-shared", "p-unknown"])
        XCTAssertEqual(shared.map(\.1), [false, true, false], "only FAMILY_SHARED; no facts (an on-device receipt has no ownership field) is a sale")
    }

    func testStatesGrantsAndUserMembershipReadBack() throws {
        let db = try migratedDatabase()
        let store = MembershipStore(db)
        var state = SubscriptionState(subscriptionKey: "s-1", userId: "u-1")
        state.grants["p-1"] = grant()
        state.granted["p-1"] = Interval(startMs: 1_000, endMs: 1_500)
        let membership = GroupMembership(group: "vip", intervals: [Interval(startMs: 1_000, endMs: 1_500)], currentProduct: "vip.1m",
                                         subscriptionKeys: ["s-1"])
        try db.transaction { db in
            try store.lockUsers(["u-1"])
            try store.saveStates([SubscriptionRow(state, json: [UInt8](try JSONEncoder().encode(state)))])
            try store.saveGrants([GrantRow(subscriptionKey: "s-1", purchaseId: "p-1", userId: "u-1", grant: grant(), granted: state.granted["p-1"])])
            try store.replaceUserMembership(users: ["u-1"], with: [UserMembershipRow(userId: "u-1", membership: membership,
                                                                                      view: [UInt8](try JSONEncoder().encode(membership)))])
        }
        let queries = MembershipQueries(db)
        XCTAssertEqual(try queries.subscription("s-1"), state)
        XCTAssertNil(try queries.subscription("s-2"))
        XCTAssertEqual(try queries.subscriptions(ofUser: "u-1"), [state])
        XCTAssertEqual(try queries.subscriptionKeys(ofUser: "u-1"), ["s-1"])
        XCTAssertEqual(try queries.groupMemberships(ofUser: "u-1"), [membership])
        XCTAssertEqual(try db.transaction { try MembershipStore($0).lockStates(["s-1"]) }, [state])
        XCTAssertEqual(try store.states(ofUsers: ["u-1"], excluding: ["s-9"]), [state])
        XCTAssertEqual(try store.states(ofUsers: ["u-1"], excluding: ["s-1"]), [])

        // Every grant column where the finance view reads it (the facts from the state just written).
        let finance = try XCTUnwrap(try FinanceReads(db).transactions(fromMs: 0, toMs: 10_000).first)
        XCTAssertEqual(finance.subscriptionKey, "s-1")
        XCTAssertEqual(finance.purchaseId, "p-1")
        XCTAssertEqual(finance.productId, "vip.1m")
        XCTAssertEqual(finance.productKind, "auto-renewable")
        XCTAssertEqual(finance.group, "vip")
        XCTAssertEqual(finance.environment, "Sandbox")
        XCTAssertEqual(finance.purchaseMs, 1_000)
        XCTAssertEqual(finance.expiresMs, 2_000)
        XCTAssertEqual(finance.cancellationMs, 1_500)
        XCTAssertEqual(finance.cutKind, "refund")
        XCTAssertTrue(finance.isTrial)
        XCTAssertFalse(finance.isIntro)
        XCTAssertEqual(finance.promotionalOfferId, "promo")
        XCTAssertEqual(finance.grantedStartMs, 1_000)
        XCTAssertEqual(finance.grantedEndMs, 1_500)

        // The projection is replaced, not merged: a user with no groups left has no rows.
        try store.replaceUserMembership(users: ["u-1"], with: [])
        XCTAssertEqual(try queries.groupMemberships(ofUser: "u-1"), [])
    }

    func testDedupeMemoryAndWhoKnowsATransaction() throws {
        let db = try migratedDatabase()
        let facts = TransactionFacts(transactionId: "t-1", originalTransactionId: "o-1", productId: "vip.1m", purchaseDateMs: 1_000)
        let purchase = KnownPurchase(purchaseId: "p-1", facts: facts, aliases: ["t-1", "t-1b"])
        let dedupe = DedupeStore(db)
        try dedupe.save([DedupeStore.PurchaseRow(subscriptionKey: "s-1", purchase: purchase)])
        try dedupe.record(firstSeen: [DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:abc")],
                          repeated: [DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:abc"): 2])
        let asked = [("s-1", "uuid:abc"), ("s-1", "uuid:def"), ("s-2", "uuid:abc"), ("s-1", "uuid:abc")]
        let both = try dedupe.batchState(of: ["s-1", "s-2"], inputs: asked.map { DedupeStore.SeenEvent(subscriptionKey: $0.0, eventKey: $0.1) })
        XCTAssertEqual(both.known, ["s-1": [purchase]])
        XCTAssertEqual(both.seen, [DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:abc")], "exactly the pairs seen, once each")
        XCTAssertEqual(try dedupe.batchState(of: [], inputs: []).seen, [])
        try db.transaction { tx in
            let inBatch = try DedupeStore(tx).batchState(of: ["s-1", "s-2"], inputs: asked.map { DedupeStore.SeenEvent(subscriptionKey: $0.0, eventKey: $0.1) })
            XCTAssertEqual(inBatch.known, ["s-1": [purchase]], "inside a stage's transaction too")
            XCTAssertEqual(inBatch.seen, [DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:abc")])
        }
        let sightings = try dedupe.sightings(asked.map { DedupeStore.SeenEvent(subscriptionKey: $0.0, eventKey: $0.1) }
                                             + [DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:zzz")])
        XCTAssertEqual(sightings.map(\.eventKey), ["uuid:abc", "uuid:abc"], "only under the subscription it was seen for, as often as asked")
        XCTAssertEqual(sightings.first?.deliveries, 3, "Apple's retries are counted")
        XCTAssertFalse(sightings.first?.lastSeenAt.isEmpty ?? true)
        XCTAssertEqual(try dedupe.sightings([]), [])

        var state = SubscriptionState(subscriptionKey: "s-1", userId: "u-1")
        state.grants["p-1"] = grant()
        try MembershipStore(db).saveStates([SubscriptionRow(state, json: [UInt8](try JSONEncoder().encode(state)))])
        XCTAssertEqual(try MembershipQueries(db).owners(transaction: "t-1b"), ["u-1"], "any alias names the purchase (R1)")
        XCTAssertEqual(try SupportQueries(db).subscriptions(transaction: "t-1b"),
                       [SupportQueries.LinkedSubscription(subscriptionKey: "s-1", userId: "u-1")])
        XCTAssertEqual(try SupportQueries(db).subscriptions(keys: ["s-1", "s-9"]).map(\.subscriptionKey), ["s-1"])
        XCTAssertTrue(try SupportQueries(db).isKnownUser("u-1"))
        XCTAssertFalse(try SupportQueries(db).isKnownUser("u-2"))

        try dedupe.forget(["s-1"])
        XCTAssertEqual(try dedupe.batchState(of: ["s-1"], inputs: []).known, [:])
        XCTAssertEqual(try dedupe.sightings([DedupeStore.SeenEvent(subscriptionKey: "s-1", eventKey: "uuid:abc")]), [])
        XCTAssertEqual(try MembershipQueries(db).owners(transaction: "t-1b"), [])
    }

    func testTheRelayOrdersPublishesAndRecovers() throws {
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        try MembershipStore(db).appendOutbox([
            OutboxRow(eventKey: "u-1", entryId: 11, subscriptionKey: "s-1", eventType: "membership.granted", payload: "{\"a\":1}"),
            OutboxRow(eventKey: "u-2", entryId: 10, subscriptionKey: "s-2", eventType: "membership.revoked", payload: "{\"b\":2}"),
        ])
        let outbox = OutboxStore(db)
        XCTAssertTrue(try outbox.tryTakeRelayLock())
        XCTAssertFalse(try OutboxStore(try PGConnection(url: url)).tryTakeRelayLock(), "one relay at a time")
        let unordered = try outbox.unordered(limit: 10)
        XCTAssertEqual(unordered.map(\.entryId), [10, 11], "ledger entry order")
        let seqs = try outbox.nextRelaySeqs(2)
        try outbox.assign(zip(unordered, seqs).map { OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 3) })
        XCTAssertEqual(try outbox.unordered(limit: 10).count, 0)
        let ordered = try outbox.ordered(limit: 10)
        XCTAssertEqual(ordered.map(\.relaySeq), seqs)
        XCTAssertEqual(ordered.map(\.eventKey), ["u-2", "u-1"])
        XCTAssertEqual(ordered.map(\.eventType), ["membership.revoked", "membership.granted"])
        XCTAssertEqual(try ordered.map { String(decoding: try $0.payload.get(), as: UTF8.self) }, ["{\"b\":2}", "{\"a\":1}"])
        XCTAssertEqual(ordered.map(\.partition), [3, 3])
        try outbox.markPublished([seqs[0]])
        XCTAssertEqual(try outbox.ordered(limit: 10).map(\.relaySeq), [seqs[1]])
        XCTAssertEqual(try outbox.unpublishedCounts(), [3: 1], "what recovery looks for on the topic")
        try outbox.markPublished([seqs[1]])
        XCTAssertEqual(try outbox.ordered(limit: 10).count, 0)
        XCTAssertEqual(try outbox.unpublishedCounts(), [:])
    }

    /// Migration 14: publishing marks a row in place (HOT: no index holds published_at), the reads
    /// start from the published watermark, and a row marked out of order (recovery) is neither lost
    /// nor sent twice.
    func testPublishedMarksStayInPlaceAndTheWatermarkNeverPassesAnUnpublishedRow() throws {
        let db = try migratedDatabase()
        let outbox = OutboxStore(db)
        try MembershipStore(db).appendOutbox((1...12).map {
            OutboxRow(eventKey: "u-\($0)", entryId: Int64($0), subscriptionKey: "s-\($0)", eventType: "membership.granted", payload: "{\"n\":\($0)}")
        })
        let rows = try outbox.unordered(limit: 100)
        let seqs = try outbox.nextRelaySeqs(rows.count)
        try outbox.assign(zip(rows, seqs).map { OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 0) })
        func watermark() throws -> Int64 { try db.query("SELECT published_through FROM membership_relay_progress").first!.int64("published_through") }
        func hotUpdates() throws -> Int64 {
            _ = try db.query("SELECT pg_stat_force_next_flush()::text AS x")
            _ = try db.query("SELECT pg_stat_clear_snapshot()::text AS x")
            return try db.query("SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'membership_outbox'").first!.int64("n_tup_hot_upd")
        }
        XCTAssertEqual(try watermark(), seqs[0] - 1)

        let hotBefore = try hotUpdates()
        try outbox.markPublished([seqs[1], seqs[2]])
        XCTAssertEqual(try hotUpdates() - hotBefore, 2, "marked in place")
        XCTAssertEqual(try watermark(), seqs[0] - 1, "seqs[0] is still unpublished")
        XCTAssertEqual(try outbox.ordered(limit: 100).map(\.relaySeq), [seqs[0]] + seqs[3...])
        try outbox.markPublished(Array(seqs[0...4]))
        XCTAssertEqual(try watermark(), seqs[4])
        try outbox.markPublished(Array(seqs[5...7]))   // as recovery marks what it found, above the watermark
        XCTAssertEqual(try watermark(), seqs[7])
        XCTAssertEqual(try outbox.ordered(limit: 100).map(\.relaySeq), Array(seqs[8...]))
        try db.execute("DELETE FROM membership_relay_progress")
        XCTAssertEqual(try outbox.ordered(limit: 100).map(\.relaySeq), Array(seqs[8...]), "without the watermark: read from the start")
        try outbox.markPublished(Array(seqs[8...]))
        XCTAssertEqual(try watermark(), seqs.last)
        XCTAssertEqual(try outbox.ordered(limit: 100).count, 0)
        XCTAssertEqual(try db.query("SELECT count(*) AS n FROM membership_outbox WHERE published_at IS NULL").first!.int64("n"), 0)
    }

    /// Migration 14 on an outbox the previous release filled: the watermark stops below the first
    /// ordered row still unpublished, whatever was marked above it, and nothing waiting is skipped.
    func testMigrationFourteenPlacesTheWatermarkBelowTheFirstUnpublishedRow() throws {
        let db = try PGConnection(url: try server.createDatabase("s_\(UUID().uuidString.prefix(8).lowercased())"))
        try Migrator.migrate(db, Schema.migrations.filter { $0.version < 14 })
        // seq 1-3 published, 4 ordered and unpublished, 5 published by recovery, 6 ordered, one row unordered.
        for (entry, seq, published) in [(1, 1, true), (2, 2, true), (3, 3, true), (4, 4, false), (5, 5, true), (6, 6, false), (7, nil, false)] {
            try db.execute("""
                INSERT INTO membership_outbox (event_key, entry_id, subscription_key, event_type, payload, relay_seq, kafka_partition, published_at)
                VALUES (\("u-\(entry)"), \(Int64(entry)), 's', 'membership.granted', '{}', \(seq.map(Int64.init)), \(seq.map { _ in 0 }),
                        \(published ? "2026-01-01 00:00:00+00" : nil)::timestamptz)
                """)
        }
        XCTAssertEqual(try Store.migrate(db), Schema.migrations.map(\.version).filter { $0 >= 14 })
        XCTAssertEqual(try db.query("SELECT published_through FROM membership_relay_progress").first?.int64("published_through"), 3)
        let outbox = OutboxStore(db)
        XCTAssertEqual(try outbox.ordered(limit: 10).map(\.relaySeq), [4, 6])
        XCTAssertEqual(try outbox.unordered(limit: 10).map(\.entryId), [7])
        try outbox.markPublished([4, 6])
        XCTAssertEqual(try db.query("SELECT published_through FROM membership_relay_progress").first?.int64("published_through"), 6)
    }

    /// Migration 15 on documents the previous release wrote as jsonb: purchases and grant facts come through as
    /// json with the same content, the ledger's and views' documents stay jsonb, the finance view still reads
    /// its fields, and the previous release's jsonb writes still land.
    func testMigrationFifteenKeepsTheDocumentsAndTheFinanceView() throws {
        let db = try PGConnection(url: try server.createDatabase("s_\(UUID().uuidString.prefix(8).lowercased())"))
        try Migrator.migrate(db, Schema.migrations.filter { $0.version < 15 })
        func previousRelease(_ suffix: String) throws {
            let (purchase, transaction, command, user) = ("p" + suffix, "t" + suffix, "c" + suffix, "u" + suffix)
            try db.execute("""
                INSERT INTO purchases (subscription_key, purchase_id, state)
                VALUES ('s', \(purchase), '{"facts": {"price": 9990, "currency": "EUR", "transactionReason": "PURCHASE"}}'::jsonb)
                """)
            try db.execute("""
                INSERT INTO grants (subscription_key, purchase_id, group_id, product_id, transaction_id, grant_facts, is_trial, is_intro)
                VALUES ('s', \(purchase), 'vip', 'vip.1m', \(transaction), '{"durationDays": 30}'::jsonb, false, false)
                """)
            try db.execute("""
                INSERT INTO ledger (subscription_key, kind, before_intervals, after_intervals, reason, command_id, cause)
                VALUES ('s', 'grant', '[]'::jsonb, '[{"startMs": 1, "endMs": 2}]'::jsonb, 'r', \(command),
                        '{"source": "notification-v2", "eventId": "e"}'::jsonb)
                """)
            try db.execute("""
                INSERT INTO user_membership (user_id, group_id, intervals, view) VALUES (\(user), 'vip', '[]'::jsonb, '{"group": "vip"}'::jsonb)
                """)
        }
        try previousRelease("1")
        XCTAssertEqual(try Store.migrate(db), [15, 16])

        let types = try db.query("""
            SELECT table_name || '.' || column_name AS c, data_type AS t FROM information_schema.columns
            WHERE table_name IN ('ledger', 'purchases', 'grants', 'user_membership') AND data_type IN ('json', 'jsonb') ORDER BY 1
            """).map { "\(try $0.string("c")) \(try $0.string("t"))" }
        XCTAssertEqual(types, ["grants.grant_facts json", "ledger.after_intervals jsonb", "ledger.before_intervals jsonb", "ledger.cause jsonb",
                               "purchases.state json", "user_membership.intervals jsonb", "user_membership.view jsonb"])
        try previousRelease("2")
        let finance = try db.query("""
            SELECT purchase_id, price_milli, currency, transaction_reason, duration_days FROM finance_transactions ORDER BY purchase_id
            """).map { "\(try $0.string("purchase_id")) \(try $0.int64("price_milli")) \(try $0.string("currency")) " +
                       "\(try $0.string("transaction_reason")) \(try $0.int("duration_days"))" }
        XCTAssertEqual(finance, ["p1 9990 EUR PURCHASE 30", "p2 9990 EUR PURCHASE 30"])
        let causes = try db.query("SELECT cause->>'source' AS s, after_intervals->0->>'endMs' AS e FROM ledger ORDER BY command_id")
            .map { "\(try $0.string("s")) \(try $0.string("e"))" }
        XCTAssertEqual(causes, ["notification-v2 2", "notification-v2 2"])
        XCTAssertEqual(try db.query("SELECT count(*) AS n FROM user_membership WHERE view->>'group' = 'vip'").first?.int64("n"), 2)
    }

    func testFenceClaimsBumpTheGeneration() throws {
        let db = try migratedDatabase()
        let fences = FenceStore(db)
        let partitions = [(topic: "t", partition: Int32(0)), (topic: "t", partition: Int32(1))]
        XCTAssertEqual(try fences.claim(group: "g", owner: "a", partitions: partitions).map(\.generation), [1, 1])
        XCTAssertEqual(try fences.claim(group: "g", owner: "b", partitions: [partitions[1]]).map(\.generation), [2])
        XCTAssertEqual(try fences.claim(group: "other", owner: "b", partitions: [partitions[1]]).map(\.generation), [1])
        let current = try db.transaction { try FenceStore($0).currentGenerations(group: "g", partitions: partitions) }
        XCTAssertEqual(current.map(\.partition), [0, 1])
        XCTAssertEqual(current.map(\.generation), [1, 2])
    }

    func testReplayHorizonsAreRecordedAndMoved() throws {
        let db = try migratedDatabase()
        let replay = ReplayStore(db)
        let first = ReplayStore.Horizon(subscriptionKey: "s-1", topic: "unique", partitionHighs: [5, 0, 9])
        try replay.save([first, ReplayStore.Horizon(subscriptionKey: "s-2", topic: "unique", partitionHighs: [1])], stage: "dedupe", codeVersion: "v1")
        XCTAssertEqual(try replay.horizons(of: ["s-1"], topics: ["unique", "commands"]), [first])
        let moved = ReplayStore.Horizon(subscriptionKey: "s-1", topic: "unique", partitionHighs: [6, 1, 9])
        try replay.save([moved], stage: "classify", codeVersion: "v2")
        XCTAssertEqual(try replay.horizons(of: ["s-1"], topics: ["unique"]), [moved])
        XCTAssertEqual(try replay.horizons(of: ["s-1"], topics: ["commands"]), [])
        XCTAssertEqual(try db.query("SELECT stage, code_version FROM replay_horizons WHERE subscription_key = 's-1'").first?.string("code_version"), "v2")
    }

    func testMigrationNineDroppedTheUnreadProjection() throws {
        let db = try migratedDatabase()
        let tables = try db.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").map { try $0.string("tablename") }
        XCTAssertFalse(tables.contains("membership"))
        XCTAssertTrue(tables.contains("user_membership"))
        let columns = try db.query("""
            SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE table_schema = 'public'
            """).map { try $0.string("c") }
        XCTAssertFalse(columns.contains("grants.original_transaction_id"))
        XCTAssertFalse(columns.contains("subscriptions.environment"))
        XCTAssertEqual(try Store.migrate(db), [], "migrating again applies nothing")
    }

    /// Migration 10: states move from jsonb to json. Rows written before it read back unchanged,
    /// states written after it are stored byte for byte as the writer made them, and the churn
    /// report still reads the renewal's members.
    func testMigrationTenKeepsStatesAndStoresThemAsWritten() throws {
        let db = try PGConnection(url: try server.createDatabase("s_\(UUID().uuidString.prefix(8).lowercased())"))
        try Migrator.migrate(db, Schema.migrations.filter { $0.version < 10 })
        var old = SubscriptionState(subscriptionKey: "s-old", userId: "u-1")
        old.grants["p-1"] = grant()
        old.renewal = RenewalState(autoRenewStatus: false, productId: "vip.1m", autoRenewProductId: "vip.1y", isInBillingRetry: true,
                                   gracePeriodExpiresMs: nil, asOfMs: 1_200, expirationIntent: "2")
        try db.execute("INSERT INTO users (user_id) VALUES ('u-1')")
        try db.execute("""
            INSERT INTO subscriptions (subscription_key, user_id, state) VALUES ('s-old', 'u-1', \(PGJSON(String(decoding: old.json, as: UTF8.self))))
            """)
        XCTAssertEqual(try db.query("SELECT data_type FROM information_schema.columns WHERE table_name = 'subscriptions' AND column_name = 'state'")
                        .first?.string("data_type"), "jsonb")

        XCTAssertEqual(try Store.migrate(db), Schema.migrations.map(\.version).filter { $0 >= 10 })
        XCTAssertEqual(try db.query("SELECT data_type FROM information_schema.columns WHERE table_name = 'subscriptions' AND column_name = 'state'")
                        .first?.string("data_type"), "json")
        XCTAssertEqual(try MembershipQueries(db).subscription("s-old"), old, "a state written as jsonb reads back the same")

        var new = SubscriptionState(subscriptionKey: "s-new", userId: "u-1")
        new.grants["p-2"] = grant("p-2")
        new.renewal = RenewalState(autoRenewStatus: true, productId: "vip.1m", autoRenewProductId: "vip.1m", isInBillingRetry: false,
                                   gracePeriodExpiresMs: nil, asOfMs: 1_300)
        try db.transaction { try MembershipStore($0).saveStates([SubscriptionRow(new, json: new.json)]) }
        XCTAssertEqual(try db.query("SELECT state::text AS t FROM subscriptions WHERE subscription_key = 's-new'").first?.string("t"),
                       String(decoding: new.json, as: UTF8.self), "stored as written: no parse, no reprint")
        XCTAssertEqual(try db.transaction { try MembershipStore($0).lockStates(["s-new", "s-old"]) }, [new, old])

        XCTAssertEqual(try FinanceReads(db).renewalStandings(["s-old", "s-new", "s-none"]), [
            "s-old": RenewalStanding(autoRenewStatus: false, isInBillingRetry: true, expirationIntent: "2"),
            "s-new": RenewalStanding(autoRenewStatus: true, isInBillingRetry: false, expirationIntent: nil),
        ])
        XCTAssertThrowsError(try db.transaction {
            try MembershipStore($0).saveStates([SubscriptionRow(new, json: Array(#"{"subscriptionKey": "#.utf8))])
        }, "the server still refuses a document that is not JSON")
    }

    /// Migration 12: the entries written before it get the change identity the membership stage writes
    /// (the migration's SQL and `LedgerRow.changeKey` agree byte for byte, nil and empty apart,
    /// non-ASCII text included), and the schema still refuses a change written twice by one command, an
    /// old entry against a new one.
    func testMigrationTwelveGivesEveryEntryTheIdentityTheStageWrites() throws {
        let db = try PGConnection(url: try server.createDatabase("s_\(UUID().uuidString.prefix(8).lowercased())"))
        try Migrator.migrate(db, Schema.migrations.filter { $0.version < 12 })
        var sparse = entry(.record, user: nil, command: "c-2")
        (sparse.purchaseId, sparse.group, sparse.interval, sparse.cutKind) = (nil, nil, nil, nil)
        var empty = sparse
        (empty.purchaseId, empty.group) = ("", "")
        var open = entry(.cut, amount: -3, command: "c-3")
        open.interval = Interval(startMs: 1_000, endMs: nil)
        open.reason = "remboursé – 退款 | 5:x"
        let entries = [entry(.grant), entry(.credit, amount: 7), sparse, empty, open]
        for (index, entry) in entries.enumerated() {
            try db.execute("""
                INSERT INTO ledger (subscription_key, entry_id, kind, purchase_id, group_id, interval_start_ms, interval_end_ms, amount,
                                    before_intervals, after_intervals, reason, command_id, cause, cut_kind)
                VALUES (\(entry.subscriptionKey), \(Int64(index + 1)), \(entry.kind.rawValue), \(entry.purchaseId), \(entry.group),
                        \(entry.interval?.startMs), \(entry.interval?.endMs), \(entry.amount), '[]', '[]', \(entry.reason), \(entry.commandId),
                        '{}', \(entry.cutKind?.rawValue))
                """)
        }
        XCTAssertEqual(try Store.migrate(db), Schema.migrations.map(\.version).filter { $0 >= 12 })
        let keys = try db.query("SELECT change_key FROM ledger ORDER BY entry_id").map { try $0.bytes("change_key") }
        let expected = entries.map { LedgerRow(id: 0, entry: $0, cause: []).changeKey }
        XCTAssertEqual(keys, expected)
        XCTAssertEqual(Set(expected).count, entries.count, "nil and empty, amount and none: different changes")
        XCTAssertEqual(expected.map(\.count), Array(repeating: 32, count: entries.count))

        for (index, entry) in entries.enumerated() {
            XCTAssertThrowsError(try db.transaction { try MembershipStore($0).appendLedger([LedgerRow(id: Int64(100 + index), entry: entry, cause: Array("{}".utf8))]) },
                                 "entry \(index) again") { error in
                XCTAssertEqual((error as? PGError)?.sqlState, "23505", "\(error)")
            }
        }
        var fixed = open
        fixed.reason = "replay after a fix (version 2): " + open.reason
        try db.transaction { try MembershipStore($0).appendLedger([LedgerRow(id: 200, entry: fixed, cause: Array("{}".utf8))]) }
        XCTAssertEqual(try db.query("SELECT indexname FROM pg_indexes WHERE tablename = 'ledger' ORDER BY indexname").map { try $0.string("indexname") },
                       ["ledger_change", "ledger_pkey", "ledger_user"])
    }

    /// Migration 13: a transaction id is found across subscriptions through an index, not by reading every
    /// alias (the offer endpoint asks on every signature request).
    func testTransactionIdsAreFoundAcrossSubscriptionsThroughAnIndex() throws {
        let db = try migratedDatabase()
        try db.execute("""
            INSERT INTO transaction_aliases (subscription_key, transaction_id, purchase_id)
            SELECT 's-' || (i % 5000), 't-' || i, 'p-' || i FROM generate_series(1, 20000) AS i
            """)
        try db.execute("ANALYZE transaction_aliases")
        let plan = try db.query("""
            EXPLAIN SELECT DISTINCT s.user_id FROM transaction_aliases a JOIN subscriptions s ON s.subscription_key = a.subscription_key
            WHERE a.transaction_id = 't-42' AND s.user_id IS NOT NULL
            """).map { try $0.string("QUERY PLAN") }.joined(separator: "\n")
        XCTAssertTrue(plan.contains("transaction_aliases_transaction"), plan)
        XCTAssertFalse(plan.contains("Seq Scan on transaction_aliases"), plan)
        try db.execute("INSERT INTO users (user_id) VALUES ('u-1')")
        try db.execute("INSERT INTO subscriptions (subscription_key, user_id, state) VALUES ('s-42', 'u-1', '{}')")
        XCTAssertEqual(try MembershipQueries(db).owners(transaction: "t-42"), ["u-1"])
        XCTAssertEqual(try MembershipQueries(db).owners(transaction: "t-43"), [])
    }

    /// The stages' lookups by lists of keys stay on the index while a table has no statistics yet (the
    /// first minute of a deployment, before autovacuum's first analyze): a stage's session prices out
    /// sequential scans and parallel plans (`PGOptions.keyedAccess`). Without it the planner expects a
    /// list of keys to match a third of the table and reads all of it, which the control plan shows.
    func testKeyLookupsStayOnTheIndexBeforeATableHasStatistics() throws {
        let url = try migratedDatabaseURL()
        let db = try PGConnection(url: url)
        let tables = ["purchases", "seen_events", "subscriptions", "user_membership"]
        for table in tables { try db.execute(SQL(unsafeSQL: "ALTER TABLE \(table) SET (autovacuum_enabled = false)")) }
        let padding = String(repeating: "x", count: 600)
        try db.execute(SQL(unsafeSQL: """
            INSERT INTO purchases (subscription_key, purchase_id, state)
            SELECT 's-' || (i / 4), 'p-' || i, jsonb_build_object('pad', '\(padding)') FROM generate_series(1, 30000) AS i
            """))
        try db.execute("INSERT INTO seen_events (subscription_key, event_key) SELECT 's-' || (i / 4), 'e-' || i FROM generate_series(1, 30000) AS i")
        try db.execute(SQL(unsafeSQL: """
            INSERT INTO subscriptions (subscription_key, user_id, state)
            SELECT 's-' || i, 'u-' || (i / 2), jsonb_build_object('pad', '\(padding)') FROM generate_series(1, 30000) AS i
            """))
        try db.execute(SQL(unsafeSQL: """
            INSERT INTO user_membership (user_id, group_id, intervals, expires_ms, view)
            SELECT 'u-' || (i / 2), 'g-' || i, '[]', 0, jsonb_build_object('pad', '\(padding)') FROM generate_series(1, 30000) AS i
            """))

        // The stages' own calls, twice each (the second runs prepared), for keys the tables do not hold.
        func lookups(_ connection: PGConnection) throws {
            let keys = (40_000..<40_080).map { "s-\($0)" }, users = (40_000..<40_080).map { "u-\($0)" }
            for _ in 0..<2 {
                let dedupe = try DedupeStore(connection).batchState(
                    of: keys, inputs: keys.map { DedupeStore.SeenEvent(subscriptionKey: $0, eventKey: "e-\($0)") })
                XCTAssertTrue(dedupe.known.isEmpty)
                XCTAssertTrue(dedupe.seen.isEmpty)
                XCTAssertTrue(try MembershipStore(connection).states(ofUsers: users, excluding: keys).isEmpty)
                try MembershipStore(connection).replaceUserMembership(users: users, with: [])
                // Two key lists, as dedupe asked before it asked for pairs: the one lookup here that the
                // planner, left alone, answers by reading the table.
                XCTAssertTrue(try connection.query("""
                    SELECT event_key FROM seen_events WHERE subscription_key = ANY(\(keys)) AND event_key = ANY(\(keys.map { "e-\($0)" }))
                    """).isEmpty)
            }
        }
        /// Sequential scans of these tables within `body`'s transaction.
        func sequentialScans(_ connection: PGConnection, _ body: (PGConnection) throws -> Void) throws -> Int64 {
            try connection.transaction { db in
                func scans() throws -> Int64 {
                    try db.query("SELECT coalesce(sum(seq_scan), 0)::bigint AS n FROM pg_stat_xact_user_tables WHERE relname = ANY(\(tables))")
                        .first!.int64("n")
                }
                let start = try scans()
                try body(db)
                return try scans() - start
            }
        }
        XCTAssertEqual(try sequentialScans(try PGConnection(url: url, options: .keyed), lookups), 0)
        XCTAssertGreaterThan(try sequentialScans(db, lookups), 0, "the control: without keyed access the lookups read tables whole")
    }

    /// The identity's encoding: every field counts, and no text can pass for two fields.
    func testChangeKeysTellApartFieldsThatReadAlike() {
        func key(_ command: String, _ kind: String = "grant", purchase: String? = "p", group: String? = "g", start: Int64? = 1, end: Int64? = 2,
                 amount: Int? = nil, cut: String? = nil, reason: String = "r") -> [UInt8] {
            LedgerRow.changeKey(commandId: command, kind: kind, purchaseId: purchase, group: group, startMs: start, endMs: end,
                                amount: amount, cutKind: cut, reason: reason)
        }
        let keys = [key("c"), key("c|5:grant"), key("c", "grant|1:p"), key("c", purchase: nil), key("c", purchase: ""), key("c", purchase: "-"),
                    key("c", group: nil), key("c", start: nil), key("c", end: nil), key("c", start: 2, end: 1), key("c", amount: 0),
                    key("c", amount: -1), key("c", cut: "refund"), key("c", reason: "r "), key("c", reason: "R")]
        XCTAssertEqual(Set(keys).count, keys.count)
        XCTAssertEqual(key("c"), key("c"), "the same change, the same key")
    }

    /// Migration 11: the relay's two updates of an outbox row (its order, then published) leave the
    /// row on its page, where PostgreSQL logs only the changed bytes; states written afterwards are
    /// compressed with lz4 where the server has it.
    func testMigrationElevenLeavesRoomForUpdatesInPlaceAndCompressesStatesWithLZ4() throws {
        let db = try migratedDatabase()
        let payload = String(repeating: "{\"membership\":\"granted\"}", count: 50)
        let rows = (1...12).map { OutboxRow(eventKey: "u-\($0)", entryId: Int64($0), subscriptionKey: "s-\($0)", eventType: "membership.granted",
                                           payload: payload + String($0)) }
        try MembershipStore(db).appendOutbox(rows)
        func pages() throws -> [Int64: String] {
            Dictionary(uniqueKeysWithValues: try db.query("SELECT entry_id, (ctid::text::point)[0]::text AS page FROM membership_outbox")
                .map { (try $0.int64("entry_id"), try $0.string("page")) })
        }
        let before = try pages()
        XCTAssertGreaterThan(Set(before.values).count, 2, "half of each page stays free: twelve 1.3 kB rows span several pages")
        let outbox = OutboxStore(db)
        let unordered = try outbox.unordered(limit: 20)
        let seqs = try outbox.nextRelaySeqs(unordered.count)
        try outbox.assign(zip(unordered, seqs).map { OutboxStore.Assignment(eventKey: $0.eventKey, entryId: $0.entryId, relaySeq: $1, partition: 0) })
        XCTAssertEqual(try pages(), before, "ordered in place")
        try outbox.markPublished(seqs)
        XCTAssertEqual(try pages(), before, "published in place")
        XCTAssertEqual(try outbox.ordered(limit: 20).count, 0)
        let fillfactors = Dictionary(uniqueKeysWithValues: try db.query("""
            SELECT relname, array_to_string(reloptions, ',') AS o FROM pg_class
            WHERE relname IN ('membership_outbox', 'purchases', 'subscriptions', 'grants')
            """).map { (try $0.string("relname"), try $0.string("o")) })
        XCTAssertEqual(fillfactors, ["membership_outbox": "fillfactor=50", "purchases": "fillfactor=80", "subscriptions": "fillfactor=80",
                                     "grants": "fillfactor=85"], "room for updates in place where rows are rewritten")

        let lz4 = (try? db.execute("SET default_toast_compression = lz4")) != nil
        try XCTSkipUnless(lz4, "this PostgreSQL is built without lz4: states stay with pglz")
        try db.execute("RESET default_toast_compression")
        var state = SubscriptionState(subscriptionKey: "s-lz4", userId: "u-1")
        for index in 0..<20 { state.grants["p-\(index)"] = grant("p-\(index)") }
        try db.execute("INSERT INTO users (user_id) VALUES ('u-1')")
        try db.transaction { try MembershipStore($0).saveStates([SubscriptionRow(state, json: state.json)]) }
        XCTAssertGreaterThan(state.json.count, 2_048, "large enough to be compressed")
        XCTAssertEqual(try db.query("SELECT pg_column_compression(state) AS c FROM subscriptions WHERE subscription_key = 's-lz4'").first?.string("c"), "lz4")
        XCTAssertEqual(try db.transaction { try MembershipStore($0).lockStates(["s-lz4"]) }, [state])
    }

    func testWaitingStatementsAndDeadlocksAreReadable() throws {
        let db = try migratedDatabase()
        XCTAssertEqual(try InspectionQueries(db).statementsWaitingForLocks(), [])
        XCTAssertGreaterThanOrEqual(try InspectionQueries(db).deadlocks(), 0)
        XCTAssertNotNil(try InspectionQueries(db).backendProcessId())
    }

    func testSupportActionsReadBackNewestFirst() throws {
        let db = try migratedDatabase()
        try ServerAPIStore.recordSupportAction(target: "s-1", kind: "extend", admin: "ann", reason: "outage", request: #"{"days":3}"#,
                                               outcome: #"{"ok":true}"#, db: db)
        try ServerAPIStore.recordSupportAction(target: "product:vip@Sandbox", kind: "mass-extend", admin: "bob", reason: "apology",
                                               request: #"{"days":1}"#, outcome: #"{"ok":false}"#, db: db)
        let all = try ServerAPIStore.supportActions(target: nil, limit: 10, db: db)
        XCTAssertEqual(all.map(\.admin), ["bob", "ann"])
        let one = try XCTUnwrap(try ServerAPIStore.supportActions(target: "s-1", limit: 10, db: db).first)
        XCTAssertEqual(one.kind, "extend")
        XCTAssertEqual(one.reason, "outage")
        XCTAssertEqual(one.request, #"{"days": 3}"#, "jsonb's text form")
        XCTAssertEqual(one.outcome, #"{"ok": true}"#)
        XCTAssertEqual(try ServerAPIStore.supportActions(target: nil, limit: 1, db: db).count, 1)
    }
}
