import Foundation
import COpenSSL

/// HMAC (RFC 2104) over OpenSSL's one-shot `HMAC()`: HS256 JWTs of end users.
public enum HMAC {
    public static func sha256(key: [UInt8], message: some ContiguousBytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = message.withUnsafeBytes { input in
            key.withUnsafeBufferPointer { keyBytes in
                output.withUnsafeMutableBufferPointer { out in
                    COpenSSL.HMAC(DigestAlgorithm.sha256.evpMD, keyBytes.baseAddress, Int32(keyBytes.count),
                                  input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count, out.baseAddress, &length) != nil
                }
            }
        }
        // Like `hash`: fails only when OpenSSL itself is broken, never because of the input.
        precondition(ok && length == 32, "OpenSSL HMAC-SHA256 failed")
        return output
    }
}

/// Compares two byte strings without an early exit, so timing does not reveal a matching prefix.
public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    var difference = UInt8(a.count == b.count ? 0 : 1)
    for i in 0..<max(a.count, b.count) {
        difference |= (i < a.count ? a[i] : 0) ^ (i < b.count ? b[i] : 0)
    }
    return difference == 0
}
