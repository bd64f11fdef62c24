@testable import Crypto
import XCTest

/// Contract: a sealed box opens only with the recipient's private key and the same context, any
/// altered byte makes it fail, two seals of one message differ (fresh ephemeral key and nonce),
/// and the HMAC/HKDF underneath match their RFC test vectors.
final class SealedBoxTests: XCTestCase {
    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    func testHMACAndHKDFMatchTheRFCVectors() {
        // RFC 4231 test case 2.
        XCTAssertEqual(hex(SealedBox.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // RFC 4231 test case 6: a key longer than the block is hashed first.
        XCTAssertEqual(hex(SealedBox.hmacSHA256(key: [UInt8](repeating: 0xAA, count: 131),
                                                Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))),
                       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        // RFC 5869 test case 1, first 32 bytes of the OKM.
        XCTAssertEqual(hex(SealedBox.hkdfSHA256(secret: [UInt8](repeating: 0x0B, count: 22), salt: Array(0x00...0x0C),
                                                info: Array(0xF0...0xF9))),
                       "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf")
    }

    func testOpensOnlyForTheRecipientWithTheSameContextAndUnaltered() throws {
        let recipient = try P256PrivateKey.generate()
        let secret = Array("eyJhbGciOiJFUzI1NiJ9.secret-token.sig".utf8)
        let box = try SealedBox.seal(secret, to: recipient.publicKey, context: Array("req-1".utf8))
        XCTAssertEqual(try SealedBox.open(box, with: recipient, context: Array("req-1".utf8)), secret)
        XCTAssertNil(box.firstRange(of: secret), "the box never holds the plaintext")
        XCTAssertNotEqual(try SealedBox.seal(secret, to: recipient.publicKey, context: Array("req-1".utf8)), box)

        XCTAssertThrowsError(try SealedBox.open(box, with: try P256PrivateKey.generate(), context: Array("req-1".utf8)))
        XCTAssertThrowsError(try SealedBox.open(box, with: recipient, context: Array("req-2".utf8)))
        for index in [0, 1, 50, box.count - 20, box.count - 1] {
            var altered = box
            altered[index] ^= 0x01
            XCTAssertThrowsError(try SealedBox.open(altered, with: recipient, context: Array("req-1".utf8)), "byte \(index)")
        }
        XCTAssertThrowsError(try SealedBox.open(Array(box.prefix(40)), with: recipient, context: []))
        XCTAssertThrowsError(try SealedBox.open([], with: recipient, context: []))
        XCTAssertThrowsError(try SealedBox.open([0xFF, 0xFF] + [UInt8](repeating: 0, count: 100), with: recipient, context: []))
    }
}
