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
        let read: (facts: TransactionFacts, verified: VerifiedSignedData)
        switch V2Facts.verifiedTransaction(upload.receiptData, verifier, what: "signed transaction") {
        case .failure(let failure): return .failure(failure)
        case .success(let value): read = value
        }
        // Each upload is a claim of its own (R17), identified like a receipt upload.
        let context = ReceiptUploadDecoder.EventContext(upload, receivedAtMs: receivedAtMs, rawPosition: rawPosition)
        return .success(ReceiptUploadDecoder.group([read.facts], renewals: [], source: .appReceipt,
                                                   environment: read.verified.environment.rawValue, bundleId: verifier.bundleId,
                                                   prefix: "receipt", statedAtMs: read.verified.fields.int64("signedDate"), context))
    }
}
