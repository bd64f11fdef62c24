import Crypto
import Foundation
import Signer
import XCTest

/// Contract: keys load from `KEYID=/path.p8,...` with a default for rotation; bad entries, missing
/// files and non-P-256 keys fail with messages naming the id and path, and no error, description
/// or reflection ever contains key material.
final class KeyRingTests: XCTestCase {
    private func temporaryKey() throws -> (path: String, pem: String) {
        let pem = try P256PrivateKey.generate().pkcs8PEM()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("signer-key-\(UUID().uuidString).p8").path
        try pem.write(toFile: path, atomically: true, encoding: .utf8)
        return (path, pem)
    }

    /// The base64 lines of a PEM, the part that must never leak.
    private func secretLines(_ pem: String) -> [String] {
        pem.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("-----") && $0.count > 16 }
    }

    func testLoadsSeveralKeysAndPicksByIdOrDefault() throws {
        let fixture = try SignerFixtures.signingKeyPath
        let (other, otherPEM) = try temporaryKey()
        defer { try? FileManager.default.removeItem(atPath: other) }
        let ring = try SigningKeyRing.load(spec: "OLDKEY=\(fixture), NEWKEY=\(other)", defaultKeyId: "NEWKEY")
        XCTAssertEqual(Set(ring.keys.keys), ["OLDKEY", "NEWKEY"])
        XCTAssertEqual(ring.key(nil)?.id, "NEWKEY")
        XCTAssertEqual(ring.key("")?.id, "NEWKEY")
        XCTAssertEqual(ring.key("OLDKEY")?.key.publicKey, try SignerFixtures.signingKey().publicKey)
        XCTAssertNil(ring.key("MISSING"))
        let text = "\(ring) \(String(reflecting: ring)) \(ring.keys["NEWKEY"]!)"
        for line in secretLines(otherPEM) + secretLines(try String(contentsOfFile: fixture, encoding: .utf8)) {
            XCTAssertFalse(text.contains(line))
        }
        XCTAssertTrue(text.contains("NEWKEY"))
    }

    func testSingleKeyIsTheDefaultAndSeveralNeedOne() throws {
        let fixture = try SignerFixtures.signingKeyPath
        XCTAssertEqual(try SigningKeyRing.load(spec: "K1=\(fixture)", defaultKeyId: nil).defaultKeyId, "K1")
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "K1=\(fixture),K2=\(fixture)", defaultKeyId: nil))
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "K1=\(fixture)", defaultKeyId: "K9"))
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "", defaultKeyId: nil))
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "K1", defaultKeyId: nil))
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "K1=\(fixture),K1=\(fixture)", defaultKeyId: nil))
    }

    func testLoadErrorsNameTheFileButNeverItsContent() throws {
        // A file that is almost a key: a P-256 PEM with its body damaged.
        let (path, pem) = try temporaryKey()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let damaged = pem.replacingOccurrences(of: "MIG", with: "XXX")
        try damaged.write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "BAD=\(path)", defaultKeyId: nil)) { error in
            let text = "\(error) \(String(reflecting: error))"
            XCTAssertTrue(text.contains(path) && text.contains("BAD"), text)
            for line in secretLines(damaged) + secretLines(pem) { XCTAssertFalse(text.contains(line)) }
        }
        XCTAssertThrowsError(try SigningKeyRing.load(spec: "GONE=/nonexistent/key.p8", defaultKeyId: nil)) {
            XCTAssertTrue("\($0)".contains("/nonexistent/key.p8"))
        }
    }
}
