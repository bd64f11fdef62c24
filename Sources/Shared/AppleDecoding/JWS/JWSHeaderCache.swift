import Crypto
import Foundation
import Synchronization

/// The parsed JSON of recently seen JWS header segments. Apple signs with a handful of
/// certificates, so the header (`alg` plus the three-certificate `x5c`, ~4 KB of base64url) is
/// byte-identical across millions of JWS; decoding and parsing it with JSONSerialization each time
/// cost more than the rest of a JWS apart from the ES256 verification itself. The header is a pure
/// function of its segment's bytes, so a hit returns exactly what parsing would; the cache is a
/// small ring compared byte for byte (a flood of distinct headers only evicts, never grows it).
/// Each entry also keeps the SHA-256 state after `segment "."`, the part of every signing input the
/// header contributes, so a hit hashes only the payload segment (ES256 is the only algorithm accepted).
final class JWSHeaderCache: Sendable {
    static let shared = JWSHeaderCache(capacity: 8, maxSegmentBytes: 16 * 1024)

    /// Safe to share: a parsed header is never mutated after it is cached, and Swift
    /// dictionaries and arrays are values (readers get copies of the reference-counted storage).
    struct Entry: @unchecked Sendable {
        let segment: [UInt8]
        let header: [String: Any]
        /// SHA-256 fed with `segment "."`; nil if OpenSSL could not set it up (then the whole signing input is hashed).
        let signingPrefix: DigestPrefix?
    }

    private let capacity: Int
    private let maxSegmentBytes: Int
    private let entries = Mutex<(ring: [Entry], next: Int)>(([], 0))

    init(capacity: Int, maxSegmentBytes: Int) {
        self.capacity = capacity
        self.maxSegmentBytes = maxSegmentBytes
    }

    func lookup(_ segment: ArraySlice<UInt8>) -> Entry? {
        guard capacity > 0, segment.count <= maxSegmentBytes else { return nil }
        return segment.withUnsafeBufferPointer { wanted in
            entries.withLock { state in
                for entry in state.ring where entry.segment.count == wanted.count {
                    let equal = entry.segment.withUnsafeBufferPointer { memcmp($0.baseAddress!, wanted.baseAddress!, wanted.count) == 0 }
                    if equal { return entry }
                }
                return nil
            }
        }
    }

    func insert(_ segment: ArraySlice<UInt8>, header: [String: Any]) {
        guard capacity > 0, !segment.isEmpty, segment.count <= maxSegmentBytes else { return }
        let entry = Entry(segment: Array(segment), header: header,
                          signingPrefix: DigestPrefix(.sha256, prefix: segment + [UInt8(ascii: ".")]))
        entries.withLock { state in
            if state.ring.count < capacity {
                state.ring.append(entry)
            } else {
                state.ring[state.next] = entry
                state.next = (state.next + 1) % capacity
            }
        }
    }
}
