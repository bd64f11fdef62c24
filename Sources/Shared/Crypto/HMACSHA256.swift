/// HMAC-SHA256 (RFC 2104) over the one-shot SHA-256: webhook bodies are signed with it.
public enum HMACSHA256 {
    static let blockSize = 64

    public static func authenticate(_ message: [UInt8], key: [UInt8]) -> [UInt8] {
        var block = key.count > blockSize ? SHA256.hash(key) : key
        block += [UInt8](repeating: 0, count: blockSize - block.count)
        let inner = SHA256.hash(block.map { $0 ^ 0x36 } + message)
        return SHA256.hash(block.map { $0 ^ 0x5c } + inner)
    }

    /// Compares without an early exit, so the time taken does not tell how many bytes matched.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
