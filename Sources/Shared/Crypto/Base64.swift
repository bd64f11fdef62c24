/// Standard base64 (RFC 4648 §4): receipts, x5c certificates, PEM bodies.
public enum Base64 {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes, alphabet: Base64Codec.standardAlphabet, pad: true)
    }

    /// Decodes standard base64, ignoring ASCII whitespace (receipts arrive wrapped at 64 or 76
    /// columns, sometimes with CRLF) and accepting missing padding. Returns nil for any other
    /// character or an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Base64Codec.decode(text, table: Base64Codec.standardTable, skipWhitespace: true)
    }
}

/// Base64url without padding (RFC 7515 §2): JWS header, payload and signature segments.
public enum Base64URL {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes, alphabet: Base64Codec.urlAlphabet, pad: false)
    }

    /// Decodes base64url with or without trailing `=` padding. No whitespace: a JWS segment
    /// never contains any, so its presence means the input is not what it claims.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Base64Codec.decode(text, table: Base64Codec.urlTable, skipWhitespace: false)
    }

    /// The same, straight from UTF-8 bytes (a JWS segment), without making a String first.
    public static func decode(utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        Base64Codec.decode(utf8, table: Base64Codec.urlTable, skipWhitespace: false)
    }
}

enum Base64Codec {
    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let standardTable = decodingTable(standardAlphabet)
    static let urlTable = decodingTable(urlAlphabet)

    private static let invalid: UInt8 = 0xFF

    private static func decodingTable(_ alphabet: [UInt8]) -> [UInt8] {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, char) in alphabet.enumerated() { table[Int(char)] = UInt8(value) }
        return table
    }

    static func encode(_ bytes: some Collection<UInt8>, alphabet: [UInt8], pad: Bool) -> String {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= input.count {
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            index += 3
        }
        let rest = input.count - index
        if rest == 1 {
            let n = UInt32(input[index]) << 16
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)]]
            if pad { out += Array("==".utf8) }
        } else if rest == 2 {
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
            if pad { out += Array("=".utf8) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: some StringProtocol, table: [UInt8], skipWhitespace: Bool) -> [UInt8]? {
        // Work on contiguous UTF-8: iterating a generic StringProtocol's view is several times slower.
        var string = String(text)
        return string.withUTF8 { decode($0, table: table, skipWhitespace: skipWhitespace) }
    }

    /// Four alphabet characters at a time while the input has no whitespace or padding (the
    /// common case: JWS segments, receipts sent unwrapped), one at a time otherwise, with the same
    /// verdicts either way: whitespace skipped only when asked, padding only at the end, nothing
    /// outside the alphabet, no impossible length.
    static func decode(_ utf8: UnsafeBufferPointer<UInt8>, table: [UInt8], skipWhitespace: Bool) -> [UInt8]? {
        let count = utf8.count
        guard count > 0, let input = utf8.baseAddress else { return [] }
        var failed = false
        // At most 3 bytes per 4 alphabet characters, plus 2 for a final group of 2 or 3.
        let output = table.withUnsafeBufferPointer { table -> [UInt8] in
            [UInt8](unsafeUninitializedCapacity: count / 4 * 3 + 3) { out, written in
                var length = 0
                var accumulator: UInt32 = 0
                var pending = 0
                var padding = 0
                var index = 0
                while index < count {
                    if pending == 0, padding == 0, index + 4 <= count {
                        let a = table[Int(input[index])], b = table[Int(input[index + 1])]
                        let c = table[Int(input[index + 2])], d = table[Int(input[index + 3])]
                        // Alphabet values are below 64; `invalid` (0xFF) has the top bits set.
                        if (a | b | c | d) & 0xC0 == 0 {
                            let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                            out[length] = UInt8(group >> 16 & 0xFF)
                            out[length + 1] = UInt8(group >> 8 & 0xFF)
                            out[length + 2] = UInt8(group & 0xFF)
                            length += 3
                            index += 4
                            continue
                        }
                    }
                    let char = input[index]
                    index += 1
                    if skipWhitespace, char == 0x20 || char == 0x09 || char == 0x0A || char == 0x0D { continue }
                    if char == UInt8(ascii: "=") {
                        padding += 1
                        continue
                    }
                    // Data after padding, or a character outside the alphabet.
                    let value = table[Int(char)]
                    guard padding == 0, value != invalid else {
                        failed = true
                        break
                    }
                    accumulator = accumulator << 6 | UInt32(value)
                    pending += 1
                    if pending == 4 {
                        out[length] = UInt8(accumulator >> 16 & 0xFF)
                        out[length + 1] = UInt8(accumulator >> 8 & 0xFF)
                        out[length + 2] = UInt8(accumulator & 0xFF)
                        length += 3
                        accumulator = 0
                        pending = 0
                    }
                }
                if !failed {
                    switch pending {
                    case 0:
                        failed = padding != 0
                    case 2:
                        if padding == 0 || padding == 2 {
                            out[length] = UInt8(accumulator >> 4 & 0xFF)
                            length += 1
                        } else {
                            failed = true
                        }
                    case 3:
                        if padding == 0 || padding == 1 {
                            out[length] = UInt8(accumulator >> 10 & 0xFF)
                            out[length + 1] = UInt8(accumulator >> 2 & 0xFF)
                            length += 2
                        } else {
                            failed = true
                        }
                    default:
                        failed = true
                    }
                }
                written = failed ? 0 : length
            }
        }
        return failed ? nil : output
    }
}
