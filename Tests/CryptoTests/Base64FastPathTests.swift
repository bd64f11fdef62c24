import Crypto
import Foundation
import XCTest

/// The eight- and four-at-a-time base64 paths give Foundation's bytes for every length, and the same verdicts
/// as before for whitespace (receipts wrapped at any column), padding and stray characters.
final class Base64FastPathTests: XCTestCase {
    func testEveryLengthRoundTripsAndMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Data(bytes).base64EncodedString()
            XCTAssertEqual(Base64.decode(text), bytes, "length \(length)")
            XCTAssertEqual(Base64.encode(bytes), text)
            // Unpadded, and wrapped with CRLF at an odd column.
            XCTAssertEqual(Base64.decode(text.replacingOccurrences(of: "=", with: "")), bytes)
            var wrapped = ""
            for (index, char) in text.enumerated() {
                if index > 0, index % 7 == 0 { wrapped += "\r\n" }
                wrapped.append(char)
            }
            XCTAssertEqual(Base64.decode(wrapped), bytes, "wrapped length \(length)")
            let url = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            XCTAssertEqual(Base64URL.decode(url), bytes)
            XCTAssertNil(Base64URL.decode(wrapped.contains("\r") ? url + "\r\n" : url + " "), "whitespace is not base64url")
        }
    }

    /// Whole groups go eight characters a turn until one is not in the alphabet: a stray character,
    /// whitespace or padding at any offset of a turn must give the verdict of the one-at-a-time path.
    func testEveryOffsetOfTheEightCharacterTurns() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<60).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let text = Data(bytes).base64EncodedString()  // 80 characters, no padding
        let url = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        for offset in 0..<text.count {
            let split = text.index(text.startIndex, offsetBy: offset)
            XCTAssertEqual(Base64.decode(text[..<split] + "\n" + text[split...]), bytes, "newline at \(offset)")
            XCTAssertNil(Base64URL.decode(String(url.prefix(offset)) + " " + url.dropFirst(offset)), "space at \(offset)")
            for stray in ["*", "=", "\u{00}", "\u{FF}", "é"] {
                XCTAssertNil(Base64.decode(text[..<split] + stray + text[split...]), "\(stray) at \(offset)")
                XCTAssertNil(Base64URL.decode(String(url.prefix(offset)) + stray + url.dropFirst(offset)), "url \(stray) at \(offset)")
            }
            // The other alphabet's characters are strays too.
            var other = Array(url.utf8)
            other[offset] = UInt8(ascii: "+")
            XCTAssertNil(Base64URL.decode(String(decoding: other, as: UTF8.self)), "+ at \(offset)")
            var standard = Array(text.utf8)
            standard[offset] = UInt8(ascii: "_")
            XCTAssertNil(Base64.decode(String(decoding: standard, as: UTF8.self)), "_ at \(offset)")
        }
        for column in 1...24 {
            var wrapped = ""
            for (index, char) in text.enumerated() {
                if index > 0, index % column == 0 { wrapped += "\r\n" }
                wrapped.append(char)
            }
            XCTAssertEqual(Base64.decode(wrapped), bytes, "wrapped at \(column)")
        }
    }

    func testRefusalsAreUnchanged() {
        for bad in ["A", "AAAAA", "AA=A", "AAAA=AAA", "AA==AAAA", "A===", "AB*D", "ABCD\u{00}", "ABC=D", "AAAA===", "ABCDEFG!"] {
            XCTAssertNil(Base64.decode(bad), bad)
        }
        XCTAssertEqual(Base64.decode(""), [])
        XCTAssertEqual(Base64.decode("  \n"), [])
        XCTAssertEqual(Base64.decode("QUJD"), Array("ABC".utf8))
        XCTAssertEqual(Base64.decode("QUI="), Array("AB".utf8))
        XCTAssertEqual(Base64.decode("QQ=="), Array("A".utf8))
        XCTAssertEqual(Base64.decode("Q Q = ="), Array("A".utf8))
    }
}
