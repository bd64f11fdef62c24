import Crypto
import Foundation

/// A stable id for inputs that carry none (V1 bodies, receipts): the SHA-256 of the raw bytes.
enum EventDigest {
    static func hex(of bytes: [UInt8]) -> String {
        SHA256.hash(bytes).prefix(16).map { String(format: "%02x", $0) }.joined()
    }
}
