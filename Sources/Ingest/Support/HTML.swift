import Foundation

/// HTML escaped by construction (the habit of postgres-nio's `SQL`): literal segments are markup,
/// every interpolated `String` or number is escaped, and only another `HTML` value is spliced as is.
/// Ids on the support pages come from strangers, so there is no way to interpolate raw text.
struct HTML: ExpressibleByStringInterpolation, Sendable, Equatable {
    private(set) var markup: String

    init(stringLiteral value: String) { markup = value }
    init(stringInterpolation: StringInterpolation) { markup = stringInterpolation.markup }

    struct StringInterpolation: StringInterpolationProtocol {
        var markup = ""
        init(literalCapacity: Int, interpolationCount: Int) { markup.reserveCapacity(literalCapacity + 16 * interpolationCount) }
        mutating func appendLiteral(_ literal: String) { markup += literal }
        mutating func appendInterpolation(_ text: String) { markup += HTML.escape(text) }
        mutating func appendInterpolation<Number: BinaryInteger>(_ number: Number) { markup += String(number) }
        /// SVG coordinates: fixed precision, so the markup is stable and free of exponents.
        mutating func appendInterpolation(_ number: Double) { markup += String(format: "%.1f", number.isFinite ? number : 0) }
        mutating func appendInterpolation(_ html: HTML) { markup += html.markup }
        mutating func appendInterpolation(_ list: [HTML]) { for item in list { markup += item.markup } }
        /// One path segment of a same-site link: percent-encoded, then escaped for the attribute.
        mutating func appendInterpolation(pathSegment: String) { markup += HTML.escape(HTML.percentEncoded(pathSegment)) }
    }

    /// Text and attribute values (always written in double quotes): the five characters that
    /// can end a text node or an attribute.
    static func escape(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&#39;"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// RFC 3986 unreserved characters stay; everything else (`/`, `?`, `#`, `%`, spaces, UTF-8) is encoded.
    static func percentEncoded(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
