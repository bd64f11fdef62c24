import Foundation

/// A JSON Schema validator for exactly the keywords `schemas/membership-event.v1.json` uses
/// (type, const, enum, required, properties, additionalProperties: false, items, minimum, $ref to
/// #/$defs). A schema that uses any other keyword is refused, so the file cannot silently outgrow it.
public struct JSONSchemaSubset {
    public let root: [String: Any]
    static let known: Set<String> = ["$schema", "$id", "title", "description", "type", "const", "enum", "required", "properties",
                                     "additionalProperties", "items", "minimum", "$ref", "$defs"]

    public init(file: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        guard let root = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw SchemaError("\(file): not a JSON object")
        }
        self.root = root
        try JSONSchemaSubset.checkKeywords(root, path: "#")
    }

    /// The repository's schema of membership events.
    public static func membershipEvent() throws -> JSONSchemaSubset {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return try JSONSchemaSubset(file: root.appendingPathComponent("schemas/membership-event.v1.json").path)
    }

    /// Every violation, as `path: problem` lines (empty = valid).
    public func violations(of json: [UInt8]) -> [String] {
        guard let value = try? JSONSerialization.jsonObject(with: Data(json), options: [.fragmentsAllowed]) else { return ["#: not JSON"] }
        var problems: [String] = []
        check(value, against: root, path: "#", &problems)
        return problems
    }

    private static func checkKeywords(_ schema: [String: Any], path: String) throws {
        for (key, value) in schema {
            guard known.contains(key) else { throw SchemaError("\(path): keyword \(key) is outside the validated subset") }
            if key == "properties" || key == "$defs", let map = value as? [String: Any] {
                for (name, sub) in map { if let sub = sub as? [String: Any] { try checkKeywords(sub, path: "\(path)/\(key)/\(name)") } }
            }
            if key == "items", let sub = value as? [String: Any] { try checkKeywords(sub, path: "\(path)/items") }
            if key == "additionalProperties", (value as? Bool) != false { throw SchemaError("\(path): only additionalProperties: false is supported") }
        }
    }

    private func resolve(_ schema: [String: Any]) -> [String: Any] {
        guard let ref = schema["$ref"] as? String, ref.hasPrefix("#/$defs/"),
              let defs = root["$defs"] as? [String: Any], let target = defs[String(ref.dropFirst(8))] as? [String: Any] else { return schema }
        return target
    }

    private func check(_ value: Any, against raw: [String: Any], path: String, _ problems: inout [String]) {
        let schema = resolve(raw)
        if let type = schema["type"] as? String, !JSONSchemaSubset.matches(value, type) {
            problems.append("\(path): expected \(type), got \(value)")
            return
        }
        if let constant = schema["const"], !JSONSchemaSubset.equal(value, constant) { problems.append("\(path): expected \(constant)") }
        if let options = schema["enum"] as? [Any], !options.contains(where: { JSONSchemaSubset.equal(value, $0) }) {
            problems.append("\(path): \(value) is not one of \(options)")
        }
        if let minimum = schema["minimum"] as? NSNumber, let number = value as? NSNumber, number.doubleValue < minimum.doubleValue {
            problems.append("\(path): \(number) < \(minimum)")
        }
        if let object = value as? [String: Any] {
            for name in schema["required"] as? [String] ?? [] where object[name] == nil { problems.append("\(path): missing \(name)") }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (name, child) in object {
                if let sub = properties[name] as? [String: Any] {
                    check(child, against: sub, path: "\(path)/\(name)", &problems)
                } else if schema["additionalProperties"] as? Bool == false {
                    problems.append("\(path): unexpected property \(name)")
                }
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, element) in array.enumerated() { check(element, against: items, path: "\(path)/\(index)", &problems) }
        }
    }

    private static func isBool(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        // JSONSerialization gives booleans their own NSNumber subclass, typed "c" (char).
        return String(cString: number.objCType) == "c"
    }

    static func matches(_ value: Any, _ type: String) -> Bool {
        switch type {
        case "object": return value is [String: Any]
        case "array": return value is [Any]
        case "string": return value is String
        case "boolean": return isBool(value)
        case "integer":
            guard let number = value as? NSNumber, !isBool(number) else { return false }
            return number.doubleValue.rounded() == number.doubleValue
        case "number": return value is NSNumber && !isBool(value)
        case "null": return value is NSNull
        default: return false
        }
    }

    static func equal(_ a: Any, _ b: Any) -> Bool {
        if let a = a as? String, let b = b as? String { return a == b }
        if let a = a as? NSNumber, let b = b as? NSNumber { return isBool(a) == isBool(b) && a == b }
        return false
    }
}

public struct SchemaError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
