/// The word-at-a-time scan the byte-level JSON readers use to cross long strings (a receipt's
/// base64, a nested JWS: thousands of bytes that need no look).
public enum PlainASCII {
    /// The first index from `index` where an 8-byte word holds a `"`, a `\`, a control character or
    /// a non-ASCII byte, or fewer than 8 bytes remain: every byte before it is plain ASCII text.
    @inlinable
    public static func wordsEnd(_ base: UnsafePointer<UInt8>, from index: Int, end: Int) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        func hasZeroByte(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }
        var index = index
        while end - index >= 8 {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
            // With no high bit set, `word - 0x20 * ones` borrows into a high bit exactly when a byte is below 0x20.
            if word & highs != 0 || (word &- 0x20 &* ones) & ~word & highs != 0
                || hasZeroByte(word ^ (0x22 &* ones)) || hasZeroByte(word ^ (0x5C &* ones)) { break }
            index += 8
        }
        return index
    }
}
