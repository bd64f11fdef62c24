/// Word-at-a-time byte-class scans: eight bytes per step where long runs of plain text need no look
/// (the byte-level JSON readers crossing a receipt's base64 or a nested JWS, the JSON writer's strings,
/// the topic records' strings, the bounds check on every id). One place for the bit tricks.
public enum PlainASCII {
    @usableFromInline static let ones: UInt64 = 0x0101_0101_0101_0101
    @usableFromInline static let highs: UInt64 = 0x8080_8080_8080_8080

    /// The high bit of each zero byte of `word` (exact for the lowest zero byte; enough to stop at).
    @inlinable static func zeroBytes(_ word: UInt64) -> UInt64 { (word &- ones) & ~word & highs }

    /// With no high bit set in `word`: the subtraction borrows into a byte's high bit exactly when a byte
    /// (the lowest such, and perhaps those above it) is below 0x20.
    @inlinable static func controlBytes(_ word: UInt64) -> UInt64 { (word &- 0x20 &* ones) & highs }

    @inlinable static func load(_ base: UnsafePointer<UInt8>, at index: Int) -> UInt64 {
        UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
    }

    /// The first index from `index` where an 8-byte word holds a `"`, a `\`, a control character or
    /// a non-ASCII byte, or fewer than 8 bytes remain: every byte before it is plain ASCII text.
    @inlinable
    public static func wordsEnd(_ base: UnsafePointer<UInt8>, from index: Int, end: Int) -> Int {
        var index = index
        while end - index >= 8 {
            let word = load(base, at: index)
            if word & highs != 0 || controlBytes(word) != 0
                || zeroBytes(word ^ (0x22 &* ones)) != 0 || zeroBytes(word ^ (0x5C &* ones)) != 0 { break }
            index += 8
        }
        return index
    }

    /// The first index where an 8-byte word holds a byte JSON text must escape (below 0x20, `"`, `\`,
    /// `/` as `JSONEncoder` escapes it), or fewer than 8 bytes remain. Bytes above 0x7F need no escape.
    static func unescapedWordsEnd(_ base: UnsafePointer<UInt8>, count: Int) -> Int {
        var index = 0
        while count - index >= 8 {
            let word = load(base, at: index)
            // High bits cleared first: a byte ≥ 0x80 is neither small nor special (`~word` masks it out).
            let small = controlBytes(word & ~highs) & ~word
            if small | zeroBytes(word ^ (0x22 &* ones)) | zeroBytes(word ^ (0x5C &* ones)) | zeroBytes(word ^ (0x2F &* ones)) != 0 { break }
            index += 8
        }
        return index
    }

    /// Whether every byte is below 0x80.
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        allBytes(bytes, wordPasses: { $0 & highs == 0 }, bytePasses: { $0 < 0x80 })
    }

    /// Whether every byte is printable ASCII (0x20..<0x7F): adding 1 carries 0x7F, and only 0x7F among
    /// ASCII bytes, into a high bit.
    static func isPrintable(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        allBytes(bytes, wordPasses: { $0 & highs == 0 && controlBytes($0) == 0 && ($0 &+ ones) & highs == 0 },
                 bytePasses: { (0x20..<0x7F).contains($0) })
    }

    @inline(__always)
    private static func allBytes(_ bytes: UnsafeBufferPointer<UInt8>, wordPasses: (UInt64) -> Bool, bytePasses: (UInt8) -> Bool) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var index = 0
        while bytes.count - index >= 8 {
            guard wordPasses(load(base, at: index)) else { return false }
            index += 8
        }
        while index < bytes.count {
            guard bytePasses(base[index]) else { return false }
            index += 1
        }
        return true
    }
}
