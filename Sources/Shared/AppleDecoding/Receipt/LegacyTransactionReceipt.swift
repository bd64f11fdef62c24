import Crypto
import Foundation

/// An iOS 6-style *transaction* receipt (`SKPaymentTransaction.transactionReceipt`, deprecated since
/// iOS 7): an old-style plist dictionary `{ "signature" = "<b64>"; "purchase-info" = "<b64>"; ... }`
/// whose purchase-info is another such dictionary.
///
/// It cannot be verified locally against Apple's roots: the signature blob carries only the leaf
/// ("PurchaseReceiptCertificate", issued by the Apple iTunes Store Certification Authority, expired
/// 2014), not the intermediate. So it is decoded for support, checked against that embedded leaf
/// for integrity, and otherwise refused with a clear reason unless verifyReceipt is configured.
public struct LegacyTransactionReceipt: Sendable, Equatable {
    public let fields: [String: String]
    public let purchaseInfo: [String: String]
    /// The signature checks out against the certificate embedded in the blob (integrity only:
    /// that certificate does not chain to a configured root).
    public let signatureMatchesEmbeddedCertificate: Bool

    /// Recognises the format cheaply: base64-decoded text that opens like an old-style plist.
    public static func looksLikeOne(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.first(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) else { return false }
        guard first == UInt8(ascii: "{") else { return false }
        let head = String(decoding: bytes.prefix(4096), as: UTF8.self)
        return head.contains("\"signature\"") || head.contains("\"purchase-info\"")
    }

    public static func parse(_ bytes: [UInt8]) -> LegacyTransactionReceipt? {
        guard let fields = plistDictionary(String(decoding: bytes, as: UTF8.self)),
              let info64 = fields["purchase-info"], let infoBytes = Base64.decode(info64),
              let info = plistDictionary(String(decoding: infoBytes, as: UTF8.self)) else { return nil }
        let verified = fields["signature"].flatMap(Base64.decode).map { signatureMatches($0, purchaseInfo: infoBytes) } ?? false
        return LegacyTransactionReceipt(fields: fields, purchaseInfo: info, signatureMatchesEmbeddedCertificate: verified)
    }

    public var transactionId: String? { purchaseInfo["transaction-id"] }
    public var originalTransactionId: String? { purchaseInfo["original-transaction-id"] ?? transactionId }
    public var productId: String? { purchaseInfo["product-id"] }
    public var bundleId: String? { purchaseInfo["bid"] }
    public var environment: String { fields["environment"] ?? "Production" }

    /// Signature blob v2/v3: version byte, RSA signature (128 or 256 bytes), 4-byte big-endian
    /// certificate length, certificate DER. The signed message is the version byte ‖ purchase-info.
    static func signatureMatches(_ blob: [UInt8], purchaseInfo: [UInt8]) -> Bool {
        guard let version = blob.first, version == 2 || version == 3 else { return false }
        let signatureLength = version == 2 ? 128 : 256
        let certificateStart = 1 + signatureLength + 4
        guard blob.count > certificateStart else { return false }
        let lengthBytes = blob[(1 + signatureLength)..<certificateStart]
        let certificateLength = lengthBytes.reduce(0) { $0 << 8 | Int($1) }
        guard certificateLength > 0, blob.count >= certificateStart + certificateLength,
              let certificate = try? X509Certificate(der: Array(blob[certificateStart..<(certificateStart + certificateLength)])) else {
            return false
        }
        let signature = Array(blob[1..<(1 + signatureLength)])
        return certificate.publicKey.verify(signature: signature, message: [version] + purchaseInfo,
                                            digest: version == 2 ? .sha1 : .sha256)
    }

    /// `{ "key" = "value"; ... }` with quoted keys and values (no nesting, no escapes in practice).
    static func plistDictionary(_ text: String) -> [String: String]? {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix("{"), trimmed.hasSuffix("}") else { return nil }
        var result: [String: String] = [:]
        for line in trimmed.dropFirst().dropLast().split(whereSeparator: { $0 == ";" || $0 == "\n" }) {
            let entry = line.trimmingCharacters(in: .whitespacesAndNewlines)
            if entry.isEmpty { continue }
            guard let equals = entry.firstIndex(of: "=") else { return nil }
            let key = unquote(entry[..<equals])
            let value = unquote(entry[entry.index(after: equals)...])
            guard let key, let value else { return nil }
            result[key] = value
        }
        return result.isEmpty ? nil : result
    }

    private static func unquote(_ text: Substring) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.count >= 2, trimmed.hasPrefix("\""), trimmed.hasSuffix("\"") else { return nil }
        return String(trimmed.dropFirst().dropLast())
    }
}
