@testable import Ingest
import Domain
import Store

/// Ledger transcripts as the membership stage writes them for DOMAIN.md's S3 and S5, plus a user in
/// grace then billing retry, built line by line so each test says exactly what the model is given.
enum TimelineFixtures {
    static let t0: Int64 = 1_709_251_200_000   // 2024-03-01T00:00:00Z
    static let day: Int64 = 86_400_000
    static let month: Int64 = 30 * day
    static let now: Int64 = t0 + 3 * month

    static func interval(_ start: Int64, _ end: Int64?) -> Interval { Interval(startMs: start, endMs: end) }

    static func cause(_ type: String?, transaction: String?, subtype: String? = nil, raw: Int64? = 7,
                      source: EventSource = .notificationV1) -> Cause {
        Cause(source: source, eventId: "event-\(transaction ?? "none")", notificationType: type, notificationSubtype: subtype,
              transactionId: transaction,
              rawPosition: raw.map { RecordPosition(topic: Topic.notificationsRaw, partition: 1, offset: $0) },
              decodedPosition: raw.map { RecordPosition(topic: Topic.decoded, partition: 2, offset: $0 + 100) }, environment: "Sandbox")
    }

    static func line(_ id: Int64, _ kind: LedgerEntry.Kind, user: String = "u-5", purchase: String? = "p-1", product: String? = "vip.standard.1m",
                     interval: Interval?, before: [Interval], after: [Interval], cutKind: String? = nil, reason: String,
                     cause: Cause) -> LedgerLine {
        LedgerLine(entryId: id, subscriptionKey: "otid-5@Sandbox", userId: user, kind: kind.rawValue, purchaseId: purchase,
                                   productId: product, group: kind == .link ? nil : "vip", interval: interval, amount: nil, before: before,
                                   after: after, balanceAfter: nil, cutKind: cutKind, reason: reason, commandId: "command-\(id)",
                                   cause: cause, environment: "Sandbox", createdAt: "2026-12-01 12:00:0\(id)+00")
    }

    /// S5: bought, refunded by Apple support ten days in (V1 CANCEL, reason 0), renewal off.
    static func s5(user: String = "u-5") -> MembershipTimeline {
        let refundAt = t0 + 10 * day
        let ledger = [
            line(1, .grant, user: user, interval: interval(t0, t0 + month), before: [], after: [interval(t0, t0 + month)],
                 reason: "granted purchase p-1", cause: cause("INITIAL_BUY", transaction: "tx-50", raw: 3)),
            line(2, .cut, user: user, interval: interval(refundAt, t0 + month), before: [interval(t0, t0 + month)],
                 after: [interval(t0, refundAt)], cutKind: "refund", reason: "R3 c: refund by Apple support, cancellation_reason 0",
                 cause: cause("CANCEL", transaction: "tx-50", raw: 4)),
            line(3, .renewal, user: user, purchase: nil, interval: nil, before: [interval(t0, refundAt)], after: [interval(t0, refundAt)],
                 reason: "auto-renew off", cause: cause("CANCEL", transaction: "tx-50", raw: 4)),
        ]
        let membership = GroupMembership(group: "vip", intervals: [interval(t0, refundAt)], currentProduct: "vip.standard.1m",
                                         autoRenewStatus: false, subscriptionKeys: ["otid-5@Sandbox"], environments: ["Sandbox"])
        return MembershipTimeline(userId: user, memberships: [membership], ledger: ledger.reversed(), nowMs: now)
    }

    /// S3: vipA bought, crossgraded to vipB one day later (V1 CANCEL with auto_renew_status true),
    /// and a pending change to the 3-month product at B's renewal.
    static func s3() -> MembershipTimeline {
        let switchAt = t0 + day
        let ledger = [
            line(1, .grant, user: "u-3", interval: interval(t0, t0 + month), before: [], after: [interval(t0, t0 + month)],
                 reason: "granted A", cause: cause("INITIAL_BUY", transaction: "tx-30")),
            line(2, .cut, user: "u-3", interval: interval(switchAt, t0 + month), before: [interval(t0, t0 + month)],
                 after: [interval(t0, switchAt)], cutKind: "crossgrade", reason: "R3 a: crossgrade", cause: cause("CANCEL", transaction: "tx-30")),
            line(3, .grant, user: "u-3", purchase: "p-2", product: "vip.plus.1m", interval: interval(switchAt, switchAt + month),
                 before: [interval(t0, switchAt)], after: [interval(t0, switchAt + month)], reason: "granted B",
                 cause: cause("CANCEL", transaction: "tx-31")),
        ]
        let membership = GroupMembership(group: "vip", intervals: [interval(t0, switchAt + month)], currentProduct: "vip.plus.1m",
                                         autoRenewStatus: true, pendingProduct: "vip.standard.3m", pendingChange: "crossgrade",
                                         environments: ["Sandbox"])
        return MembershipTimeline(userId: "u-3", memberships: [membership], ledger: ledger, nowMs: now)
    }

    /// S6: bought, renewed, then refunded five days after the first period ended (R11): the refund is
    /// recorded at its instant (an empty interval) and deducts nothing.
    static func s6() -> MembershipTimeline {
        let refundAt = t0 + month + 5 * day, granted = [interval(t0, t0 + 2 * month)]
        let ledger = [
            line(1, .grant, user: "u-6", interval: interval(t0, t0 + month), before: [], after: [interval(t0, t0 + month)],
                 reason: "granted A", cause: cause("INITIAL_BUY", transaction: "tx-60")),
            line(2, .grant, user: "u-6", purchase: "p-2", interval: interval(t0 + month, t0 + 2 * month), before: [interval(t0, t0 + month)],
                 after: granted, reason: "granted A2", cause: cause("DID_RENEW", transaction: "tx-61")),
            line(3, .record, user: "u-6", interval: interval(refundAt, refundAt), before: granted, after: granted, cutKind: "refund",
                 reason: "R3 c: refund; the cancellation is after the period ended: nothing deducted (R11)",
                 cause: cause("CANCEL", transaction: "tx-60")),
        ]
        let membership = GroupMembership(group: "vip", intervals: granted, currentProduct: "vip.standard.1m",
                                         autoRenewStatus: true, environments: ["Sandbox"])
        return MembershipTimeline(userId: "u-6", memberships: [membership], ledger: ledger, nowMs: now)
    }

    /// A renewal failed: Apple granted a grace period (a `grace|…` purchase), then billing retry.
    static func graceThenRetry() -> MembershipTimeline {
        let end = t0 + month, graceEnd = end + 6 * day
        let ledger = [
            line(1, .grant, user: "u-g", interval: interval(t0, end), before: [], after: [interval(t0, end)], reason: "granted",
                 cause: cause("INITIAL_BUY", transaction: "tx-g")),
            line(2, .grant, user: "u-g", purchase: "grace|\(end)", interval: interval(end, graceEnd), before: [interval(t0, end)],
                 after: [interval(t0, graceEnd)], reason: "grace period", cause: cause("DID_FAIL_TO_RENEW", transaction: "tx-g")),
        ]
        let membership = GroupMembership(group: "vip", intervals: [interval(t0, graceEnd)], currentProduct: "vip.standard.1m",
                                         autoRenewStatus: true, isInBillingRetry: true, gracePeriodExpiresMs: graceEnd)
        return MembershipTimeline(userId: "u-g", memberships: [membership], ledger: ledger, nowMs: now)
    }
}
