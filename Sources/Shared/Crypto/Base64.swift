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

    static func decode(_ utf8: UnsafeBufferPointer<UInt8>, table: [UInt8], skipWhitespace: Bool) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(utf8.count / 4 * 3)
        var accumulator: UInt32 = 0
        var pending = 0
        var padding = 0
        for char in utf8 {
            if skipWhitespace, char == 0x20 || char == 0x09 || char == 0x0A || char == 0x0D { continue }
            if char == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            // Data after padding, or a character outside the alphabet.
            guard padding == 0 else { return nil }
            let value = table[Int(char)]
            guard value != invalid else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            pending += 1
            if pending == 4 {
                output.append(UInt8(accumulator >> 16 & 0xFF))
                output.append(UInt8(accumulator >> 8 & 0xFF))
                output.append(UInt8(accumulator & 0xFF))
                accumulator = 0
                pending = 0
            }
        }
        switch pending {
        case 0:
            guard padding == 0 else { return nil }
        case 2:
            guard padding == 0 || padding == 2 else { return nil }
            output.append(UInt8(accumulator >> 4 & 0xFF))
        case 3:
            guard padding == 0 || padding == 1 else { return nil }
            output += [UInt8(accumulator >> 10 & 0xFF), UInt8(accumulator >> 2 & 0xFF)]
        default:
            return nil
        }
        return output
    }
}
