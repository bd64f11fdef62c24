/// A one-dimensional array parameter in PostgreSQL's binary array format (what `array_recv`
/// reads): each element is a length and its bytes, copied as they are. Neither side quotes,
/// escapes or parses a literal, so a batch of rows bound as one such array per column and
/// `unnest`ed together costs the server little more than the rows themselves (a `jsonb_to_recordset`
/// document is parsed whole, then taken apart again, field by field).
///
///     var ids = PGBinaryArray(.int8), names = PGBinaryArray(.text)
///     for row in rows { ids.append(row.id); names.append(row.name) }
///     try conn.execute("INSERT INTO t (id, name) SELECT * FROM unnest(\(ids), \(names))")
///
/// The server still checks every element: text must be valid UTF-8 without NUL (22021), a json or
/// jsonb element valid JSON (22P02).
public struct PGBinaryArray: Sendable {
    /// The element types batches need. `integer` columns take `.int8`: the insert's assignment cast
    /// refuses a value out of range (22003), as a text or JSON parameter would.
    public enum Element: Sendable {
        /// `json` keeps the document's text as it is (checked, not parsed into a tree): cheaper to
        /// write and to read back whole than `jsonb`, dearer to query field by field.
        case text, int8, bool, json, jsonb, bytea

        var oid: UInt32 {
            switch self {
            case .text: return PGDataType.text.oid
            case .bytea: return PGDataType.bytea.oid
            case .int8: return PGDataType.int8.oid
            case .bool: return PGDataType.bool.oid
            case .json: return PGDataType.json.oid
            case .jsonb: return PGDataType.jsonb.oid
            }
        }

        var arrayType: PGDataType {
            switch self {
            case .text: return .textArray
            case .bytea: return .byteaArray
            case .int8: return .int8Array
            case .bool: return .boolArray
            case .json: return .jsonArray
            case .jsonb: return .jsonbArray
            }
        }

        /// The array's type in SQL, for casts that make a statement readable.
        public var sqlName: String { arrayType.name }
    }

    public let element: Element
    public private(set) var count = 0
    /// The header's 20 bytes (patched in `pgValue`), then every element.
    private var fields = PGBinaryFields(reservingCapacity: 20)
    private var hasNull = false

    public init(_ element: Element, capacity: Int = 0) {
        self.element = element
        fields.bytes = [UInt8](repeating: 0, count: 20)
        fields.bytes.reserveCapacity(20 + capacity)
    }

    public mutating func append(_ text: String?) {
        assert(element == .text, "text into a \(element) array")
        guard let text else { return appendNull() }
        fields.text(text)
        count += 1
    }

    public mutating func append(_ number: Int64?) {
        assert(element == .int8, "a bigint into a \(element) array")
        guard let number else { return appendNull() }
        fields.int8(number)
        count += 1
    }

    public mutating func append(_ flag: Bool?) {
        assert(element == .bool, "a boolean into a \(element) array")
        guard let flag else { return appendNull() }
        fields.bool(flag)
        count += 1
    }

    /// A byte string, as it is (bytea's binary form is its bytes).
    public mutating func append(bytes: [UInt8]?) {
        assert(element == .bytea, "bytes into a \(element) array")
        guard let bytes else { return appendNull() }
        fields.bytea(bytes)
        count += 1
    }

    /// A document that is already JSON text. json's binary form is the text; jsonb's a version
    /// byte (1) and the text.
    public mutating func append(json: [UInt8]?) {
        assert(element == .json || element == .jsonb, "JSON into a \(element) array")
        guard let json else { return appendNull() }
        fields.json(json, versioned: element == .jsonb)
        count += 1
    }

    /// The bind parameter. Lengths past `Int32.max` are clamped, never sent: the whole parameter is
    /// then longer still, and binding refuses it (`PGError.invalidParameter`).
    var pgValue: PGValue {
        var value = fields.bytes
        value.withUnsafeMutableBytes { header in
            func put(_ word: UInt32, at offset: Int) {
                withUnsafeBytes(of: word.bigEndian) { header.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: 4) }
            }
            put(1, at: 0)                                              // dimensions (a zero-length one is the empty array)
            put(hasNull ? 1 : 0, at: 4)                                // has NULLs
            put(element.oid, at: 8)                                    // element type
            put(UInt32(bitPattern: Int32(clamping: count)), at: 12)    // length of the dimension
            put(1, at: 16)                                             // its lower bound
        }
        return PGValue(element.arrayType, .binary(value))
    }

    private mutating func appendNull() {
        fields.null()
        hasNull = true
        count += 1
    }
}

/// Values in PostgreSQL's binary formats (what each type's receive function reads), each after its
/// length, -1 for NULL: the elements of a binary array and the fields of a binary COPY row alike.
struct PGBinaryFields: Sendable {
    var bytes: [UInt8] = []

    init(reservingCapacity capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    mutating func null() { bigEndian(UInt32.max) }

    mutating func text(_ text: String) {
        var text = text
        text.withUTF8 { utf8 in
            length(utf8.count)
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func int8(_ number: Int64) {
        length(8)
        bigEndian(UInt64(bitPattern: number))
    }

    mutating func int4(_ number: Int32) {
        length(4)
        bigEndian(UInt32(bitPattern: number))
    }

    mutating func bool(_ flag: Bool) {
        length(1)
        bytes.append(flag ? 1 : 0)
    }

    mutating func bytea(_ value: [UInt8]) {
        length(value.count)
        bytes.append(contentsOf: value)
    }

    /// json's binary form is the text; jsonb's a version byte (1) and the text.
    mutating func json(_ document: [UInt8], versioned: Bool) {
        length(document.count + (versioned ? 1 : 0))
        if versioned { bytes.append(1) }
        bytes.append(contentsOf: document)
    }

    /// Lengths past `Int32.max` are clamped, never sent: the message is then longer still, and
    /// PostgreSQL refuses it.
    mutating func length(_ length: Int) {
        bigEndian(UInt32(bitPattern: Int32(clamping: length)))
    }

    mutating func bigEndian<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }
}

extension SQL.StringInterpolation {
    /// A binary array: becomes the next `$n` bind parameter.
    public mutating func appendInterpolation(_ array: PGBinaryArray) {
        parts.append(.bind(array.pgValue))
    }
}
