import Domain
import Foundation

/// One raw input as ingest wrote it.
public struct RawInput: Sendable {
    public var source: RawSource
    public var body: [UInt8]
    public var receivedAtMs: Int64
    public var position: RecordPosition?

    public init(source: RawSource, body: [UInt8], receivedAtMs: Int64, position: RecordPosition?) {
        self.source = source
        self.body = body
        self.receivedAtMs = receivedAtMs
        self.position = position
    }
}

/// Routes each raw input to the decoder for its format and returns normalized events or the exact
/// reason it was refused.
public struct AppleInputDecoder: Sendable {
    public var v1: NotificationV1Decoder

    public init(v1: NotificationV1Decoder = NotificationV1Decoder()) {
        self.v1 = v1
    }

    public func decode(_ input: RawInput) -> Result<[AppleEvent], PermanentFailure> {
        switch input.source {
        case .appStoreNotification:
            guard let object = (try? JSONSerialization.jsonObject(with: Data(input.body))) as? [String: Any] else {
                return .failure(PermanentFailure("invalid_json", "notification body is not a JSON object"))
            }
            if object["signedPayload"] != nil {
                return .failure(PermanentFailure("unsupported_format", "V2 signedPayload decoding is not enabled"))
            }
            return v1.decode(body: input.body, receivedAtMs: input.receivedAtMs, rawPosition: input.position)
        case .appReceipt:
            return .failure(PermanentFailure("unsupported_format", "app receipt decoding is not enabled"))
        }
    }
}
