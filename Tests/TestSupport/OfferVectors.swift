import Foundation

/// Legacy promotional-offer signature inputs with the payload they must sign: ours, written out
/// by hand from Apple's documented format (U+2063-joined bundle id, key id, product, offer,
/// lowercased username, lowercased nonce, timestamp), plus Apple's library vectors
/// (promo-offer/v1-signature-inputs.json) when ../shared is present.
public struct OfferVector: Decodable, Sendable {
    public var bundleId: String
    public var keyId: String
    public var productId: String
    public var offerId: String
    public var appAccountToken_or_applicationUsername: String
    public var nonce: String
    public var timestamp: Int64
    public var expected_payload: String

    public static let ours = [
        OfferVector(bundleId: "com.example.app", keyId: "KEY1", productId: "vip.1m", offerId: "winback",
                    appAccountToken_or_applicationUsername: "Alice-Token", nonce: "3F2504E0-4F89-41D3-9A0C-0305E82C3301",
                    timestamp: 1_700_000_000_123,
                    expected_payload: "com.example.app\u{2063}KEY1\u{2063}vip.1m\u{2063}winback\u{2063}alice-token\u{2063}"
                        + "3f2504e0-4f89-41d3-9a0c-0305e82c3301\u{2063}1700000000123"),
        OfferVector(bundleId: "b", keyId: "K", productId: "p", offerId: "o", appAccountToken_or_applicationUsername: "",
                    nonce: "00000000-0000-4000-8000-000000000000", timestamp: 0,
                    expected_payload: "b\u{2063}K\u{2063}p\u{2063}o\u{2063}\u{2063}00000000-0000-4000-8000-000000000000\u{2063}0"),
    ]

    /// Ours, then Apple's when ../shared is present.
    public static func all() throws -> [OfferVector] {
        SharedFixtures.isPresent ? ours + (try AppleOfferInputs.load().vectors) : ours
    }
}

/// promo-offer/v1-signature-inputs.json: Apple's library vectors and the public key of Apple's
/// published testSigningKey.p8 they verify with. Skips when absent.
public struct AppleOfferInputs: Decodable, Sendable {
    public var public_key_spki_pem: String
    public var vectors: [OfferVector]

    public static func load() throws -> AppleOfferInputs {
        try JSONDecoder().decode(AppleOfferInputs.self, from: try SharedFixtures.data("promo-offer/v1-signature-inputs.json"))
    }
}
