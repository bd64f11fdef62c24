import Domain

/// A StoreKit 2 app has no app receipt to upload: it sends a transaction's `jwsRepresentation` as
/// `receipt_data`. The signed transaction is verified like a V2 notification's (Apple's chain, this
/// bundle, the accepted environments) and becomes the uploading account's claim (R17), like a receipt.
public struct SignedTransactionUpload: Sendable {
    public let verifier: SignedDataVerifier

    public init(verifier: SignedDataVerifier) { self.verifier = verifier }

    /// A compact JWS (three base64url parts, a JSON header), never a base64 app receipt: base64 has
    /// no '.' and a PKCS#7 receipt's base64 starts "MII".
    public static func looksLikeOne(_ receiptData: String) -> Bool {
        receiptData.hasPrefix("eyJ") && receiptData.utf8.lazy.filter { $0 == UInt8(ascii: ".") }.count == 2
    }

    public func decode(_ upload: ReceiptUploadDecoder.Upload, receivedAtMs: Int64,
                       rawPosition: RecordPosition?) -> Result<[AppleEvent], PermanentFailure> {
        let verified: VerifiedSignedData
        switch verifier.verifyTransaction(upload.receiptData) {
        case .failure(let failure): return .failure(PermanentFailure(failure.status.rawValue, "signed transaction: \(failure.reason)"))
        case .success(let value): verified = value
        }
        let fields = verified.fields
        if let key = fields.invalidNumber(V2Facts.transactionNumbers) { return .failure(ReceiptFields.invalidNumber("signed transaction", key)) }
        guard let facts = V2Facts.transaction(fields) else {
            return .failure(PermanentFailure("missing_field", "signed transaction lacks transactionId, productId or purchaseDate"))
        }
        // Each upload is a claim of its own (R17), as a receipt upload's: its time is part of its identity.
        let digest = EventDigest.hex(of: Array((upload.userId ?? "").utf8) + [0] + Array(String(receivedAtMs).utf8) + [0]
                                         + Array(upload.receiptData.utf8))
        let context = ReceiptUploadDecoder.EventContext(digest: digest, userId: upload.userId, receivedAtMs: receivedAtMs,
                                                        rawPosition: rawPosition)
        return .success(ReceiptUploadDecoder.group([facts], renewals: [], source: .appReceipt, environment: verified.environment.rawValue,
                                                   bundleId: verifier.bundleId, prefix: "receipt", statedAtMs: fields.int64("signedDate"),
                                                   context))
    }
}
