@testable import AppleDecoding
import Foundation
import XCTest

/// The JWS header cache (a performance measure) returns exactly what parsing the same bytes
/// returns and nothing for any other bytes, stays bounded, and leaves every parse verdict as it was.
final class JWSHeaderCacheTests: XCTestCase {
    func testHitsOnlyTheSameBytesAndStaysBounded() {
        let cache = JWSHeaderCache(capacity: 2, maxSegmentBytes: 64)
        let a = ArraySlice(Array("eyJhbGciOiJFUzI1NiJ9".utf8))
        let b = ArraySlice(Array("eyJhbGciOiJFUzI1NyJ9".utf8))   // same length, one byte differs
        XCTAssertNil(cache.lookup(a))
        cache.insert(a, header: ["alg": "ES256"])
        XCTAssertEqual(cache.lookup(a)?.header["alg"] as? String, "ES256")
        XCTAssertNil(cache.lookup(b))
        cache.insert(b, header: ["alg": "ES257"])
        cache.insert(ArraySlice(Array("eyJ4IjoxfQ".utf8)), header: ["x": 1])
        // Capacity two: the oldest entry went, the newer ones stay.
        XCTAssertNil(cache.lookup(a))
        XCTAssertEqual(cache.lookup(b)?.header["alg"] as? String, "ES257")
        // Oversized segments are never cached.
        let big = ArraySlice([UInt8](repeating: UInt8(ascii: "A"), count: 65))
        cache.insert(big, header: ["big": true])
        XCTAssertNil(cache.lookup(big))
    }

    func testCachedHeaderKeepsEveryParseVerdict() {
        func segment(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let header = segment(#"{"alg":"ES256","x5c":["a","b","c"]}"#)
        let payload = segment(#"{"signedDate":1}"#)
        let token = "\(header).\(payload).AAAA"
        for _ in 0..<2 {   // the second parse reads the header from the cache
            let parsed = try? CompactJWS.parse(token).get()
            XCTAssertEqual(parsed?.header["alg"] as? String, "ES256")
            XCTAssertEqual((parsed?.header["x5c"] as? [Any])?.count, 3)
        }
        // A bad payload or signature still fails after the header was cached.
        XCTAssertNotNil(CompactJWS.parse("\(header).!!!.AAAA").failureValue)
        XCTAssertNotNil(CompactJWS.parse("\(header).\(payload).A").failureValue)
        // A header that is not JSON is refused however often it comes.
        let notJSON = segment("not json")
        for _ in 0..<2 { XCTAssertNotNil(CompactJWS.parse("\(notJSON).\(payload).AAAA").failureValue) }
    }

    /// After a header is cached its signature check hashes only the payload segment: the verdicts
    /// are those of hashing the whole signing input (tampered payloads and signatures still fail).
    func testCachedHeaderSigningPrefixKeepsTheSignatureVerdicts() throws {
        let pki = try TestPKI.load()
        let verifier = try pki.verifier()
        let payload: [String: Any] = ["bundleId": "com.example", "environment": "Sandbox", "signedDate": 1_698_148_900_000,
                                      "transactionId": "1", "productId": "p", "purchaseDate": 1_698_148_900_000]
        let first = try pki.sign(payload)
        XCTAssertNil(verifier.verifyTransaction(first).failureValue)
        let headerSegment = ArraySlice(Array(first.utf8.prefix { $0 != UInt8(ascii: ".") }))
        XCTAssertNotNil(JWSHeaderCache.shared.lookup(headerSegment)?.signingPrefix, "the header is cached with its digest state")
        var other = payload
        other["transactionId"] = "2"
        let second = try pki.sign(other)
        XCTAssertNil(verifier.verifyTransaction(second).failureValue, "a fresh JWS with the cached header verifies")
        let parts = second.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let firstParts = first.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(parts[0], firstParts[0])
        // The first JWS's payload under the second's signature, and the reverse: both refused.
        XCTAssertEqual(verifier.verifyTransaction("\(parts[0]).\(firstParts[1]).\(parts[2])").failureValue?.status, .verificationFailure)
        XCTAssertEqual(verifier.verifyTransaction("\(parts[0]).\(parts[1]).\(firstParts[2])").failureValue?.status, .verificationFailure)
        // A payload one character longer (a base64url character appended) is refused too.
        XCTAssertNotNil(verifier.verifyTransaction("\(parts[0]).\(parts[1])A.\(parts[2])").failureValue)
    }
}
