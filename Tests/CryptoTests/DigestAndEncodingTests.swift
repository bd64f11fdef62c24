import Crypto
import XCTest

/// Digests, randomness and base64 against published test vectors (FIPS 180 "abc", RFC 4648).
final class DigestAndEncodingTests: XCTestCase {
    private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
    private let abc = Array("abc".utf8)

    func testDigestsMatchFIPSVectors() {
        XCTAssertEqual(hex(SHA1.hash(abc)), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(hex(SHA256.hash(abc)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(SHA384.hash(abc)),
                       "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7")
        XCTAssertEqual(hex(SHA256.hash([UInt8]())), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(DigestAlgorithm.sha512.hash(abc).count, 64)
        XCTAssertEqual(SHA256.hash(Data(abc)), SHA256.hash(abc))
    }

    func testSecureRandomBytes() throws {
        XCTAssertEqual(try SecureRandom.bytes(count: 0), [])
        let a = try SecureRandom.bytes(count: 32)
        let b = try SecureRandom.bytes(count: 32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
        XCTAssertThrowsError(try SecureRandom.bytes(count: -1))
    }

    func testBase64RFC4648Vectors() {
        let vectors = ["": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==", "fooba": "Zm9vYmE=", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in vectors {
            XCTAssertEqual(Base64.encode(Array(plain.utf8)), encoded)
            XCTAssertEqual(Base64.decode(encoded), Array(plain.utf8))
            let unpadded = encoded.replacingOccurrences(of: "=", with: "")
            XCTAssertEqual(Base64URL.encode(Array(plain.utf8)), unpadded)
            XCTAssertEqual(Base64URL.decode(unpadded), Array(plain.utf8), "base64url without padding")
            XCTAssertEqual(Base64URL.decode(encoded), Array(plain.utf8), "base64url tolerates padding")
            XCTAssertEqual(Base64.decode(unpadded), Array(plain.utf8), "base64 tolerates missing padding")
        }
    }

    func testBase64AlphabetsAndWhitespace() {
        let bytes: [UInt8] = [0xFB, 0xFF, 0xBF]
        XCTAssertEqual(Base64.encode(bytes), "+/+/")
        XCTAssertEqual(Base64URL.encode(bytes), "-_-_")
        XCTAssertNil(Base64URL.decode("+/+/"), "base64url rejects the standard alphabet")
        XCTAssertNil(Base64.decode("-_-_"), "base64 rejects the url alphabet")
        XCTAssertEqual(Base64.decode(" Zm9v\r\nYmFy\n\tZg==\n"), Array("foobarf".utf8), "receipts arrive line-wrapped")
        XCTAssertNil(Base64URL.decode("Zm9v YmFy"), "a JWS segment never contains whitespace")
    }

    func testBase64RejectsMalformedInput() {
        for bad in ["Z", "Zm9vY", "Zm=9v", "Zm9v=Zm9v", "Zg===", "Zm8==", "Zm9v*", "é"] {
            XCTAssertNil(Base64.decode(bad), bad)
        }
    }

    func testBase64RoundTripsAllLengths() throws {
        for length in 0..<70 {
            let bytes = try SecureRandom.bytes(count: length)
            XCTAssertEqual(Base64.decode(Base64.encode(bytes)), bytes)
            XCTAssertEqual(Base64URL.decode(Base64URL.encode(bytes)), bytes)
        }
    }
}
