import Foundation

/// One name/value pair, as a header line or a query item carries it.
public struct HTTPField: Sendable, Hashable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// Header fields in arrival order. Names keep their original spelling and every value is
/// kept; lookups ignore ASCII case, as RFC 9110 says field names do.
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    public private(set) var fields: [HTTPField]

    public init(_ fields: [HTTPField] = []) { self.fields = fields }

    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { HTTPField(name: $0.0, value: $0.1) }
    }

    /// The first value of `name`, or nil.
    public subscript(name: String) -> String? {
        fields.first { sameFieldName($0.name, name) }?.value
    }

    /// Every value of `name`, in arrival order.
    public func values(for name: String) -> [String] {
        fields.filter { sameFieldName($0.name, name) }.map(\.value)
    }

    public mutating func add(name: String, value: String) {
        fields.append(HTTPField(name: name, value: value))
    }

    /// Replaces every value of `name` with this one.
    public mutating func set(name: String, value: String) {
        fields.removeAll { sameFieldName($0.name, name) }
        fields.append(HTTPField(name: name, value: value))
    }

    public var isEmpty: Bool { fields.isEmpty }
    public func makeIterator() -> IndexingIterator<[HTTPField]> { fields.makeIterator() }
}

/// ASCII case-insensitive comparison without allocating lowercased copies.
func sameFieldName(_ a: String, _ b: String) -> Bool {
    a.utf8.count == b.utf8.count && zip(a.utf8, b.utf8).allSatisfy { x, y in
        x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A)
    }
}

/// A complete request as the handler sees it: the body is fully received.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path without the query, percent-decoded by libmicrohttpd.
    public var path: String
    /// Query items in order, names and values percent-decoded (`+` reads as a space).
    /// An item without `=` has an empty value.
    public var query: [HTTPField]
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// The client's IP address, numeric ("127.0.0.1", "::1"); empty if unknown.
    public var remoteAddress: String
    /// When the request's headers had arrived (before its body was read).
    public var receivedAt: Date

    public init(method: String, path: String, query: [HTTPField] = [], headers: HTTPHeaders = [:],
                body: [UInt8] = [], remoteAddress: String = "", receivedAt: Date = Date()) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.receivedAt = receivedAt
    }

    /// The first value of query item `name` (exact, case-sensitive name), or nil.
    public func queryValue(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }
}

/// A response to queue. `Content-Length` is computed by the server from `body`; a
/// `Content-Length` header given here is ignored.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `object` encoded as JSON with sorted keys. Should encoding fail (a NaN, say), the
    /// answer is a 500 error rather than a crash.
    public static func json(status: Int = 200, _ object: some Encodable) -> HTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(object) else {
            return .error(status: 500, reason: "response encoding failed")
        }
        return .json(status: status, data: data)
    }

    /// Already-encoded JSON.
    /// Answers carry customer data: never sniffed into another type, never stored by a cache.
    public static func json(status: Int = 200, data: Data) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json", "X-Content-Type-Options": "nosniff",
                                               "Cache-Control": "no-store"], body: [UInt8](data))
    }

    public static func text(status: Int = 200, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"],
                     body: Array(text.utf8))
    }

    /// `{"error": reason}`: the one shape every failure answer has.
    public static func error(status: Int, reason: String) -> HTTPResponse {
        .json(status: status, ["error": reason])
    }
}
