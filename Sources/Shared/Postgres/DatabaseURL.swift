import Foundation

/// `DATABASE_URL` as printed or logged: the password replaced by `***`, in every form libpq takes
/// (docs/configuration.md): a URI `postgres://user:secret@host1:5432,host2:5433/db?...` (several
/// hosts included, where `URLComponents` gives up), a `password=` URI parameter, or a `key=value`
/// conninfo string's `password=secret` / `password='se cret'`.
public enum DatabaseURL {
    public static func redacted(_ url: String) -> String {
        if isURI(url) {
            var text = url
            if let password = authorityPassword(url) { text.replaceSubrange(password, with: "***") }
            return redactingQueryPassword(text)
        }
        return redactingKeywordPassword(url)
    }

    private static func isURI(_ url: String) -> Bool { url.hasPrefix("postgres") && url.contains("://") }

    /// Where the password of a URI's `user:password@` lies (hosts may be several, which
    /// `URLComponents` cannot read).
    private static func authorityPassword(_ url: String) -> Range<String.Index>? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") else { return nil }
        return url.index(after: colon)..<at
    }

    /// `message` (libpq's complaint about `url`, which may quote it: "invalid percent-encoded token:
    /// "se%zzret"") with the password in every spelling the URL holds replaced by `***`.
    public static func scrubbing(_ message: String, of url: String) -> String {
        var spellings: Set<String> = []
        if isURI(url) {
            if let password = authorityPassword(url) { spellings.insert(String(url[password])) }
            if let query = url.firstIndex(of: "?") {
                for pair in url[url.index(after: query)...].split(separator: "&") where pair.lowercased().hasPrefix("password=") {
                    spellings.insert(String(pair.dropFirst("password=".count)))
                }
            }
        } else {
            var index = url.startIndex
            while index < url.endIndex {
                let atWordStart = index == url.startIndex || url[url.index(before: index)].isWhitespace
                if atWordStart, let start = passwordKeyword(url[index...]) {
                    let end = skipValue(url, from: start)
                    let value = url[start..<end]
                    spellings.insert(String(value))
                    spellings.insert(String(value.trimmingCharacters(in: CharacterSet(charactersIn: "'"))))
                    index = end
                } else {
                    index = url.index(after: index)
                }
            }
        }
        for spelling in Array(spellings) { if let decoded = spelling.removingPercentEncoding { spellings.insert(decoded) } }
        // Longest first, so a spelling that contains another is replaced whole.
        return spellings.filter { !$0.isEmpty }.sorted { $0.count > $1.count }.reduce(message) {
            $0.replacingOccurrences(of: $1, with: "***")
        }
    }

    /// `...?sslmode=require&password=secret&...`
    private static func redactingQueryPassword(_ url: String) -> String {
        guard let query = url.firstIndex(of: "?") else { return url }
        let parameters = url[url.index(after: query)...].split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            pair.lowercased().hasPrefix("password=") ? "password=***" : String(pair)
        }
        return String(url[...query]) + parameters.joined(separator: "&")
    }

    /// `host=a password='it''s' dbname=b`: libpq's quoting (single quotes, backslash escapes).
    private static func redactingKeywordPassword(_ conninfo: String) -> String {
        var output = ""
        var index = conninfo.startIndex
        while index < conninfo.endIndex {
            let rest = conninfo[index...]
            let atWordStart = index == conninfo.startIndex || conninfo[conninfo.index(before: index)].isWhitespace
            guard atWordStart, let match = passwordKeyword(rest) else {
                output.append(conninfo[index])
                index = conninfo.index(after: index)
                continue
            }
            output += "password=***"
            index = skipValue(conninfo, from: match)
        }
        return output
    }

    /// Where the value starts when `text` begins with `password` `=` (spaces allowed around `=`).
    private static func passwordKeyword(_ text: Substring) -> String.Index? {
        guard text.lowercased().hasPrefix("password") else { return nil }
        var index = text.index(text.startIndex, offsetBy: 8)
        while index < text.endIndex, text[index].isWhitespace { index = text.index(after: index) }
        guard index < text.endIndex, text[index] == "=" else { return nil }
        index = text.index(after: index)
        while index < text.endIndex, text[index].isWhitespace { index = text.index(after: index) }
        return index
    }

    private static func skipValue(_ text: String, from start: String.Index) -> String.Index {
        var index = start
        guard index < text.endIndex else { return index }
        if text[index] == "'" {
            index = text.index(after: index)
            while index < text.endIndex {
                if text[index] == "\\" {
                    index = text.index(after: index)
                    if index < text.endIndex { index = text.index(after: index) }
                    continue
                }
                if text[index] == "'" { return text.index(after: index) }
                index = text.index(after: index)
            }
            return index
        }
        while index < text.endIndex, !text[index].isWhitespace {
            if text[index] == "\\" { index = text.index(after: index) }
            if index < text.endIndex { index = text.index(after: index) }
        }
        return index
    }
}
