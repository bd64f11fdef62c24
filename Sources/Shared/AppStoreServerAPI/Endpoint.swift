import Foundation

/// One App Store Server API request before authentication: method, path, query and JSON body,
/// as Apple's library builds them. Ids that go into a path are checked first, so nothing from
/// outside can change the path (no `/`, `?`, `%` or `..`).
struct Endpoint: Sendable {
    var method: String
    var path: String
    var query: [(String, String)] = []
    var body: [UInt8]?

    /// Ids Apple issues are digits, letters, `.`, `_` and `-`; anything else is refused.
    static func pathId(_ raw: String, _ what: String) -> Result<String, APIFailure> { PlainId.check(raw, what) }

    static func json(_ value: some Encodable) -> Result<[UInt8], APIFailure> {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return .failure(APIFailure(.invalidRequest, "cannot encode the request body")) }
        return .success([UInt8](data))
    }

    /// `base` + path + query, every query value percent-encoded (RFC 3986 unreserved kept).
    func url(base: URL) -> URL? {
        var text = base.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        text += path
        if !query.isEmpty {
            text += "?" + query.map { "\(Self.encode($0.0))=\(Self.encode($0.1))" }.joined(separator: "&")
        }
        return URL(string: text)
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }
}

/// An id that may stand as a path segment of an App Store Server API URL.
public enum PlainId {
    public static func check(_ raw: String, _ what: String) -> Result<String, APIFailure> {
        let bytes = raw.utf8
        guard !bytes.isEmpty, bytes.count <= APILimits.maxPathIdBytes, raw != ".", raw != "..",
              bytes.allSatisfy({ byte in
                  (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                      || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                      || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
              }) else {
            return .failure(APIFailure(.invalidRequest, "\(what) is not a plain id (1...\(APILimits.maxPathIdBytes) of A-Z a-z 0-9 . _ -)"))
        }
        return .success(raw)
    }
}
