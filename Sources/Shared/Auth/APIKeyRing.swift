import Foundation
import Crypto

/// Service and admin API keys, kept as SHA-256 hashes only (configuration never holds a key).
/// Several keys per role allow rotation: add the new one, move clients, remove the old one.
/// A presented key is hashed and compared with every entry in constant time, without an early
/// exit, so neither timing nor the order of entries tells how close a guess was.
public struct APIKeyRing: Sendable {
    public enum Role: String, Sendable { case service, admin }

    public struct Entry: Sendable, Equatable {
        public var name: String
        public var role: Role
        public var sha256: [UInt8]

        public init(name: String, role: Role, sha256: [UInt8]) {
            self.name = name
            self.role = role
            self.sha256 = sha256
        }
    }

    public let entries: [Entry]
    /// Longer presented keys are refused before hashing (generated keys are 50 bytes).
    public static let maxKeyBytes = 256

    public init(entries: [Entry]) { self.entries = entries }

    /// `name=hexsha256,name=hexsha256`: the form of Setting.apiKeys / Setting.adminKeys.
    public static func parse(_ text: String, role: Role, variable: String) throws(AuthConfigurationError) -> [Entry] {
        var entries: [Entry] = []
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty, let hash = hexBytes(parts[1].hasPrefix("sha256:") ? String(parts[1].dropFirst(7)) : parts[1]),
                  hash.count == 32 else {
                throw AuthConfigurationError("\(variable): each entry is name=<64 hex digits of the key's SHA-256> (`storeledger credentials new-key` prints one)")
            }
            guard parts[0].utf8.count <= 64, parts[0].utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw AuthConfigurationError("\(variable): key names are at most 64 printable ASCII characters")
            }
            entries.append(Entry(name: parts[0], role: role, sha256: hash))
        }
        return entries
    }

    /// The entry the key belongs to, or nil.
    public func match(_ presented: String) -> Entry? {
        let bytes = Array(presented.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maxKeyBytes else { return nil }
        let digest = SHA256.hash(bytes)
        var found: Entry?
        for entry in entries where constantTimeEqual(entry.sha256, digest) && found == nil {
            found = entry
        }
        return found
    }

    /// A new random key: a recognisable prefix (so leaked keys can be found by secret scanners),
    /// then 32 random bytes base64url.
    public static func generateKey(prefix: String = "slk") throws -> String {
        "\(prefix)_" + Base64URL.encode(try SecureRandom.bytes(count: 32))
    }

    /// Lower-case hex SHA-256 of a key: what configuration stores.
    public static func hash(_ key: String) -> String {
        SHA256.hash(Array(key.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

func hexBytes(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(digits.count / 2)
    var index = 0
    while index < digits.count {
        guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
        bytes.append(high << 4 | low)
        index += 2
    }
    return bytes
}

private func hexValue(_ digit: UInt8) -> UInt8? {
    switch digit {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
    default: nil
    }
}

public struct AuthConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
