import Configuration
import Domain
import Foundation

/// One raw input as ingest wrote it.
public struct RawInput: Sendable {
    public var source: RawSource
    public var body: [UInt8]
    public var receivedAtMs: Int64
    public var position: RecordPosition?
    /// Ingest checked the V1 shared secret and removed `password` (RecordHeader.v1SecretVerified).
    public var v1SecretVerifiedAtEdge: Bool

    public init(source: RawSource, body: [UInt8], receivedAtMs: Int64, position: RecordPosition?, v1SecretVerifiedAtEdge: Bool = false) {
        self.source = source
        self.body = body
        self.receivedAtMs = receivedAtMs
        self.position = position
        self.v1SecretVerifiedAtEdge = v1SecretVerifiedAtEdge
    }
}

/// Routes each raw input to the decoder for its format and returns normalized events, the exact
/// reason it was refused (dead-lettered), or a retryable condition (the stage tries again).
public struct AppleInputDecoder: Sendable {
    public var v1: NotificationV1Decoder
    /// nil when no JWS roots / bundle id are configured: V2 notifications are then refused.
    public var v2: NotificationV2Decoder?
    /// nil when neither receipt roots nor verifyReceipt are configured.
    public var receipts: ReceiptUploadDecoder?

    public init(v1: NotificationV1Decoder = NotificationV1Decoder(), v2: NotificationV2Decoder? = nil,
                receipts: ReceiptUploadDecoder? = nil) {
        self.v1 = v1
        self.v2 = v2
        self.receipts = receipts
    }

    public func decode(_ input: RawInput) -> Result<[AppleEvent], DecodeFailure> {
        // Before any parser recurses into it (docs/limits.md). A NUL byte means UTF-16 or UTF-32,
        // whose nesting the byte-level depth check cannot see (ingest refuses such bodies too).
        if input.body.contains(0) { return .failure(.permanent(PermanentFailure("not_utf8", "the body is not JSON in UTF-8"))) }
        if let failure = EventBounds.jsonDepth(input.body) { return .failure(.permanent(failure)) }
        switch input.source {
        case .appStoreNotification:
            guard let object = CompactJWS.jsonObject(input.body) else {
                return .failure(.permanent(PermanentFailure("invalid_json", "notification body is not a JSON object")))
            }
            if object["signedPayload"] != nil {
                guard let v2 else {
                    return .failure(.permanent(PermanentFailure("v2_not_configured",
                        "V2 notifications need \(Setting.appleRoots) and \(Setting.bundleId)")))
                }
                return v2.decode(body: input.body, receivedAtMs: input.receivedAtMs, rawPosition: input.position)
                    .mapError { .permanent($0) }
            }
            // A body ingest verified carries no password any more; one with a password (an older
            // record, a re-driven dead letter) is checked here as before.
            let v1 = input.v1SecretVerifiedAtEdge && object["password"] == nil ? NotificationV1Decoder() : self.v1
            return v1.decode(body: input.body, receivedAtMs: input.receivedAtMs, rawPosition: input.position)
                .mapError { .permanent($0) }
        case .appStoreServerAPI:
            // The same trust as V2 notifications: Apple's chain, this bundle id, accepted environments.
            guard let v2 else {
                return .failure(.permanent(PermanentFailure("v2_not_configured",
                    "App Store Server API answers need \(Setting.appleRoots) and \(Setting.bundleId)")))
            }
            return ServerAPIRecordDecoder(verifier: v2.verifier)
                .decode(body: input.body, receivedAtMs: input.receivedAtMs, rawPosition: input.position).mapError { .permanent($0) }
        case .appReceipt:
            // Parsed once: a StoreKit 2 signed transaction goes to the V2 trust, an app receipt to its own.
            let parsed = ReceiptUploadDecoder.parseUpload(input.body)
            if case .success(let upload) = parsed, SignedTransactionUpload.looksLikeOne(upload.receiptData) {
                guard let v2 else {
                    return .failure(.permanent(PermanentFailure("v2_not_configured",
                        "a signed transaction upload (StoreKit 2) needs \(Setting.appleRoots) and \(Setting.bundleId)")))
                }
                return SignedTransactionUpload(verifier: v2.verifier)
                    .decode(upload, receivedAtMs: input.receivedAtMs, rawPosition: input.position).mapError { .permanent($0) }
            }
            guard let receipts else {
                return .failure(.permanent(PermanentFailure(ReceiptFailure.notConfigured,
                    "receipt validation needs \(Setting.receiptRoots) (local) or verifyReceipt endpoints")))
            }
            switch parsed {
            case .success(let upload): return receipts.decode(upload, receivedAtMs: input.receivedAtMs, rawPosition: input.position)
            case .failure(let failure): return .failure(.permanent(failure))
            }
        }
    }
}
