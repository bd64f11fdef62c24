/// The pipeline's Kafka topics. One vocabulary for every process (ARCHITECTURE.md).
public enum Topic {
    public static let notificationsRaw = "storeledger.notifications.raw"
    public static let receiptsRaw = "storeledger.receipts.raw"
    public static let decoded = "storeledger.transactions.decoded"
    public static let unique = "storeledger.transactions.unique"
    public static let commands = "storeledger.membership.commands"
    public static let deadLetter = "storeledger.deadletter"
    public static let signRequests = "storeledger.offers.sign.requests"
    public static let signReplies = "storeledger.offers.sign.replies"
    /// Membership events for the company's other services (issue 17): key = user, one per
    /// membership-changing ledger entry, published from the outbox by the relay.
    public static let membershipEvents = "storeledger.membership.events"

    public static let all = [notificationsRaw, receiptsRaw, decoded, unique, commands, deadLetter,
                             signRequests, signReplies, membershipEvents]
}

/// Kafka header names the pipeline writes. Raw records keep the caller's HTTP headers as `http.<name>`.
public enum RecordHeader {
    public static let receivedAt = "storeledger.received-at"      // ms since epoch, decimal text
    public static let source = "storeledger.source"                // RawSource raw value
    public static let contentType = "storeledger.content-type"
    public static let httpPrefix = "http."
    public static let schema = "storeledger.schema"                // payload schema of typed records
    /// How a raw record reached us when not through ingest: "recovered" (notification history), "server-api" (refresh).
    public static let provenance = "storeledger.provenance"
    public static let eventType = "storeledger.event-type"         // MembershipEventType raw value
    public static let relaySequence = "storeledger.relay-seq"      // the relay's publication order, decimal text
    /// Set by ingest on a V1 notification whose shared secret it verified and then removed from
    /// the body (a secret is never stored): decode accepts such a body without `password`.
    public static let v1SecretVerified = "storeledger.v1-secret-verified"
}

/// Where a raw record came from at the edge.
public enum RawSource: String, Codable, Sendable {
    case appStoreNotification = "appstore-notification"
    case appReceipt = "app-receipt"
    /// Signed transactions and renewal infos StoreLedger fetched from the App Store Server API
    /// (refresh). Only StoreLedger's own producers write it: ingest prefixes callers' headers `http.`.
    case appStoreServerAPI = "app-store-server-api"
}

/// Position of a record in Kafka: the cause of everything downstream points here.
public struct RecordPosition: Codable, Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public var description: String { "\(topic)/\(partition)@\(offset)" }

    /// Earlier in the same partition. Positions in different partitions (a topic repartitioned)
    /// are not ordered.
    public func isBefore(_ other: RecordPosition) -> Bool {
        topic == other.topic && partition == other.partition && offset < other.offset
    }
}
