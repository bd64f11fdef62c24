import Crypto
import Foundation

/// A compact JWS (RFC 7515 §7.1) split and decoded, nothing verified yet.
///
/// Parsing follows PyJWT (which Apple's Python `SignedDataVerifier` uses) so that the same token
/// is refused by both: exactly three segments, canonical base64url (optional `=` padding), header
/// and payload JSON objects, `kid` a string, `crit` only with extensions we understand (none).
struct CompactJWS {
    let header: [String: Any]
    let payload: SignedPayload
    /// `BASE64URL(header) "." BASE64URL(payload)`: the bytes the signature covers.
    let signingInput: ArraySlice<UInt8>
    let signature: [UInt8]
    /// For a cached header: SHA-256 already fed with `BASE64URL(header) "."`; `payloadSegment`
    /// is the rest of the signing input.
    let signingPrefix: DigestPrefix?
    let payloadSegment: ArraySlice<UInt8>

    static func parse(_ token: String) -> Result<CompactJWS, JWSVerificationFailure> {
        let bytes = Array(token.utf8)
        guard let lastDot = bytes.lastIndex(of: UInt8(ascii: ".")),
              let firstDot = firstDot(in: bytes), firstDot < lastDot else {
            return .failure(.init(.verificationFailure, "JWS does not have three segments"))
        }
        let headerSegment = bytes[..<firstDot]
        // A header seen before (the same signing chain) is not decoded and parsed again.
        let cachedHeader = JWSHeaderCache.shared.lookup(headerSegment)
        var headerBytes: [UInt8] = []
        if cachedHeader == nil {
            guard let decoded = decodeSegment(headerSegment) else {
                return .failure(.init(.verificationFailure, "JWS header is not canonical base64url"))
            }
            headerBytes = decoded
        }
        let payloadSegment = bytes[(firstDot + 1)..<lastDot]
        guard let payloadBytes = decodeSegment(payloadSegment) else {
            return .failure(.init(.verificationFailure, "JWS payload is not canonical base64url"))
        }
        guard let signature = decodeSegment(bytes[(lastDot + 1)...]) else {
            return .failure(.init(.verificationFailure, "JWS signature is not canonical base64url"))
        }
        let header: [String: Any]
        if let cachedHeader {
            header = cachedHeader.header
        } else {
            guard let parsed = jsonObject(headerBytes) else {
                return .failure(.init(.verificationFailure, "JWS header is not a JSON object"))
            }
            header = parsed
            JWSHeaderCache.shared.insert(headerSegment, header: parsed)
        }
        if let problem = headerProblem(header) { return .failure(.init(.verificationFailure, problem)) }
        guard let payload = SignedPayload(payloadBytes) else {
            return .failure(.init(.verificationFailure, "JWS payload is not a JSON object"))
        }
        return .success(CompactJWS(header: header, payload: payload, signingInput: bytes[..<lastDot], signature: signature,
                                   signingPrefix: cachedHeader?.signingPrefix, payloadSegment: payloadSegment))
    }

    /// ES256 over the signing input; after a cached header only the payload segment is hashed.
    func signatureVerifies(with key: PublicKey) -> Bool {
        guard signature.count == 64 else { return false }
        if let signingPrefix { return key.verify(rawSignature: signature, prefix: signingPrefix, suffix: payloadSegment) }
        return key.verify(rawSignature: signature, message: signingInput)
    }

    /// The first `.`, found with memchr: it follows the ~5.5 KB header segment, which a
    /// byte-at-a-time search walked on every JWS (the last `.` is found from the end, near).
    private static func firstDot(in bytes: [UInt8]) -> Int? {
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress, let found = memchr(base, Int32(UInt8(ascii: ".")), buffer.count) else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// PyJWT's header rules: `kid` must be a string; `crit` names extensions the verifier must
    /// understand, and we understand none (PyJWT only `b64`, which Apple never sets); an
    /// unencoded payload (`b64: false`) is not a compact JWS we accept.
    private static func headerProblem(_ header: [String: Any]) -> String? {
        if let kid = header["kid"], !(kid is String) { return "JWS kid header is not a string" }
        if header["crit"] != nil { return "JWS crit header names an unsupported extension" }
        if let b64 = header["b64"], isBool(b64), (b64 as? Bool) == false { return "JWS with an unencoded payload (b64: false)" }
        return nil
    }

    /// Strict base64url as PyJWT checks it: alphabet only, at most two trailing `=` and then a
    /// length multiple of 4, no impossible length, no stray bits in the last character.
    static func decodeSegment(_ segment: ArraySlice<UInt8>) -> [UInt8]? {
        var end = segment.endIndex
        var padding = 0
        while end > segment.startIndex, segment[end - 1] == UInt8(ascii: "=") {
            end -= 1
            padding += 1
            if padding > 2 { return nil }
        }
        if padding > 0, segment.count % 4 != 0 { return nil }
        let stripped = segment[segment.startIndex..<end]
        let remainder = stripped.count % 4
        if remainder == 1 { return nil }
        if remainder > 0, let last = stripped.last {
            guard let value = base64URLValue(last) else { return nil }
            // 2 leftover chars carry 1 byte (4 spare bits), 3 carry 2 bytes (2 spare bits).
            let spareMask: UInt8 = remainder == 2 ? 0x0F : 0x03
            if value & spareMask != 0 { return nil }
        }
        return stripped.withUnsafeBufferPointer { Base64URL.decode(utf8: $0) }
    }

    private static func base64URLValue(_ char: UInt8) -> UInt8? {
        switch char {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return char - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return char - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return char - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return nil
        }
    }

    static func jsonObject(_ bytes: [UInt8]) -> [String: Any]? { JSONObjectReader.objectOrFallback(bytes) }
}

/// A JWS payload as read: the fields the verifier and the decoders use, straight from the bytes
/// when `PayloadFields` reads them, else from the dictionary `JSONObjectReader.objectOrFallback`
/// makes (which also decides whether the payload is a JSON object at all, as before).
struct SignedPayload {
    private enum JSON {
        case bytes([UInt8])
        case object([String: Any])
    }

    let fields: JSONFields
    private let json: JSON

    init?(_ bytes: [UInt8]) {
        if let read = PayloadFields.read(bytes) {
            fields = JSONFields(read)
            json = .bytes(bytes)
        } else if let object = JSONObjectReader.objectOrFallback(bytes) {
            fields = JSONFields(object)
            json = .object(object)
        } else {
            return nil
        }
    }

    /// The whole object; the bytes `PayloadFields` read are a JSON object for `objectOrFallback` too.
    var object: [String: Any] {
        switch json {
        case .object(let object): return object
        case .bytes(let bytes): return JSONObjectReader.objectOrFallback(bytes) ?? [:]
        }
    }
}

/// JSONSerialization hands back NSNumber for both numbers and booleans; this tells them apart.
/// (On Linux `1 is Bool` is true through bridging; only booleans have objCType "c" here.)
func isBool(_ value: Any) -> Bool {
    guard let number = value as? NSNumber else { return false }
    return number.objCType.pointee == CChar(UInt8(ascii: "c"))
}

/// JSON null, tested on the value's type: `value is NSNull` on a Swift string or array first
/// bridges it to an NSString or NSArray (a copy of the ~4 KB `x5c` list on every JWS).
func isNull(_ value: Any) -> Bool { type(of: value) is NSNull.Type }
