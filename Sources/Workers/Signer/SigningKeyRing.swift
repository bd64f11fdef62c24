import Crypto
import Foundation

/// The App Store Connect signing keys (`.p8`, PKCS#8 PEM) this process holds, by key id.
/// Several ids allow rotation: a new key is added, becomes the default, and the old one stays
/// until no client asks for it.
///
/// Nothing here ever prints key bytes: descriptions show ids and public-key fingerprints only,
/// and load errors name the file, never its content.
public struct SigningKeyRing: Sendable, CustomStringConvertible {
    public let keys: [String: P256PrivateKey]
    public let defaultKeyId: String

    public init(keys: [String: P256PrivateKey], defaultKeyId: String? = nil) throws(SignerError) {
        guard !keys.isEmpty else { throw .configuration("no signing key configured") }
        let chosen = defaultKeyId ?? (keys.count == 1 ? keys.keys.first! : nil)
        guard let chosen else {
            throw .configuration("several signing keys (\(keys.keys.sorted().joined(separator: ","))) and no default key id")
        }
        guard keys[chosen] != nil else { throw .configuration("default key id \(chosen) is not among the loaded keys") }
        self.keys = keys
        self.defaultKeyId = chosen
    }

    /// Parses `KEYID=/path/AuthKey.p8,KEYID2=/path2.p8` and reads each file.
    public static func load(spec: String, defaultKeyId: String?) throws(SignerError) -> SigningKeyRing {
        var keys: [String: P256PrivateKey] = [:]
        for entry in spec.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            guard let equals = entry.firstIndex(of: "=") else {
                throw .configuration("signing key entry \"\(entry)\" is not KEYID=/path/to/key.p8")
            }
            let id = String(entry[..<equals]), path = String(entry[entry.index(after: equals)...])
            guard !id.isEmpty, !path.isEmpty else { throw .configuration("signing key entry \"\(entry)\" needs both an id and a path") }
            guard keys[id] == nil else { throw .configuration("signing key id \(id) is listed twice") }
            keys[id] = try loadKey(path: path, id: id)
        }
        return try SigningKeyRing(keys: keys, defaultKeyId: defaultKeyId)
    }

    /// One `.p8` file. The PEM text is dropped as soon as OpenSSL has parsed it.
    public static func loadKey(path: String, id: String) throws(SignerError) -> P256PrivateKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .configuration("cannot read signing key \(id) at \(path)")
        }
        do {
            return try P256PrivateKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            // CryptoError carries only OpenSSL's reason strings, never input bytes.
            throw .configuration("signing key \(id) at \(path) is not an unencrypted EC P-256 PKCS#8 PEM key (\(error.message))")
        }
    }

    /// The key for `id`, or the default when `id` is nil or empty.
    public func key(_ id: String?) -> (id: String, key: P256PrivateKey)? {
        let chosen = (id?.isEmpty ?? true) ? defaultKeyId : id!
        return keys[chosen].map { (chosen, $0) }
    }

    public var description: String {
        "SigningKeyRing(default \(defaultKeyId); " + keys.keys.sorted().map { "\($0): \(keys[$0]!.publicKey)" }.joined(separator: ", ") + ")"
    }
}

/// Failures of the signing side. Messages name ids and paths, never key material.
public enum SignerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Bad keys or settings: the process must not start.
    case configuration(String)
    /// This request cannot be signed (unknown key id, missing field): the requester gets the reason.
    case refused(String)
    /// OpenSSL failed to sign (should not happen with a valid key).
    case signing(String)

    public var description: String {
        switch self {
        case .configuration(let text): "signer configuration: \(text)"
        case .refused(let text): text
        case .signing(let text): "signing failed: \(text)"
        }
    }
}
