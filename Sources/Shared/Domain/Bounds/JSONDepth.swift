import Glibc

/// How deeply a JSON text nests objects and arrays, found in one pass over the bytes (strings
/// skipped, escapes honoured), so that ingest and decode refuse a deep body before a parser recurses
/// into it. Malformed text is the parser's business: this only counts brackets.
public enum JSONDepth {
    private static let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")

    /// Whether `bytes` nest deeper than `limit` (stops at the first bracket past it). Strings are
    /// skipped with `memchr`: a V2 body is one ~10 KB string, which a byte-at-a-time walk made 5 % of
    /// decode's samples.
    public static func exceeds(_ bytes: [UInt8], limit: Int = EventBounds.maxJSONDepth) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return false }
            var depth = 0
            var index = 0
            while index < buffer.count {
                switch base[index] {
                case quote:
                    // An unterminated string hides the rest, as it would from a parser.
                    guard let close = closingQuote(base, contentStart: index + 1, count: buffer.count) else { return false }
                    index = close
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    if depth > limit { return true }
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth = max(0, depth - 1)
                default: break
                }
                index += 1
            }
            return false
        }
    }

    /// The index of the quote that ends a string whose content starts at `contentStart`: the first
    /// quote after an even run of backslashes (escapes pair from the left, so an odd run escapes it).
    private static func closingQuote(_ base: UnsafePointer<UInt8>, contentStart: Int, count: Int) -> Int? {
        var from = contentStart
        while from < count, let hit = memchr(base + from, Int32(quote), count - from) {
            let at = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
            var run = 0
            while at - run - 1 >= contentStart, base[at - run - 1] == backslash { run += 1 }
            if run % 2 == 0 { return at }
            from = at + 1
        }
        return nil
    }
}

extension EventBounds {
    /// A body from outside that nests deeper than `maxJSONDepth`, as a failure with its kind.
    public static func jsonDepth(_ bytes: [UInt8], field: String = "body") -> PermanentFailure? {
        guard JSONDepth.exceeds(bytes, limit: maxJSONDepth) else { return nil }
        return PermanentFailure("json_too_deep", "\(field) nests objects and arrays deeper than \(maxJSONDepth) levels")
    }
}
