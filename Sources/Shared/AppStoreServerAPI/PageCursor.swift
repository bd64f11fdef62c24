/// Guards a pagination walk: at most `maxPages` pages, and a cursor Apple repeats (a loop) or
/// omits while claiming `hasMore` ends the walk as truncated instead of spinning forever.
public struct PageCursor: Sendable, Equatable {
    public let maxPages: Int
    public private(set) var pages = 0
    public private(set) var truncated = false
    /// Truncated by the page limit alone (more pages were there to read), not by a cursor Apple
    /// repeated or left out: only then does a narrower window read the rest.
    public private(set) var reachedPageLimit = false
    private var seen: Set<String> = []

    public init(maxPages: Int) { self.maxPages = max(1, maxPages) }

    /// Records a received page; returns the cursor to ask for next, or nil to stop.
    public mutating func next(hasMore: Bool, cursor: String?) -> String? {
        pages += 1
        guard hasMore else { return nil }
        guard let cursor, !cursor.isEmpty, seen.insert(cursor).inserted else {
            truncated = true
            return nil
        }
        guard pages < maxPages else {
            truncated = true
            reachedPageLimit = true
            return nil
        }
        return cursor
    }
}
