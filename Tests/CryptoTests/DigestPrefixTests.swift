import Crypto
import Foundation
import Synchronization
import XCTest

/// A prepared digest state (the JWS header's part of every signing input) gives exactly the digest
/// and the verdicts of hashing the whole message, for every split and from several threads.
final class DigestPrefixTests: XCTestCase {
    func testContinuingEqualsHashingTheWholeMessage() throws {
        let message = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for algorithm in DigestAlgorithm.allCases {
            for split in [0, 1, 63, 64, 65, 299, 300] {
                let prefix = try XCTUnwrap(DigestPrefix(algorithm, prefix: message[..<split]))
                XCTAssertEqual(prefix.hash(continuing: message[split...]), algorithm.hash(message), "\(algorithm) split \(split)")
                // The prepared state is only copied: using it twice gives the same digest again.
                XCTAssertEqual(prefix.hash(continuing: message[split...]), algorithm.hash(message))
            }
        }
    }

    func testVerifyWithPrefixHasTheWholeMessagesVerdicts() throws {
        let key = try P256PrivateKey.generate()
        let header = Array("eyJhbGciOiJFUzI1NiJ9.".utf8), payload = Array("eyJzaWduZWREYXRlIjoxfQ".utf8)
        let signature = try key.sign(header + payload).raw
        let prefix = try XCTUnwrap(DigestPrefix(.sha256, prefix: header))
        XCTAssertTrue(key.publicKey.verify(rawSignature: signature, prefix: prefix, suffix: payload))
        XCTAssertFalse(key.publicKey.verify(rawSignature: signature, prefix: prefix, suffix: payload + [0x41]), "another payload")
        XCTAssertFalse(key.publicKey.verify(rawSignature: signature, prefix: try XCTUnwrap(DigestPrefix(.sha256, prefix: header.dropLast())),
                                            suffix: payload), "another header")
        XCTAssertFalse(key.publicKey.verify(rawSignature: signature, prefix: try XCTUnwrap(DigestPrefix(.sha384, prefix: header)),
                                            suffix: payload), "another digest")
        XCTAssertFalse(try P256PrivateKey.generate().publicKey.verify(rawSignature: signature, prefix: prefix, suffix: payload), "another key")
        for index in [0, 31, 32, 63] {
            var flipped = signature
            flipped[index] ^= 0x01
            XCTAssertFalse(key.publicKey.verify(rawSignature: flipped, prefix: prefix, suffix: payload), "bit flipped at \(index)")
        }
        XCTAssertFalse(key.publicKey.verify(rawSignature: Array(signature.prefix(63)), prefix: prefix, suffix: payload), "63 bytes")
        XCTAssertFalse(key.publicKey.verify(rawSignature: [], prefix: prefix, suffix: payload), "empty")
    }

    func testOnePreparedStateServesConcurrentVerifications() throws {
        let key = try P256PrivateKey.generate()
        let header = Array(repeating: UInt8(ascii: "h"), count: 5_000) + [UInt8(ascii: ".")]
        let payloads = (0..<8).map { Array("payload-\($0)".utf8) }
        let signatures = try payloads.map { try key.sign(header + $0).raw }
        let prefix = try XCTUnwrap(DigestPrefix(.sha256, prefix: header))
        let failures = Atomic(0)
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            let i = index % payloads.count
            let good = key.publicKey.verify(rawSignature: signatures[i], prefix: prefix, suffix: payloads[i])
            let bad = key.publicKey.verify(rawSignature: signatures[i], prefix: prefix, suffix: payloads[(i + 1) % payloads.count])
            if !good || bad { failures.add(1, ordering: .relaxed) }
        }
        XCTAssertEqual(failures.load(ordering: .relaxed), 0)
    }
}
