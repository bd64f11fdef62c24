@testable import Domain
import XCTest

/// R6 and S10: purchases find their account through the app's account id, survive a storefront
/// change, follow the configured transfer policy, and wait for their user without being lost.
final class UserMappingTests: XCTestCase {
    let user = "6f1c2a4e-0000-4000-8000-00000000abcd"

    func testAppAccountTokenLinksTheSubscriptionToTheUser() {
        var t = Transcript()
        let step = t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0, token: user.uppercased())]))
        XCTAssertEqual(step.entries.kinds, [.link, .grant])
        XCTAssertEqual(step.entries[0].userId, user, "tokens are lowercased, as Apple's libraries do")
        XCTAssertEqual(step.entries[1].userId, user)
        XCTAssertEqual(t.user(user).first?.intervals, [interval(t0, t0 + month)])
    }

    /// R17: only UUIDs compare in any case; an app whose account ids are not UUIDs keeps them exactly,
    /// as a receipt upload does, so the token and the upload name one user.
    func testATokenThatIsNoUUIDKeepsItsCaseLikeAnUpload() {
        var t = Transcript()
        t.feed(Apple.receipt(user: "Alice-42", otid: "s1", [Apple.period("A", otid: "s1", start: t0)], id: "upload"))
        let step = t.feed(Apple.v1("INITIAL_BUY", otid: "s2", [Apple.period("B", otid: "s2", start: t0 + day, token: "Alice-42")]))
        XCTAssertEqual(step.entries.first?.userId, "Alice-42")
        XCTAssertEqual(t.user("Alice-42").first?.subscriptionKeys, ["s1", "s2"])
        XCTAssertTrue(t.user("alice-42").isEmpty, "no second user")
    }

    func testS10StorefrontChangeNewOriginalTransactionIdSameUser() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "us", [Apple.period("A", otid: "us", start: t0, token: user)]))
        // The user moved to another country: Apple starts a new subscription (new original_transaction_id).
        let later = t0 + month + 3 * day
        let step = t.feed(Apple.v1("INITIAL_BUY", otid: "jp", [Apple.period("J", otid: "jp", start: later, token: user)]))
        XCTAssertEqual(step.entries.kinds, [.link, .grant])
        XCTAssertEqual(step.entries[1].before, [interval(t0, t0 + month)], "before/after are the user's, across subscriptions")
        XCTAssertEqual(step.entries[1].after, [interval(t0, t0 + month), interval(later, later + month)])
        let view = t.user(user)
        XCTAssertEqual(view.first?.subscriptionKeys, ["jp", "us"])
        XCTAssertEqual(view.first?.currentProduct, "vip.a.1m")
        XCTAssertEqual(view.first?.currentSubscriptionKey, "jp")
    }

    func testEventsBeforeTheLinkAreKeptAndAppliedWhenTheLinkArrives() {
        var t = Transcript()
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0)]))
        XCTAssertNil(t.state("s").userId)
        XCTAssertTrue(t.user("u1").isEmpty)
        let link = t.feed(Apple.receipt(user: "u1", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "upload"))
        XCTAssertEqual(link.entries.kinds, [.link])
        XCTAssertEqual(link.entries[0].before, [])
        XCTAssertEqual(link.entries[0].after, [interval(t0, t0 + month)])
        XCTAssertEqual(t.user("u1").first?.intervals, [interval(t0, t0 + month)])
    }

    func testTransferPolicyMoveMovesThePurchaseAndRecordsBothSides() {
        var t = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .move)))
        t.feed(Apple.receipt(user: "u1", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "1"))
        let claim = t.feed(Apple.receipt(user: "u2", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "2"))
        XCTAssertEqual(claim.entries.kinds, [.unlink, .link])
        XCTAssertEqual(claim.entries[0].userId, "u1")
        XCTAssertEqual(claim.entries[0].before, [interval(t0, t0 + month)])
        XCTAssertEqual(claim.entries[0].after, [])
        XCTAssertEqual(claim.entries[1].userId, "u2")
        XCTAssertEqual(claim.entries[1].after, [interval(t0, t0 + month)])
        XCTAssertTrue(t.user("u1").isEmpty)
        XCTAssertEqual(t.user("u2").first?.intervals, [interval(t0, t0 + month)])
    }

    /// What each account may read of the ownership lines: its own id, never the other's (user ids
    /// are personal data); support reads the reason whole.
    func testOwnershipReasonsHideTheOtherAccountFromEachSide() {
        var t = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .move)))
        t.feed(Apple.receipt(user: "alice@example.com", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "1"))
        let claim = t.feed(Apple.receipt(user: "bob (b2)", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "2"))
        let (unlink, link) = (claim.entries[0], claim.entries[1])
        XCTAssertTrue(unlink.reason.contains("alice@example.com") && unlink.reason.contains("bob (b2)"), unlink.reason)
        let forAlice = OwnershipReason.hidingOtherAccounts(unlink.reason, keeping: "alice@example.com")
        XCTAssertFalse(forAlice.contains("bob"), forAlice)
        XCTAssertTrue(forAlice.contains("moved from user alice@example.com to another account"), forAlice)
        let forBob = OwnershipReason.hidingOtherAccounts(link.reason, keeping: "bob (b2)")
        XCTAssertFalse(forBob.contains("alice"), forBob)
        XCTAssertTrue(forBob.contains("moved to user bob (b2) from another account"), forBob)

        var kept = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .keepFirst)))
        kept.feed(Apple.receipt(user: "u1", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "1"))
        let refused = kept.feed(Apple.receipt(user: "u2", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "2")).entries[0]
        let forU1 = OwnershipReason.hidingOtherAccounts(refused.reason, keeping: "u1")
        XCTAssertFalse(forU1.contains("u2"), forU1)
        XCTAssertTrue(forU1.contains("another account claimed this subscription of user u1: refused"), forU1)
        XCTAssertEqual(OwnershipReason.hidingOtherAccounts("DID_RENEW: renewal granted", keeping: "u1"), "DID_RENEW: renewal granted")
        // A token claim's cause names the token, which is the other account's id.
        let token = "V2 notification carries appAccountToken bob; moved from user alice to user bob: its claim"
        XCTAssertEqual(OwnershipReason.hidingOtherAccounts(token, keeping: "alice"),
                       "V2 notification carries another account's appAccountToken; moved from user alice to another account: its claim")
    }

    func testTransferPolicyKeepFirstRefusesAndRecordsTheClaim() {
        var t = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .keepFirst)))
        t.feed(Apple.receipt(user: "u1", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "1"))
        let claim = t.feed(Apple.receipt(user: "u2", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "2"))
        XCTAssertEqual(claim.entries.kinds, [.record])
        XCTAssertTrue(claim.entries[0].reason.contains("refused (transfer policy keep-first)"), claim.entries[0].reason)
        XCTAssertEqual(t.state("s").userId, "u1")
        XCTAssertTrue(t.feed(Apple.receipt(user: "u2", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "3")).entries.isEmpty)
    }

    /// keep-first keeps the earliest claim, whatever order the claims are processed in: A's token on
    /// its purchase (Apple's notification, retried late) against B's later receipt upload.
    func testTransferPolicyKeepFirstKeepsTheEarliestClaimInAnyOrder() {
        let purchase = Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0, token: user)])
        var upload = Apple.receipt(user: "u2", otid: "s", [Apple.period("A", otid: "s", start: t0)], id: "2")
        upload.receivedAtMs = t0 + 10 * day
        var inOrder = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .keepFirst)))
        inOrder.feed(purchase)
        let refused = inOrder.feed(upload)
        XCTAssertEqual(refused.entries.kinds, [.record])
        var late = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .keepFirst)))
        late.feed(upload)
        XCTAssertEqual(late.state("s").userId, "u2")
        let moved = late.feed(purchase)
        XCTAssertEqual(moved.entries.filter { $0.kind == .unlink || $0.kind == .link }.map(\.userId), ["u2", user])
        XCTAssertEqual(inOrder.state("s").userId, user)
        XCTAssertEqual(late.state("s").userId, user, "the earliest claim owns it in either order")
        XCTAssertEqual(late.user(user).first?.intervals, inOrder.user(user).first?.intervals)

        // An owner linked before claims were kept keeps it against any later claim.
        var legacy = Transcript(catalog: TestCatalog.with(AccountPolicy(transfer: .keepFirst)))
        legacy.feed(purchase)
        var unclaimed = legacy.state("s")
        unclaimed.claims = [:]
        legacy.book = MembershipBook([unclaimed])
        XCTAssertEqual(legacy.feed(upload).entries.kinds, [.record])
        XCTAssertEqual(legacy.state("s").userId, user)
    }

    func testTokenPolicyIgnoreNeverLinksThroughTheToken() {
        var t = Transcript(catalog: TestCatalog.with(AccountPolicy(appAccountToken: .ignore)))
        let step = t.feed(Apple.v1("INITIAL_BUY", otid: "s", [Apple.period("A", otid: "s", start: t0, token: user)]))
        XCTAssertEqual(step.entries.kinds, [.grant])
        XCTAssertNil(t.state("s").userId)
    }

    func testR8R10FinanceFlagsPerPurchaseForOfferEligibility() {
        var t = Transcript()
        var trial = Apple.period("T", otid: "s", start: t0, token: user)
        trial.isTrialPeriod = true
        var promo = Apple.period("P", otid: "s", start: t0 + month, token: user)
        promo.offerType = 2
        promo.offerIdentifier = "winback"
        var code = Apple.period("C", otid: "s", start: t0 + 2 * month, token: user)
        code.offerCodeRefName = "SPRING"
        var intro = Apple.period("I", otid: "s2", start: t0, token: user)
        intro.offerType = 1
        intro.offerDiscountType = "PAY_AS_YOU_GO"
        t.feed(Apple.v1("INITIAL_BUY", otid: "s", [trial, promo, code]))
        t.feed(Apple.v2("SUBSCRIBED", subtype: "INITIAL_BUY", uuid: "i", otid: "s2", [intro], signed: t0))
        let grants = t.book.states(ofUser: user).flatMap { $0.grants.values }.sorted { $0.transactionId < $1.transactionId }
        XCTAssertEqual(grants.map(\.transactionId), ["C", "I", "P", "T"])
        XCTAssertEqual(grants.map(\.finance.isTrial), [false, false, false, true])
        XCTAssertEqual(grants.map(\.finance.isIntro), [false, true, false, false])
        XCTAssertEqual(grants.map(\.finance.promotionalOfferId), [nil, nil, "winback", nil])
        XCTAssertEqual(grants.map(\.finance.offerCodeRefName), ["SPRING", nil, nil, nil])
        XCTAssertEqual(Set(grants.map(\.group)), ["vip"])
    }

    func testR7R12ReceiptWithoutOptionalClientFieldsGrantsLikeAnyOtherPath() {
        var t = Transcript()
        // An old app version's receipt: no web order id, no original purchase date, no intro flags.
        let bare = TransactionFacts(transactionId: "9", originalTransactionId: "9", productId: "vip.a.1m",
                                    purchaseDateMs: t0, expiresDateMs: t0 + month)
        let step = t.feed(Apple.receipt(user: "old-app-user", otid: "9", [bare], id: "old"))
        XCTAssertEqual(step.entries.kinds, [.link, .grant])
        XCTAssertEqual(t.user("old-app-user").first?.intervals, [interval(t0, t0 + month)])
    }
}
