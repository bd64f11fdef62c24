/// A seeded random generator (SplitMix64): the same seed plays the same population, so a
/// mismatch found once can be replayed (STYLE.md: randomness injected).
public struct SimRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A generator for one user, independent of how many draws other users made.
    public static func forUser(seed: UInt64, index: Int) -> SimRandom {
        var mixer = SimRandom(seed: seed ^ (UInt64(index) &* 0xD6E8_FEB8_6659_FD93))
        return SimRandom(seed: mixer.next())
    }

    public mutating func chance(_ probability: Double) -> Bool { Double.random(in: 0..<1, using: &self) < probability }

    public mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }

    public mutating func ms(_ range: ClosedRange<Int64>) -> Int64 { Int64.random(in: range, using: &self) }

    /// Exponentially distributed wait with the given mean.
    public mutating func exponential(meanMs: Int64) -> Int64 {
        let u = Double.random(in: Double.ulpOfOne..<1, using: &self)
        return Int64(-Double(meanMs) * _log(u))
    }

    /// Picks by weight; nil if every weight is zero.
    public mutating func weighted<T>(_ options: [(T, Int)]) -> T? {
        let total = options.reduce(0) { $0 + max(0, $1.1) }
        guard total > 0 else { return nil }
        var pick = Int.random(in: 0..<total, using: &self)
        for (value, weight) in options where weight > 0 {
            if pick < weight { return value }
            pick -= weight
        }
        return nil
    }
}

/// Natural logarithm without Foundation (series on the mantissa), accurate to ~1e-12.
private func _log(_ x: Double) -> Double {
    let exponent = Double(x.exponent)
    let m = x.significand  // [1, 2)
    let y = (m - 1) / (m + 1)
    var term = y, sum = 0.0, n = 1.0
    while abs(term) > 1e-15 {
        sum += term / n
        term *= y * y
        n += 2
    }
    return 2 * sum + exponent * 0.693_147_180_559_945_3
}
