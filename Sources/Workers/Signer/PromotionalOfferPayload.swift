/// The string a legacy (StoreKit 1 / pre-iOS 26) promotional-offer signature covers, exactly as
/// Apple's server libraries build it (R9; `PromotionalOfferSignatureCreator` in
/// app-store-server-library): seven fields joined by U+2063 INVISIBLE SEPARATOR, the
/// application username and the nonce lowercased, the timestamp in milliseconds.
/// https://developer.apple.com/documentation/storekit/generating-a-signature-for-promotional-offers
public struct PromotionalOfferPayload: Sendable, Equatable {
    /// U+2063 (UTF-8 E2 81 A3): invisible, so it cannot appear by accident in an identifier.
    public static let separator = "\u{2063}"

    public var bundleId: String
    public var keyIdentifier: String
    public var productIdentifier: String
    public var offerIdentifier: String
    /// `applicationUsername` / `appAccountToken` as the app passes it to StoreKit; may be empty.
    public var applicationUsername: String
    public var nonce: String
    public var timestampMs: Int64

    public init(bundleId: String, keyIdentifier: String, productIdentifier: String, offerIdentifier: String,
                applicationUsername: String, nonce: String, timestampMs: Int64) {
        self.bundleId = bundleId
        self.keyIdentifier = keyIdentifier
        self.productIdentifier = productIdentifier
        self.offerIdentifier = offerIdentifier
        self.applicationUsername = applicationUsername
        self.nonce = nonce
        self.timestampMs = timestampMs
    }

    /// The signed string. StoreKit lowercases the username and the nonce before checking, so
    /// the server must too (a mixed-case UUID would otherwise never verify on the device).
    public var string: String {
        [bundleId, keyIdentifier, productIdentifier, offerIdentifier, applicationUsername.lowercased(),
         nonce.lowercased(), String(timestampMs)].joined(separator: Self.separator)
    }

    /// The UTF-8 bytes of `string`, built without the intermediate strings.
    public var bytes: [UInt8] {
        let separator: [UInt8] = [0xE2, 0x81, 0xA3]
        var out: [UInt8] = []
        out.reserveCapacity(bundleId.utf8.count + keyIdentifier.utf8.count + productIdentifier.utf8.count
                            + offerIdentifier.utf8.count + applicationUsername.utf8.count + nonce.utf8.count + 20 + 18)
        for (index, field) in [bundleId, keyIdentifier, productIdentifier, offerIdentifier].enumerated() {
            if index > 0 { out += separator }
            out += field.utf8
        }
        out += separator
        out += applicationUsername.lowercased().utf8
        out += separator
        out += nonce.lowercased().utf8
        out += separator
        out += String(timestampMs).utf8
        return out
    }
}
