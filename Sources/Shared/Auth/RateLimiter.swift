import Foundation
import Synchronization

/// Token buckets per credential: `ratePerSecond` sustained, `burst` at once. A refused request is
/// told how long until a token is back (Retry-After). Bounded memory: at most `maxKeys` buckets;
/// when full, buckets that have refilled completely are dropped first (they carry no state).
public final class RateLimiter: Sendable {
    public struct Limit: Sendable, Equatable {
        public var ratePerSecond: Double
        public var burst: Double
        public init(ratePerSecond: Double, burst: Double) {
            self.ratePerSecond = ratePerSecond
            self.burst = burst
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let buckets = Mutex<[String: Bucket]>([:])
    private let maxKeys: Int

    public init(maxKeys: Int = 100_000) { self.maxKeys = maxKeys }

    /// nil: allowed (a token was taken). Else the whole seconds to wait, at least 1.
    public func take(_ key: String, _ limit: Limit, now: ContinuousClock.Instant = .now) -> Int? {
        buckets.withLock { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: limit.burst, updated: now)
            let elapsed = max(0, Double((now - bucket.updated).components.seconds) + Double((now - bucket.updated).components.attoseconds) / 1e18)
            bucket.tokens = min(limit.burst, bucket.tokens + elapsed * limit.ratePerSecond)
            bucket.updated = now
            if buckets[key] == nil, buckets.count >= maxKeys { evict(&buckets, limit, now: now) }
            guard bucket.tokens >= 1 else {
                buckets[key] = bucket
                return max(1, Int(((1 - bucket.tokens) / max(limit.ratePerSecond, 1e-9)).rounded(.up)))
            }
            bucket.tokens -= 1
            buckets[key] = bucket
            return nil
        }
    }

    private func evict(_ buckets: inout [String: Bucket], _ limit: Limit, now: ContinuousClock.Instant) {
        let full = buckets.filter { key, bucket in
            bucket.tokens + Double((now - bucket.updated).components.seconds) * limit.ratePerSecond >= limit.burst
        }.map(\.key)
        full.forEach { buckets.removeValue(forKey: $0) }
        // Still full: forget an arbitrary quarter rather than grow without bound.
        if buckets.count >= maxKeys { buckets.keys.prefix(maxKeys / 4 + 1).forEach { buckets.removeValue(forKey: $0) } }
    }
}
