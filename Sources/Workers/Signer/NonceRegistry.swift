import Foundation
import Runtime
import Synchronization

/// Remembers every nonce issued in the last `window` (24 h: a promotional offer's signature is
/// valid that long) so none is ever issued twice, in bounded memory whatever the load.
///
/// Nonces are random v4 UUIDs, so a repeat is already astronomically unlikely; this registry makes
/// "never reused" a checked property instead of a probability. It keeps one Bloom filter per time
/// slice (`window / slices`), queries all slices of the window and drops older ones. A Bloom filter
/// never forgets a member (no false negatives), so a nonce seen within the window is always refused.
/// Its false positives only make the signer draw another nonce. A slice that reaches its sized load
/// opens another filter rather than filling up, so a burst (anyone may ask for intro-eligibility
/// signatures) does not raise the redraw rate for the next 24 h; up to `maxFilters`, twice the
/// sized day, after which the last filter fills and redraws grow, but correctness does not change.
/// Memory: `bitsPerSlice / 8` bytes per filter, `slices + 1` filters at the sized load.
public final class NonceRegistry: Sendable {
    public struct Sizing: Sendable, Equatable {
        public var window: Duration
        public var slices: Int
        /// Nonces one slice is sized for (at `falsePositiveRate`).
        public var expectedPerSlice: Int
        public var falsePositiveRate: Double

        /// 24 one-hour slices sized for 1M nonces an hour (~280/s sustained) at 1e-3:
        /// 25 filters of 1.8 MB.
        public init(window: Duration = .seconds(86_400), slices: Int = 24, expectedPerSlice: Int = 1_000_000,
                    falsePositiveRate: Double = 0.001) {
            self.window = window
            self.slices = max(1, slices)
            self.expectedPerSlice = max(1, expectedPerSlice)
            self.falsePositiveRate = min(max(falsePositiveRate, 1e-9), 0.5)
        }

        var bitsPerSlice: Int {
            let n = Double(expectedPerSlice), p = falsePositiveRate
            return max(64, Int((-n * log(p) / (log(2) * log(2))).rounded(.up)))
        }
        var hashCount: Int { max(1, Int((Double(bitsPerSlice) / Double(expectedPerSlice) * log(2)).rounded())) }
        var sliceMs: Int64 { max(1, window.milliseconds / Int64(slices)) }
        /// Filters kept at most: one per live slice plus as many extra, twice the sized day (~90 MB at
        /// the defaults).
        var maxFilters: Int { 2 * (slices + 1) }
    }

    private struct Slice {
        let index: Int64
        var words: [UInt64]
        var count = 0
    }

    public let sizing: Sizing
    private let bits: Int
    private let hashes: Int
    private let state = Mutex<[Slice]>([])

    public init(sizing: Sizing = Sizing()) {
        self.sizing = sizing
        bits = sizing.bitsPerSlice
        hashes = sizing.hashCount
    }

    /// Records `nonce` as issued at `nowMs` and returns true, or returns false (recording nothing)
    /// when it may already have been issued within the window: the caller then draws another.
    public func register(_ nonce: UUID, nowMs: Int64) -> Bool {
        let probe = Probe(nonce, bits: bits, hashes: hashes)
        let current = nowMs / sizing.sliceMs
        return state.withLock { slices in
            // A slice is live while any part of it is younger than the window.
            if let first = slices.first, first.index < current - Int64(sizing.slices) {
                slices.removeAll { $0.index < current - Int64(sizing.slices) }
            }
            for slice in slices where probe.isSet(in: slice.words) { return false }
            // Extra filters (beyond one per slice) count against the cap, so the filters never exceed it.
            let extras = slices.count - Set(slices.map(\.index)).count
            let full = (slices.last?.count ?? 0) >= sizing.expectedPerSlice && extras < sizing.slices + 1
            if slices.last?.index != current || full {
                slices.append(Slice(index: current, words: [UInt64](repeating: 0, count: (bits + 63) / 64)))
            }
            let last = slices.count - 1
            probe.set(in: &slices[last].words)
            slices[last].count += 1
            return true
        }
    }

    /// True when `nonce` may have been issued within the window ending at `nowMs`.
    public func contains(_ nonce: UUID, nowMs: Int64) -> Bool {
        let probe = Probe(nonce, bits: bits, hashes: hashes)
        let oldest = nowMs / sizing.sliceMs - Int64(sizing.slices)
        return state.withLock { slices in
            slices.contains { $0.index >= oldest && probe.isSet(in: $0.words) }
        }
    }

    /// Nonces recorded in the live slices, and the bytes the filters hold.
    public var stats: (nonces: Int, bytes: Int) {
        state.withLock { slices in (slices.reduce(0) { $0 + $1.count }, slices.count * ((bits + 63) / 64) * 8) }
    }

    /// The filter positions of one nonce: double hashing (Kirsch–Mitzenmacher) over the UUID's
    /// 128 bits, mixed with a SplitMix64 finalizer so that even non-random nonces spread evenly.
    /// Computed on the fly: this runs once per signature.
    private struct Probe {
        let h1: UInt64, h2: UInt64, bits: UInt64, hashes: Int

        init(_ nonce: UUID, bits: Int, hashes: Int) {
            let (high, low) = withUnsafeBytes(of: nonce.uuid) { raw in
                (UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                 UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            }
            h1 = NonceRegistry.mix(high ^ NonceRegistry.mix(low))
            h2 = NonceRegistry.mix(low &+ 0x9E37_79B9_7F4A_7C15 ^ h1) | 1
            self.bits = UInt64(bits)
            self.hashes = hashes
        }

        @inline(__always) func position(_ i: Int) -> Int { Int((h1 &+ UInt64(i) &* h2) % bits) }

        func isSet(in words: [UInt64]) -> Bool {
            for i in 0..<hashes {
                let p = position(i)
                if words[p >> 6] & (1 << UInt64(p & 63)) == 0 { return false }
            }
            return true
        }

        func set(in words: inout [UInt64]) {
            for i in 0..<hashes {
                let p = position(i)
                words[p >> 6] |= 1 << UInt64(p & 63)
            }
        }
    }

    fileprivate static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
