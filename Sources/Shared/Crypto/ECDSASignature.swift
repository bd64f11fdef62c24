/// An ECDSA signature (r, s) in both encodings Apple uses:
/// - `raw`: r‖s, each big-endian and left-padded to the curve size (JWS ES256, RFC 7518 §3.4: 64 bytes);
/// - `der`: ASN.1 `SEQUENCE { INTEGER r, INTEGER s }` (OpenSSL, promotional-offer signatures).
/// Conversions are strict: only canonical DER is accepted, so one signature has one encoding.
public struct ECDSASignature: Sendable, Hashable {
    /// r‖s, each half `componentLength` bytes.
    public let raw: [UInt8]

    /// Bytes per component: 32 for P-256, 48 for P-384.
    public var componentLength: Int { raw.count / 2 }

    /// Largest component we accept: P-521 uses 66 bytes.
    static let maxComponentLength = 66

    /// From r‖s. The two halves must have equal length (64 bytes for ES256).
    public init(raw: [UInt8]) throws(CryptoError) {
        guard raw.count % 2 == 0, raw.count >= 2, raw.count <= 2 * Self.maxComponentLength else {
            throw CryptoError("raw ECDSA signature must be r||s of equal halves, got \(raw.count) bytes")
        }
        self.raw = raw
    }

    /// From canonical DER; `componentLength` fixes the width of `raw` (32 for P-256).
    public init(der: [UInt8], componentLength: Int = 32) throws(CryptoError) {
        guard componentLength >= 1, componentLength <= Self.maxComponentLength else {
            throw CryptoError("ECDSA component length \(componentLength) is out of range")
        }
        guard let (r, s) = DERSignatureCodec.decode(der) else {
            throw CryptoError("ECDSA signature is not canonical DER SEQUENCE { INTEGER r, INTEGER s }")
        }
        guard r.count <= componentLength, s.count <= componentLength else {
            throw CryptoError("ECDSA signature component is longer than \(componentLength) bytes")
        }
        let pad = { (value: [UInt8]) in [UInt8](repeating: 0, count: componentLength - value.count) + value }
        self.raw = pad(r) + pad(s)
    }

    public var r: [UInt8] { Array(raw[..<componentLength]) }
    public var s: [UInt8] { Array(raw[componentLength...]) }

    /// Canonical DER encoding.
    public var der: [UInt8] { DERSignatureCodec.encode(r: raw[..<componentLength], s: raw[componentLength...]) }
}

/// Minimal, strict DER for `SEQUENCE { INTEGER, INTEGER }` with non-negative integers.
enum DERSignatureCodec {
    /// Returns the magnitudes of r and s without leading zero bytes.
    static func decode(_ der: [UInt8]) -> ([UInt8], [UInt8])? {
        var index = 0
        guard der.count >= 2, der[0] == 0x30 else { return nil }
        index = 1
        guard let bodyLength = readLength(der, &index), index + bodyLength == der.count else { return nil }
        guard let r = readPositiveInteger(der, &index), let s = readPositiveInteger(der, &index),
              index == der.count else { return nil }
        return (r, s)
    }

    /// Written into one array (a JWS verification converts every r‖s signature to DER).
    static func encode(r: ArraySlice<UInt8>, s: ArraySlice<UInt8>) -> [UInt8] {
        // Each INTEGER: the magnitude without leading zeros, after a 0x00 when empty or its top bit is set.
        let r = r.drop { $0 == 0 }, s = s.drop { $0 == 0 }
        let rPad = r.first.map { $0 & 0x80 != 0 } ?? true, sPad = s.first.map { $0 & 0x80 != 0 } ?? true
        let rCount = r.count + (rPad ? 1 : 0), sCount = s.count + (sPad ? 1 : 0)
        let bodyCount = 1 + lengthSize(rCount) + rCount + 1 + lengthSize(sCount) + sCount
        var out: [UInt8] = []
        out.reserveCapacity(1 + lengthSize(bodyCount) + bodyCount)
        func appendLength(_ count: Int) {
            if count >= 0x80 { out.append(0x81) }
            out.append(UInt8(count))
        }
        func appendInteger(_ digits: ArraySlice<UInt8>, pad: Bool, count: Int) {
            out.append(0x02)
            appendLength(count)
            if pad { out.append(0) }
            out.append(contentsOf: digits)
        }
        out.append(0x30)
        appendLength(bodyCount)
        appendInteger(r, pad: rPad, count: rCount)
        appendInteger(s, pad: sPad, count: sCount)
        return out
    }

    private static func lengthSize(_ count: Int) -> Int { count < 0x80 ? 1 : 2 }

    /// Short form, or 0x81 with a value >= 0x80 (anything else is non-canonical or too long).
    private static func readLength(_ der: [UInt8], _ index: inout Int) -> Int? {
        guard index < der.count else { return nil }
        let first = der[index]
        index += 1
        if first < 0x80 { return Int(first) }
        guard first == 0x81, index < der.count, der[index] >= 0x80 else { return nil }
        defer { index += 1 }
        return Int(der[index])
    }

    private static func readPositiveInteger(_ der: [UInt8], _ index: inout Int) -> [UInt8]? {
        guard index < der.count, der[index] == 0x02 else { return nil }
        index += 1
        guard let length = readLength(der, &index), length >= 1, index + length <= der.count else { return nil }
        let bytes = Array(der[index..<index + length])
        index += length
        if bytes[0] & 0x80 != 0 { return nil }  // negative
        if bytes.count > 1, bytes[0] == 0, bytes[1] & 0x80 == 0 { return nil }  // non-minimal
        return Array(bytes.drop { $0 == 0 })
    }
}
