import Crypto
import Foundation

/// A stable id for inputs that carry none (V1 bodies, receipts): the SHA-256 of the raw bytes.
enum EventDigest {
    static func hex(of bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for byte in SHA256.hash(bytes).prefix(16) {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
