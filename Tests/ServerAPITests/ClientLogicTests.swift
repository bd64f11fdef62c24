@testable import AppStoreServerAPI
import AppleDecoding
import Crypto
import Foundation
import Signer
import Synchronization
import XCTest

/// Contract: the client's pure pieces — Retry-After parsing, the retry/backoff decision, the
/// pagination guard, the status/error-code classification, path-id checks — and the signer's
/// token minting (header, claims, lifetime bound, signature) behave as Apple's documentation
/// and app-store-server-library say, without any server.
final class ClientLogicTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_764_000_000)

    func testRetryAfterReadsSecondsAndHTTPDatesAndIgnoresNonsense() {
        XCTAssertEqual(RetryAfter.seconds("7", now: now), 7)
        XCTAssertEqual(RetryAfter.seconds(" 0 ", now: now), 0)
        // 1_764_000_000 is Mon, 24 Nov 2025 16:00:00 GMT.
        XCTAssertEqual(RetryAfter.seconds("Mon, 24 Nov 2025 16:00:30 GMT", now: now), 30)
        XCTAssertEqual(RetryAfter.seconds("Mon, 24 Nov 2025 15:00:00 GMT", now: now), 0, "a date in the past means now")
        XCTAssertNil(RetryAfter.seconds("-5", now: now))
        XCTAssertNil(RetryAfter.seconds("99999999999999999999999", now: now))
        XCTAssertNil(RetryAfter.seconds("86401", now: now), "over a day is absurd")
        XCTAssertNil(RetryAfter.seconds("soon", now: now))
        XCTAssertNil(RetryAfter.seconds(nil, now: now))
    }

    func testRetryPolicyBacksOffCappedAndHonoursRetryAfterUpToItsLimit() {
        let policy = RetryPolicy(maxAttempts: 4, initialBackoff: .milliseconds(100), maxBackoff: .milliseconds(250), maxRetryAfter: .seconds(10))
        XCTAssertEqual(policy.decide(attempt: 1, retryAfterSeconds: nil), .retry(after: .milliseconds(100)))
        XCTAssertEqual(policy.decide(attempt: 2, retryAfterSeconds: nil), .retry(after: .milliseconds(200)))
        XCTAssertEqual(policy.decide(attempt: 3, retryAfterSeconds: nil), .retry(after: .milliseconds(250)))
        XCTAssertEqual(policy.decide(attempt: 4, retryAfterSeconds: nil), .giveUp(retryAfterSeconds: nil))
        XCTAssertEqual(policy.decide(attempt: 1, retryAfterSeconds: 3), .retry(after: .seconds(3)))
        XCTAssertEqual(policy.decide(attempt: 1, retryAfterSeconds: 11), .giveUp(retryAfterSeconds: 11), "longer than we wait in-process")
        XCTAssertEqual(policy.decide(attempt: 4, retryAfterSeconds: 1), .giveUp(retryAfterSeconds: 1))
        XCTAssertEqual(RetryPolicy(maxAttempts: 1_000_000).maxAttempts, 20, "attempts are bounded")
    }

    func testPageCursorStopsOnLastPageLoopMissingCursorAndPageLimit() {
        var done = PageCursor(maxPages: 5)
        XCTAssertEqual(done.next(hasMore: true, cursor: "a"), "a")
        XCTAssertNil(done.next(hasMore: false, cursor: "b"))
        XCTAssertFalse(done.truncated)
        XCTAssertEqual(done.pages, 2)

        var loop = PageCursor(maxPages: 5)
        XCTAssertEqual(loop.next(hasMore: true, cursor: "a"), "a")
        XCTAssertNil(loop.next(hasMore: true, cursor: "a"), "a repeated cursor is a loop")
        XCTAssertTrue(loop.truncated)
        XCTAssertFalse(loop.reachedPageLimit, "a loop is no reason to read a narrower window")

        var missing = PageCursor(maxPages: 5)
        XCTAssertNil(missing.next(hasMore: true, cursor: nil))
        XCTAssertTrue(missing.truncated)
        XCTAssertFalse(missing.reachedPageLimit)

        var limit = PageCursor(maxPages: 3)
        XCTAssertNotNil(limit.next(hasMore: true, cursor: "1"))
        XCTAssertNotNil(limit.next(hasMore: true, cursor: "2"))
        XCTAssertNil(limit.next(hasMore: true, cursor: "3"))
        XCTAssertTrue(limit.truncated)
        XCTAssertTrue(limit.reachedPageLimit)
        XCTAssertEqual(limit.pages, 3)
    }

    func testClassificationOfStatusesAndAppleErrorCodes() {
        func classify(_ status: Int, _ body: String = "", headers: [String: String] = [:]) -> (APIFailure?, Int64?) {
            switch ResponseClassifier.classify(.success(APIHTTPResponse(status: status, headers: headers, body: Array(body.utf8))),
                                               environment: .production, now: now) {
            case .success: return (nil, nil)
            case .failure(let failure, let retryAfter): return (failure, retryAfter)
            }
        }
        XCTAssertNil(classify(200, "{}").0)
        let limited = classify(429, #"{"errorCode":4290000,"errorMessage":"Rate limit exceeded."}"#, headers: ["Retry-After": "2"])
        XCTAssertEqual(limited.0?.kind, .retryable)
        XCTAssertEqual(limited.0?.errorCode, .rateLimitExceeded)
        XCTAssertEqual(limited.1, 2)
        XCTAssertEqual(classify(500).0?.kind, .retryable)
        XCTAssertEqual(classify(503, "<html>").0?.kind, .retryable)
        let missing = classify(404, #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#).0
        XCTAssertEqual(missing?.kind, .permanent)
        XCTAssertEqual(missing?.errorCode?.meansUnknownInThisEnvironment, true)
        XCTAssertEqual(classify(404, #"{"errorCode":4040006}"#).0?.kind, .retryable, "Apple's retryable variant")
        XCTAssertEqual(classify(401).0?.kind, .retryable, "our token, not the request: a fresh one may pass")
        let odd = classify(400, #"{"errorCode":4009999,"errorMessage":"new\u0000code \#(String(repeating: "x", count: 500))"}"#).0
        XCTAssertEqual(odd?.rawErrorCode, 4_009_999, "an unknown code is kept raw")
        XCTAssertNil(odd?.errorCode)
        XCTAssertEqual(odd?.errorMessage?.count, APILimits.maxErrorMessageCharacters)
        XCTAssertFalse(odd?.errorMessage?.contains("\u{0}") ?? true)
        let down = ResponseClassifier.classify(.failure(APITransportError("connection refused")), environment: .sandbox, now: now)
        guard case .failure(let failure, _) = down else { return XCTFail("a transport error is a failure") }
        XCTAssertEqual(failure.kind, .retryable)
        // An answer cut off at the transport's limit is no outage: asking again downloads it again.
        let huge = ResponseClassifier.classify(.failure(APITransportError("response body is over the 4194304-byte limit", isOverLimit: true)),
                                               environment: .sandbox, now: now)
        guard case .failure(let cut, _) = huge else { return XCTFail("an answer over the limit is a failure") }
        XCTAssertEqual(cut.kind, .invalidResponse)
    }

    func testPathIdsAreRefusedUnlessPlainAndQueriesAreEncoded() throws {
        XCTAssertNoThrow(try Endpoint.pathId("2000000123456789", "id").get())
        XCTAssertNoThrow(try Endpoint.pathId("com.example.vip_1m-x", "id").get())
        for bad in ["", "..", "1/../../v1/lookup", "1?x=2", "1%2F", "1 2", String(repeating: "1", count: 129), "é"] {
            XCTAssertThrowsError(try Endpoint.pathId(bad, "id").get(), bad)
        }
        let endpoint = Endpoint(method: "POST", path: "/inApps/v1/notifications/history", query: [("paginationToken", "a+b/c=&d")])
        XCTAssertEqual(endpoint.url(base: URL(string: "http://127.0.0.1:9/sandbox/")!)?.absoluteString,
                       "http://127.0.0.1:9/sandbox/inApps/v1/notifications/history?paginationToken=a%2Bb%2Fc%3D%26d")
    }

    func testAppleBaseURLsAreApplesAndXcodeHasNone() {
        XCTAssertEqual(APIBaseURLs.apple.url(for: .production)?.absoluteString, "https://api.storekit.apple.com")
        XCTAssertEqual(APIBaseURLs.apple.url(for: .sandbox)?.absoluteString, "https://api.storekit-sandbox.apple.com")
        XCTAssertNil(APIBaseURLs.apple.url(for: .xcode))
    }

    func testMintedTokenHasApplesHeaderAndClaimsAndVerifiesWithTheKey() throws {
        let key = try P256PrivateKey.generate()
        let minted = try APITokenMinter.mint(key: key, keyId: "KEY123", issuerId: "57246542-96fe-1a63-e053-0824d011072a",
                                             bundleId: "com.example", issuedAt: 1_764_000_000, lifetimeSeconds: 600)
        let parts = minted.token.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        let header = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(parts[0])))) as? [String: Any])
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual(header["kid"] as? String, "KEY123")
        XCTAssertEqual(header["typ"] as? String, "JWT")
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try XCTUnwrap(Base64URL.decode(parts[1])))) as? [String: Any])
        XCTAssertEqual(claims["iss"] as? String, "57246542-96fe-1a63-e053-0824d011072a")
        XCTAssertEqual((claims["iat"] as? NSNumber)?.int64Value, 1_764_000_000)
        XCTAssertEqual((claims["exp"] as? NSNumber)?.int64Value, 1_764_000_600)
        XCTAssertEqual(claims["aud"] as? String, "appstoreconnect-v1")
        XCTAssertEqual(claims["bid"] as? String, "com.example")
        XCTAssertEqual(minted.expiresAt, 1_764_000_600)
        XCTAssertTrue(key.publicKey.verify(rawSignature: try XCTUnwrap(Base64URL.decode(parts[2])), message: Array("\(parts[0]).\(parts[1])".utf8)))
        XCTAssertFalse(String(describing: minted).contains(minted.token), "a token never prints")

        XCTAssertThrowsError(try APITokenMinter.mint(key: key, keyId: "K", issuerId: "I", bundleId: "b", issuedAt: 1, lifetimeSeconds: 3601))
        XCTAssertThrowsError(try APITokenMinter.mint(key: key, keyId: "K", issuerId: "I", bundleId: "b", issuedAt: 1, lifetimeSeconds: 0))
        XCTAssertThrowsError(try APITokenMinter.mint(key: key, keyId: "K", issuerId: "I", bundleId: "b", issuedAt: .max, lifetimeSeconds: 60))
        XCTAssertThrowsError(try APITokenMinter.mint(key: key, keyId: "K", issuerId: "", bundleId: "b", issuedAt: 1))
    }

    func testTokenIssuerUsesTheKeyRingAndClock() throws {
        let key = try P256PrivateKey.generate()
        let issuer = APITokenIssuer(keys: try SigningKeyRing(keys: ["K1": key]), issuerId: "issuer", clock: { 1_000 })
        let minted = try issuer.mint(bundleId: "com.example")
        XCTAssertEqual(minted.keyIdentifier, "K1")
        XCTAssertEqual(minted.issuedAt, 1_000)
        XCTAssertEqual(minted.expiresAt, 1_000 + APITokenMinter.defaultLifetimeSeconds)
        XCTAssertThrowsError(try issuer.mint(bundleId: "com.example", keyId: "OTHER"))
    }

    func testCachingTokenProviderReusesUntilShortlyBeforeExpiry() {
        final class Clock: @unchecked Sendable { var seconds: TimeInterval = 1_000 }  // test-only, one thread
        let clock = Clock()
        let fetched = Counter()
        let provider = CachingTokenProvider(renewBefore: 60, now: { Date(timeIntervalSince1970: clock.seconds) }) {
            let n = fetched.increment()
            return .success(APIToken(value: "t\(n)", expiresAt: Int64(clock.seconds) + 300))
        }
        XCTAssertEqual(try provider.token().get().value, "t1")
        clock.seconds += 200
        XCTAssertEqual(try provider.token().get().value, "t1")
        clock.seconds += 50
        XCTAssertEqual(try provider.token().get().value, "t2", "within 60 s of exp a new one is fetched")
        XCTAssertFalse(String(describing: try provider.token().get()).contains("t2"))
    }
}

final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() -> Int { value.withLock { $0 += 1; return $0 } }
    var current: Int { value.withLock { $0 } }
}
