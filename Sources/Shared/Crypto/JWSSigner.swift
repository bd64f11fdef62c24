import Foundation

/// Compact JWS (RFC 7515) signing with ES256, as Apple signs notifications and transactions and as
/// StoreKit expects promotional-offer and eligibility signatures. Header and claims are serialized
/// with sorted keys so the same input always yields the same signing input.
public enum JWSSigner {
    /// `header` must not carry "alg": ES256 is set here, the only algorithm Apple uses.
    public static func signES256(header: [String: Any], payload: [String: Any], key: P256PrivateKey) throws -> String {
        var header = header
        header["alg"] = "ES256"
        let encodedHeader = Base64URL.encode(try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes]))
        let encodedPayload = Base64URL.encode(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys, .withoutEscapingSlashes]))
        return try signES256(encodedHeader: encodedHeader, encodedPayload: encodedPayload, key: key)
    }

    /// Signs an already encoded header and payload (for payload bytes that must stay exactly as given).
    public static func signES256(encodedHeader: String, encodedPayload: String, key: P256PrivateKey) throws -> String {
        let signingInput = encodedHeader + "." + encodedPayload
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.raw)
    }
}
