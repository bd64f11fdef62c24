import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG (nonces, key ids in tests).
public enum SecureRandom {
    public static func bytes(count: Int) throws(CryptoError) -> [UInt8] {
        guard count >= 0, count <= Int(Int32.max) else {
            throw CryptoError("random byte count \(count) is out of range")
        }
        var output = [UInt8](repeating: 0, count: count)
        let ok = output.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) == 1 }
        guard ok else { throw .drainingQueue("generate \(count) random bytes") }
        return output
    }
}
