/// Standard base64 (RFC 4648 §4): receipts, x5c certificates, PEM bodies.
public enum Base64 {
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        Base64Codec.encode(bytes, alphabet: Base64Codec.standardAlphabet, pad: true)
    }

    /// Decodes standard base64, ignoring ASCII whitespace (receipts arrive wrapped at 64 or 76
    /// columns, sometimes with CRLF) and accepting missing padding. Returns nil for any other
    /// character or an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        Base64Codec.decode(text, alphabet: Base64Codec.standard, skipWhitespace: true)
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
        Base64Codec.decode(text, alphabet: Base64Codec.url, skipWhitespace: false)
    }

    /// The same, straight from UTF-8 bytes (a JWS segment), without making a String first.
    public static func decode(utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        Base64Codec.decode(utf8, alphabet: Base64Codec.url, skipWhitespace: false)
    }
}

enum Base64Codec {
    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let standard = DecodingTables(standardAlphabet)
    static let url = DecodingTables(urlAlphabet)

    private static let invalid: UInt8 = 0xFF

    /// An alphabet's decoding tables: character → value (`invalid` outside the alphabet), and for
    /// runs of whole groups one table per position in a group of four characters, holding the
    /// value's bits already where they land in the group's three bytes (a little-endian UInt32),
    /// so a group is four loads and three ORs; outside the alphabet the top byte is set.
    struct DecodingTables: Sendable {
        let values: [UInt8]
        let groups: [UInt32]

        init(_ alphabet: [UInt8]) {
            values = decodingTable(alphabet)
            var groups = [UInt32](repeating: 0xFF00_0000, count: 4 * 256)
            for (value, char) in alphabet.enumerated() {
                let v = UInt32(value), c = Int(char)
                groups[c] = v << 2
                groups[256 + c] = v >> 4 | (v & 0x0F) << 12
                groups[512 + c] = (v >> 2) << 8 | (v & 0x03) << 22
                groups[768 + c] = v << 16
            }
            self.groups = groups
        }
    }

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

    static func decode(_ text: some StringProtocol, alphabet: DecodingTables, skipWhitespace: Bool) -> [UInt8]? {
        // Work on contiguous UTF-8: iterating a generic StringProtocol's view is several times slower.
        var string = String(text)
        return string.withUTF8 { decode($0, alphabet: alphabet, skipWhitespace: skipWhitespace) }
    }

    /// Whole groups of alphabet characters, eight characters (six bytes) a turn, until fewer are
    /// left or one is not in the alphabet (padding, whitespace, anything else: the caller goes on
    /// from there a character at a time). Returns (characters read, bytes written). Each turn
    /// stores two 4-byte words, one byte past the six: `decode`'s buffer has room for it.
    private static func decodeGroups(_ input: UnsafePointer<UInt8>, count: Int, groups: UnsafePointer<UInt32>,
                                     into out: UnsafeMutablePointer<UInt8>) -> (read: Int, written: Int) {
        var index = 0, length = 0
        while index + 8 <= count {
            let first = groups[Int(input[index])] | groups[256 + Int(input[index + 1])]
                | groups[512 + Int(input[index + 2])] | groups[768 + Int(input[index + 3])]
            let second = groups[Int(input[index + 4])] | groups[256 + Int(input[index + 5])]
                | groups[512 + Int(input[index + 6])] | groups[768 + Int(input[index + 7])]
            if (first | second) & 0xFF00_0000 != 0 { break }
            UnsafeMutableRawPointer(out + length).storeBytes(of: first.littleEndian, as: UInt32.self)
            UnsafeMutableRawPointer(out + length + 3).storeBytes(of: second.littleEndian, as: UInt32.self)
            length += 6
            index += 8
        }
        return (index, length)
    }

    /// Eight, else four, alphabet characters at a time while the input has no whitespace or padding (the
    /// common case: JWS segments, receipts sent unwrapped), one at a time otherwise, with the same
    /// verdicts either way: whitespace skipped only when asked, padding only at the end, nothing
    /// outside the alphabet, no impossible length.
    static func decode(_ utf8: UnsafeBufferPointer<UInt8>, alphabet: DecodingTables, skipWhitespace: Bool) -> [UInt8]? {
        let count = utf8.count
        guard count > 0, let input = utf8.baseAddress else { return [] }
        var failed = false
        // At most 3 bytes per 4 alphabet characters, plus 2 for a final group of 2 or 3 (and the
        // one byte `decodeGroups` stores past its six).
        let output = alphabet.values.withUnsafeBufferPointer { table -> [UInt8] in
            alphabet.groups.withUnsafeBufferPointer { groups -> [UInt8] in
                [UInt8](unsafeUninitializedCapacity: count / 4 * 3 + 3) { out, written in
                    var length = 0
                    var accumulator: UInt32 = 0
                    var pending = 0
                    var padding = 0
                    var index = 0
                    while index < count {
                        if pending == 0, padding == 0, index + 8 <= count {
                            let (read, decoded) = decodeGroups(input + index, count: count - index, groups: groups.baseAddress!,
                                                               into: out.baseAddress! + length)
                            if read > 0 {
                                index += read
                                length += decoded
                                continue
                            }
                        }
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
        }
        return failed ? nil : output
    }
}
