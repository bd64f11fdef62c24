@testable import Ingest
import Domain
import Foundation
import Kafka
import XCTest

/// The renderers over the shared model: the HTML page escapes every value that came from outside
/// (ids are chosen by strangers), the SVG carries each interval and cut, the terminal prints the
/// same lanes, and a raw record never shows a secret.
final class SupportRenderingTests: XCTestCase {
    typealias F = TimelineFixtures
    static let hostile = #"<img src=x onerror=alert(1)>"'&/../?#"#

    func testEscapeCoversEveryCharacterThatEndsTextOrAnAttribute() {
        XCTAssertEqual(HTML.escape(#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;")
        XCTAssertEqual(HTML.escape("plain ü ✂"), "plain ü ✂")
        let id = "a\(Self.hostile)"
        let html: HTML = "<p title=\"\(id)\">\(id)</p>"
        XCTAssertFalse(html.markup.contains("<img"), html.markup)
        XCTAssertEqual(html.markup.filter { $0 == "\"" }.count, 2, "only the attribute's own quotes remain")
        XCTAssertEqual(HTML.percentEncoded("a/b?c#d e%"), "a%2Fb%3Fc%23d%20e%25")
    }

    func testHostileUserIdIsEscapedEverywhereOnThePage() {
        let page = SupportPage.user(F.s5(user: Self.hostile)).markup
        XCTAssertFalse(page.contains("<img"), "the id never becomes markup")
        XCTAssertFalse(page.contains("<script"), "the page carries no script at all")
        XCTAssertTrue(page.contains("&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;/../?#"), "the id is shown, escaped")
        XCTAssertTrue(page.contains(#"value="&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;/../?#""#), "the search box keeps it, escaped")
        XCTAssertFalse(page.contains("http://") && !page.contains("http://www.w3.org/2000/svg"), "no outside asset")
    }

    func testSearchResultsLinkUsersByPercentEncodedPathAndEscapeTheQuery() {
        let page = SupportPage.searchResults(Self.hostile, [SupportPage.SearchMatch(userId: "a/b\"c", subscriptionKey: "k", how: "transaction id")]).markup
        XCTAssertTrue(page.contains(#"href="/support/users/a%2Fb%22c""#), page)
        XCTAssertFalse(page.contains("<img"))
        let none = SupportPage.searchResults(Self.hostile, []).markup
        XCTAssertTrue(none.contains("Nothing matches <code>&lt;img"), none)
    }

    func testTheSVGCarriesEachGrantedIntervalAndTheCutWithItsCause() {
        let svg = SupportPage.timelineSVG(F.s5()).markup
        XCTAssertTrue(svg.contains(#"class="granted""#) && svg.contains(#"data-start="2024-03-01T00:00:00Z" data-end="2024-03-11T00:00:00Z""#), svg)
        XCTAssertTrue(svg.contains(#"<g class="cut" data-at="2024-03-11T00:00:00Z" data-kind="refund">"#), svg)
        XCTAssertTrue(svg.contains("✂ refund at 2024-03-11T00:00:00Z: V1 notification · CANCEL · transaction tx-50 · Sandbox"), svg)
        XCTAssertTrue(svg.contains(##"href="#entry-2""##), "the cut links to its ledger line")
        let s3 = SupportPage.timelineSVG(F.s3()).markup
        XCTAssertTrue(s3.contains(#"data-product="vip.standard.3m""#) && s3.contains("renews as vip.standard.3m (crossgrade)"), s3)
        let s6 = SupportPage.timelineSVG(F.s6()).markup
        XCTAssertTrue(s6.contains(##"<g class="record" data-at="2024-04-05T00:00:00Z" data-kind="refund"><a href="#entry-3">"##), s6)
        XCTAssertTrue(s6.contains("○ refund at 2024-04-05T00:00:00Z: recorded, nothing deducted"), s6)
        XCTAssertFalse(s6.contains(#"class="cut""#), "a refund after the period cuts nothing")
        XCTAssertTrue(TerminalTimeline.render(F.s6(), width: 60)
            .contains("o refund at 2024-04-05T00:00:00Z: recorded, nothing deducted [entry 3]"))
        let retry = SupportPage.timelineSVG(F.graceThenRetry()).markup
        XCTAssertTrue(retry.contains(#"class="grace""#) && retry.contains(#"class="billing-retry""#), retry)
    }

    func testTheLedgerTableShowsEvidenceWithLinksToTheRawAndDecodedRecords() {
        let table = SupportPage.ledgerTable(F.s5()).markup
        XCTAssertTrue(table.contains(#"<tr id="entry-2" class="cut">"#), table)
        XCTAssertTrue(table.contains("cut (refund)"))
        XCTAssertTrue(table.contains("[2024-03-01T00:00:00Z, 2024-03-31T00:00:00Z) → [2024-03-01T00:00:00Z, 2024-03-11T00:00:00Z)"),
                      "before → after")
        XCTAssertTrue(table.contains("R3 c: refund by Apple support, cancellation_reason 0"))
        XCTAssertTrue(table.contains(#"href="/support/raw/storeledger.notifications.raw/1/4""#), table)
        XCTAssertTrue(table.contains(#"href="/support/raw/storeledger.transactions.decoded/2/104""#), table)
    }

    func testTheTerminalPrintsTheSameLanesAndNeverPassesControlCharacters() {
        let text = TerminalTimeline.render(F.s5(user: "u\u{1B}[31m-5"), width: 60)
        XCTAssertFalse(text.contains("\u{1B}"), "an escape sequence in stored text never reaches the terminal")
        XCTAssertTrue(text.contains("user u?[31m-5"), text)
        XCTAssertTrue(text.contains("✂ cut at 2024-03-11T00:00:00Z (refund): removed [2024-03-11T00:00:00Z, 2024-03-31T00:00:00Z); "
                                    + "V1 notification · CANCEL · transaction tx-50 · Sandbox [entry 2]"), text)
        let lane = try? XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix("vip") })
        let bar = String(lane?.split(separator: "|", omittingEmptySubsequences: false).dropFirst().first ?? "")
        XCTAssertEqual(bar.count, 60)
        // Granted, then the cut's instant, then what it removed, then nothing.
        XCTAssertNotNil(bar.range(of: "^·+█+✂x+·+$", options: .regularExpression), bar)
        XCTAssertTrue(text.contains("#2  2026-12-01 12:00:02+00  cut(refund)  vip  vip.standard.1m"), text)
        XCTAssertTrue(text.contains("raw storeledger.notifications.raw/1@4"), text)
    }

    func testARawV1BodyIsPrettyPrintedWithItsPasswordAndCredentialsRedacted() throws {
        let body = #"{"notification_type":"CANCEL","password":"s3cr3t-shared","unified_receipt":{"latest_receipt":"\#(String(repeating: "A", count: 5000))","environment":"Sandbox"}}"#
        let record = KafkaRecord(topic: Topic.notificationsRaw, partition: 0, offset: 9, key: nil, value: Array(body.utf8),
                                 headers: [KafkaHeader(name: "http.authorization", value: Array("Bearer abc.def".utf8)),
                                           KafkaHeader(name: "http.content-type", value: Array("application/json".utf8))],
                                 timestamp: F.t0)
        let view = RawRecordView(record)
        XCTAssertFalse(view.text.contains("s3cr3t-shared"))
        XCTAssertTrue(view.text.contains(#""password" : "«redacted»""#), view.text)
        XCTAssertTrue(view.text.contains(#""notification_type" : "CANCEL""#))
        XCTAssertTrue(view.text.contains("(5000 characters, shortened)"))
        XCTAssertEqual(view.headers, [RawRecordView.Header(name: "http.authorization", value: "«redacted»"),
                                      RawRecordView.Header(name: "http.content-type", value: "application/json")])
        let page = SupportPage.rawRecord(view).markup
        XCTAssertFalse(page.contains("s3cr3t") || page.contains("Bearer"))
    }

    func testSignedValuesAreDecodedInPlaceAndSecretsInsideThemRedacted() throws {
        func segment(_ object: [String: Any]) throws -> String {
            try JSONSerialization.data(withJSONObject: object).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let header = try segment(["alg": "ES256", "x5c": ["MIIB", "MIIC", "MIID"]])
        let inner = "\(header).\(try segment(["transactionId": "tx-77", "password": "hidden"])).c2ln"
        let outer = "\(header).\(try segment(["notificationType": "REFUND", "data": ["signedTransactionInfo": inner]])).c2ln"
        let record = KafkaRecord(topic: Topic.notificationsRaw, partition: 0, offset: 1, key: nil,
                                 value: Array(#"{"signedPayload":"\#(outer)"}"#.utf8), headers: [], timestamp: -1)
        let view = RawRecordView(record)
        XCTAssertTrue(view.text.contains(#""notificationType" : "REFUND""#), view.text)
        XCTAssertTrue(view.text.contains(#""transactionId" : "tx-77""#), "the nested JWS is decoded too")
        XCTAssertTrue(view.text.contains("3 certificate(s), not shown"))
        XCTAssertFalse(view.text.contains("hidden"))
        XCTAssertNil(view.timestamp)
    }

    /// Signed values nested deeper than Apple nests them are decoded three levels down and shown as
    /// text below: a record nesting them as deep as its size allows must not take the page's thread
    /// down its stack.
    func testSignedValuesAreDecodedAtMostThreeLevelsDeep() throws {
        func segment(_ object: [String: Any]) throws -> String {
            try JSONSerialization.data(withJSONObject: object).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let header = try segment(["alg": "ES256"])
        var jws = "\(header).\(try segment(["level": 6])).c2ln"
        for level in (1...5).reversed() { jws = "\(header).\(try segment(["level": level, "inner": jws])).c2ln" }
        let record = KafkaRecord(topic: Topic.notificationsRaw, partition: 0, offset: 1, key: nil,
                                 value: Array(#"{"signedPayload":"\#(jws)"}"#.utf8), headers: [], timestamp: -1)
        let text = RawRecordView(record).text
        for level in 1...3 { XCTAssertTrue(text.contains(#""level" : \#(level)"#), "level \(level) decoded") }
        XCTAssertFalse(text.contains(#""level" : 4"#), "level 4 stays a signed string")
        XCTAssertTrue(text.contains(#""inner" : "eyJ"#), "shown as the signed string it is: \(text)")
    }

    /// The stages' binary records (`TopicRecords`) are shown as the JSON they encode.
    func testBinaryPipelineRecordIsShownAsJSON() {
        let command = MembershipCommand(commandId: "c-88#link", subscriptionKey: "s-88",
                                        action: .linkUser(UserLink(userId: "user-88", via: UserLink.receiptUpload)), reason: "seen",
                                        cause: Cause(source: .appReceipt, eventId: "c-88"))
        let record = KafkaRecord(topic: Topic.commands, partition: 0, offset: 3, key: nil, value: TopicRecords.encode(command),
                                 headers: [], timestamp: -1)
        let view = RawRecordView(record)
        XCTAssertTrue(view.text.contains(#""userId" : "user-88""#), view.text)
        XCTAssertTrue(view.note.hasPrefix("JSON"), view.note)
    }

    func testBytesThatAreNotJSONAreShownAsEscapedText() {
        let record = KafkaRecord(topic: Topic.receiptsRaw, partition: 0, offset: 2, key: nil, value: Array("</pre><b>x".utf8),
                                 headers: [], timestamp: F.t0)
        let page = SupportPage.rawRecord(RawRecordView(record)).markup
        XCTAssertTrue(page.contains("&lt;/pre&gt;&lt;b&gt;x"), page)
        XCTAssertTrue(RawRecordView(record).note.hasPrefix("not JSON"))
    }
}
