import Domain
import Foundation
import Kafka

/// One pipeline record made readable for support: JSON pretty-printed, compact JWS values
/// (`signedPayload`, `signedTransactionInfo`, ...) decoded in place, and secrets replaced by a
/// marker before anything is shown: the V1 `password` (the app's shared secret) and credentials
/// the caller's HTTP headers carried. Pure: a record in, text out.
struct RawRecordView: Sendable, Equatable {
    struct Header: Sendable, Equatable { var name: String; var value: String }

    var topic: String
    var partition: Int32
    var offset: Int64
    var timestamp: Int64?
    var byteCount: Int
    var headers: [Header]
    var text: String
    var note: String

    /// The topics whose records a ledger line can point at (the cause chain); the offer-signing
    /// topics and dead letters are not shown here.
    static let shownTopics: Set<String> = [Topic.notificationsRaw, Topic.receiptsRaw, Topic.decoded, Topic.unique, Topic.commands]
    static let redacted = "«redacted»"
    /// JSON keys whose values are secrets wherever they appear (compared in lower case).
    static let secretKeys: Set<String> = ["password", "shared_secret", "sharedsecret", "client_secret", "private_key", "api_key",
                                          "authorization"]
    /// Longer values are shown shortened: receipts are base64 blobs of hundreds of KB.
    static let maxShownValueChars = 512
    static let maxShownTextBytes = 256 * 1024

    init(_ record: KafkaRecord) {
        topic = record.topic
        partition = record.partition
        offset = record.offset
        timestamp = record.timestamp >= 0 ? record.timestamp : nil
        byteCount = record.value.count
        headers = record.headers.map { Header(name: $0.name, value: Self.headerValue($0)) }
        // Binary pipeline records (`TopicRecords`) are shown as the JSON they encode.
        let value = TopicRecords.json(record.value) ?? record.value
        if EventBounds.jsonDepth(value) == nil, !value.contains(0),
           let json = try? JSONSerialization.jsonObject(with: Data(value), options: [.fragmentsAllowed]),
           let pretty = try? JSONSerialization.data(withJSONObject: Self.readable(json, key: nil),
                                                    options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed]) {
            text = String(decoding: pretty, as: UTF8.self)
            note = "JSON, pretty-printed; signed values decoded for reading (signatures are not verified here); secrets redacted"
        } else {
            let shown = record.value.prefix(Self.maxShownTextBytes)
            text = String(decoding: shown, as: UTF8.self)
            note = "not JSON: shown as text" + (shown.count < record.value.count ? ", first \(shown.count) bytes" : "")
        }
    }

    static func headerValue(_ header: KafkaHeader) -> String {
        let name = header.name.lowercased()
        let field = name.hasPrefix(RecordHeader.httpPrefix) ? String(name.dropFirst(RecordHeader.httpPrefix.count)) : name
        let credential = ["authorization", "proxy-authorization", "cookie", "x-api-key"].contains(field)
            || ["secret", "password", "token"].contains { field.contains($0) }
        return credential ? redacted : String(decoding: header.value.prefix(maxShownValueChars), as: UTF8.self)
    }

    /// Signed values decoded inside one another: Apple nests two (a notification, its transaction);
    /// a record could nest them as deep as its size allows, each level up to 32 levels of JSON, which
    /// this recursion must not follow down a thread's stack.
    static let maxJWSLevels = 3

    /// The JSON value with secrets redacted, JWS strings decoded (`jwsLevel` of them around it) and
    /// long blobs shortened.
    static func readable(_ value: Any, key: String?, jwsLevel: Int = 0) -> Any {
        if let key, secretKeys.contains(key.lowercased()), !(value is NSNull) { return redacted }
        switch value {
        case let object as [String: Any]:
            return Dictionary(uniqueKeysWithValues: object.map { ($0.key, readable($0.value, key: $0.key, jwsLevel: jwsLevel)) })
        case let array as [Any]:
            return array.map { readable($0, key: nil, jwsLevel: jwsLevel) }
        case let text as String:
            if jwsLevel < maxJWSLevels, let jws = decodedJWS(text, level: jwsLevel + 1) { return jws }
            guard text.count > maxShownValueChars else { return text }
            return "\(text.prefix(64))… (\(text.utf8.count) characters, shortened)"
        default:
            return value
        }
    }

    /// `header.payload.signature` with JSON header and payload: both decoded, the certificate chain
    /// summarised. Nested signed values (V2 `data.signedTransactionInfo`) are decoded the same way.
    static func decodedJWS(_ text: String, level: Int = 1) -> [String: Any]? {
        let segments = text.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, text.hasPrefix("eyJ"),
              let headerBytes = base64URL(segments[0]), EventBounds.jsonDepth(Array(headerBytes)) == nil, !headerBytes.contains(0),
              let header = (try? JSONSerialization.jsonObject(with: headerBytes)) as? [String: Any],
              header["alg"] != nil,
              // UTF-8 only: the depth check reads bytes, and UTF-16 would hide its nesting from it.
              let payloadBytes = base64URL(segments[1]), EventBounds.jsonDepth(Array(payloadBytes)) == nil, !payloadBytes.contains(0),
              let payload = try? JSONSerialization.jsonObject(with: payloadBytes) else { return nil }
        var shownHeader = header
        if let chain = header["x5c"] as? [Any] { shownHeader["x5c"] = "\(chain.count) certificate(s), not shown" }
        return ["jws.header": readable(shownHeader, key: nil, jwsLevel: level), "jws.payload": readable(payload, key: nil, jwsLevel: level)]
    }

    private static func base64URL(_ segment: Substring) -> Data? {
        var text = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        return Data(base64Encoded: text)
    }
}
