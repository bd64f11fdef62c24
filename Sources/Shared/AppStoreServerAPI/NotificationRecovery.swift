import AppleDecoding
import Domain
import Foundation

/// Which notifications from Apple's history StoreLedger should feed into its raw topic: each
/// `notificationUUID` once, none the pipeline has already seen (`alreadySeen`, lowercase UUIDs),
/// none without a UUID (nothing to dedupe them by; Apple always sends one). Pure: the command
/// around it pages the history, reads what was seen and produces the records.
public enum NotificationRecovery {
    /// Kafka header naming where a raw record came from when it did not come through ingest.
    public static let provenanceHeader = RecordHeader.provenance
    public static let provenanceRecovered = "recovered"

    public struct Item: Sendable, Equatable {
        /// Lowercase.
        public var notificationUUID: String
        public var notificationType: String?
        public var signedPayload: String
        /// The raw record's value: the body Apple POSTs, so decode treats it like any notification.
        public var rawBody: [UInt8] {
            Array(#"{"signedPayload":""#.utf8) + Array(signedPayload.utf8) + Array(#""}"#.utf8)
        }
    }

    public struct Plan: Sendable, Equatable {
        public var toFeed: [Item] = []
        public var alreadyIngested = 0
        public var duplicatesInHistory = 0
        public var withoutUUID = 0
        /// A signed payload with characters a JWS never has (cannot be fed as JSON safely).
        public var unusable = 0
    }

    public static func plan(_ entries: [NotificationHistoryEntry], alreadySeen: Set<String>) -> Plan {
        var plan = Plan()
        var planned: Set<String> = []
        for entry in entries {
            guard isJSONSafe(entry.signedPayload) else {
                plan.unusable += 1
                continue
            }
            guard let raw = entry.notification.payload["notificationUUID"] as? String, let uuid = UUID(uuidString: raw) else {
                plan.withoutUUID += 1
                continue
            }
            let key = uuid.uuidString.lowercased()
            if alreadySeen.contains(key) {
                plan.alreadyIngested += 1
            } else if !planned.insert(key).inserted {
                plan.duplicatesInHistory += 1
            } else {
                plan.toFeed.append(Item(notificationUUID: key, notificationType: entry.notification.payload["notificationType"] as? String,
                                        signedPayload: entry.signedPayload))
            }
        }
        return plan
    }

    /// The signed payload is base64url segments and dots only (checked by the verifier already);
    /// this guard keeps `rawBody`'s hand-written JSON valid even if that ever changed.
    public static func isJSONSafe(_ signedPayload: String) -> Bool {
        signedPayload.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "=")
        }
    }
}
