/// A SQL statement that is parameterised by construction (postgres-nio's habit): every
/// interpolated `\(value)` becomes a `$n` bind parameter sent apart from the text, so a value
/// can never change the statement. Literal segments are SQL text.
///
///     let sql: SQL = "SELECT id FROM users WHERE email = \(email) AND active = \(true)"
///     // text: SELECT id FROM users WHERE email = $1 AND active = $2
///
/// Identifiers that must vary go through `\(identifier: name)` (quoted) or the deliberately
/// ugly `\(unsafeSQL: text)` / `SQL(unsafeSQL:)`, which splice raw text.
/// Fragments compose (`\(fragment: other)`, `append`, `+`, `SQL.join`): placeholders are numbered
/// only when the statement is rendered, so composed fragments never collide.
///
/// `description` shows the text with `$n` placeholders, never the bound values.
public struct SQL: ExpressibleByStringInterpolation, Sendable, CustomStringConvertible {
    enum Part: Sendable {
        case text(String)
        case bind(PGValue)
    }

    private(set) var parts: [Part] = []

    public init(stringLiteral value: String) {
        if !value.isEmpty { parts = [.text(value)] }
    }

    public init(stringInterpolation: StringInterpolation) {
        parts = stringInterpolation.parts
    }

    /// Raw SQL text, spliced as is. Never pass data from outside the program through here.
    public init(unsafeSQL text: String) {
        if !text.isEmpty { parts = [.text(text)] }
    }

    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        var parts: [Part] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            parts.reserveCapacity(interpolationCount * 2 + 1)
        }

        public mutating func appendLiteral(_ literal: String) {
            if !literal.isEmpty { parts.append(.text(literal)) }
        }

        /// A value: becomes the next `$n` bind parameter.
        public mutating func appendInterpolation<Value: PGBindable>(_ value: Value) {
            parts.append(.bind(value.pgValue))
        }

        /// An optional value: NULL when nil. (Its own overload, so Swift does not warn about
        /// interpolating an Optional.)
        public mutating func appendInterpolation<Value: PGBindable>(_ value: Value?) {
            parts.append(.bind(value.pgValue))
        }

        /// Another statement fragment, its binds carried along.
        public mutating func appendInterpolation(fragment: SQL) {
            parts.append(contentsOf: fragment.parts)
        }

        /// An identifier (table, column), double-quoted with embedded quotes doubled.
        public mutating func appendInterpolation(identifier: String) {
            parts.append(.text(SQL.quoteIdentifier(identifier)))
        }

        /// Raw SQL text. Never pass data from outside the program through here.
        public mutating func appendInterpolation(unsafeSQL text: String) {
            appendLiteral(text)
        }
    }

    /// Appends another fragment; its bind parameters follow this statement's.
    public mutating func append(_ other: SQL) {
        parts.append(contentsOf: other.parts)
    }

    public static func + (lhs: SQL, rhs: SQL) -> SQL {
        var result = lhs
        result.append(rhs)
        return result
    }

    public static func += (lhs: inout SQL, rhs: SQL) {
        lhs.append(rhs)
    }

    /// Joins fragments with a separator, e.g. the rows of a multi-row `VALUES` list:
    ///
    ///     let rows = items.map { item -> SQL in "(\(item.id), \(item.name))" }
    ///     let sql: SQL = "INSERT INTO t (id, name) VALUES \(fragment: .join(rows, separator: ", "))"
    ///
    /// For large batches prefer one array parameter per column with `unnest` (see `PGConnection`):
    /// PostgreSQL caps a statement at 65535 bind parameters.
    public static func join(_ fragments: [SQL], separator: SQL) -> SQL {
        var result = SQL(unsafeSQL: "")
        for (index, fragment) in fragments.enumerated() {
            if index > 0 { result.append(separator) }
            result.append(fragment)
        }
        return result
    }

    /// Double-quotes an identifier for PostgreSQL (`a"b` -> `"a""b"`).
    public static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacingAll("\"", with: "\"\"") + "\""
    }

    /// The statement text with `$1`, `$2`... placeholders.
    public var text: String { render().text }

    /// The number of bind parameters.
    public var bindCount: Int {
        parts.reduce(0) { count, part in
            if case .bind = part { return count + 1 }
            return count
        }
    }

    public var description: String { text }

    /// Text with placeholders numbered in order, and the values in the same order.
    func render() -> (text: String, binds: [PGValue]) {
        var text = ""
        var binds: [PGValue] = []
        for part in parts {
            switch part {
            case .text(let segment):
                text += segment
            case .bind(let value):
                binds.append(value)
                text += "$\(binds.count)"
            }
        }
        return (text, binds)
    }
}

extension String {
    /// `replacingOccurrences` without pulling in Foundation's NSString bridge.
    func replacingAll(_ target: Character, with replacement: String) -> String {
        guard contains(target) else { return self }
        var result = ""
        result.reserveCapacity(count + 2)
        for character in self {
            if character == target { result += replacement } else { result.append(character) }
        }
        return result
    }
}
