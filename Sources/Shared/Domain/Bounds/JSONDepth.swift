/// How deeply a JSON text nests objects and arrays, found in one pass over the bytes (strings
/// skipped, escapes honoured), so that ingest and decode refuse a deep body before a parser recurses
/// into it. Malformed text is the parser's business: this only counts brackets.
public enum JSONDepth {
    /// Whether `bytes` nest deeper than `limit` (stops at the first bracket past it).
    public static func exceeds(_ bytes: [UInt8], limit: Int = EventBounds.maxJSONDepth) -> Bool {
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "}"), UInt8(ascii: "]"): depth = max(0, depth - 1)
            default: break
            }
        }
        return false
    }
}

extension EventBounds {
    /// A body from outside that nests deeper than `maxJSONDepth`, as a failure with its kind.
    public static func jsonDepth(_ bytes: [UInt8], field: String = "body") -> PermanentFailure? {
        guard JSONDepth.exceeds(bytes, limit: maxJSONDepth) else { return nil }
        return PermanentFailure("json_too_deep", "\(field) nests objects and arrays deeper than \(maxJSONDepth) levels")
    }
}
