import Crypto

/// The ASN.1 payload of an app receipt, with Apple's attribute numbers (APPLE-REFERENCE.md §3).
struct ReceiptPayload: Sendable, Equatable {
    /// Attribute 0: "Production", "ProductionSandbox".
    var receiptType: String
    var appItemId: Int64
    var bundleId: String
    var appVersion: String
    var originalAppVersion: String
    var opaqueValue: [UInt8]
    var sha1Hash: [UInt8]
    var creationMs: Int64
    var originalPurchaseMs: Int64
    var inApp: [InAppEntry]
}

/// One attribute-17 in-app purchase receipt.
struct InAppEntry: Sendable, Equatable {
    var quantity: Int64 = 1
    var productId: String
    var transactionId: String
    var originalTransactionId: String
    var purchaseMs: Int64
    var originalPurchaseMs: Int64
    /// Auto-renewables only; others leave the date out.
    var expiresMs: Int64?
    var isSubscription: Bool
    var webOrderLineItemId: Int64?
    var cancellationMs: Int64?
    var isTrialPeriod: Bool
    var isInIntroOfferPeriod: Bool
    var promotionalOfferId: String?
}

/// Encodes receipt payloads as DER, the way Apple's receipts are laid out: a SET of
/// `SEQUENCE { INTEGER type, INTEGER version, OCTET STRING value }`, the value itself DER
/// (UTF8String, IA5String date at second precision, INTEGER), attribute 17 nesting a SET per purchase.
enum ReceiptEncoder {
    static func payload(_ receipt: ReceiptPayload) -> [UInt8] {
        var attributes: [[UInt8]] = [
            attribute(0, DER.utf8String(receipt.receiptType)),
            attribute(1, DER.integer(receipt.appItemId)),
            attribute(2, DER.utf8String(receipt.bundleId)),
            attribute(3, DER.utf8String(receipt.appVersion)),
            attribute(4, receipt.opaqueValue),
            attribute(5, receipt.sha1Hash),
            attribute(12, DER.ia5String(AppleDates.rfc3339(receipt.creationMs))),
            attribute(18, DER.ia5String(AppleDates.rfc3339(receipt.originalPurchaseMs))),
            attribute(19, DER.utf8String(receipt.originalAppVersion)),
        ]
        attributes += receipt.inApp.map { attribute(17, inApp($0)) }
        return DER.setOf(attributes)
    }

    static func inApp(_ entry: InAppEntry) -> [UInt8] {
        var attributes: [[UInt8]] = [
            attribute(1701, DER.integer(entry.quantity)),
            attribute(1702, DER.utf8String(entry.productId)),
            attribute(1703, DER.utf8String(entry.transactionId)),
            attribute(1704, DER.ia5String(AppleDates.rfc3339(entry.purchaseMs))),
            attribute(1705, DER.utf8String(entry.originalTransactionId)),
            attribute(1706, DER.ia5String(AppleDates.rfc3339(entry.originalPurchaseMs))),
            attribute(1711, DER.integer(entry.webOrderLineItemId ?? 0)),
            attribute(1713, DER.integer(entry.isTrialPeriod ? 1 : 0)),
            attribute(1719, DER.integer(entry.isInIntroOfferPeriod ? 1 : 0)),
        ]
        if entry.isSubscription {
            // Apple writes an empty date string where a subscription has no value yet.
            attributes.append(attribute(1708, DER.ia5String(entry.expiresMs.map(AppleDates.rfc3339) ?? "")))
            attributes.append(attribute(1712, DER.ia5String(entry.cancellationMs.map(AppleDates.rfc3339) ?? "")))
            attributes.append(attribute(1721, DER.utf8String(entry.promotionalOfferId ?? "")))
        } else if let cancellation = entry.cancellationMs {
            attributes.append(attribute(1712, DER.ia5String(AppleDates.rfc3339(cancellation))))
        }
        return DER.setOf(attributes)
    }

    private static func attribute(_ type: Int64, _ value: [UInt8]) -> [UInt8] {
        DER.sequence([DER.integer(type), DER.integer(1), DER.octetString(value)])
    }

    /// Reads back what `payload` wrote (for the simulator's verifyReceipt): receipt type and the
    /// in-app purchases' (transaction id, original transaction id). nil if it is not a receipt.
    static func summary(_ payload: [UInt8]) -> (receiptType: String, bundleId: String, purchases: [(transactionId: String, originalTransactionId: String)])? {
        guard let top = DER.elements(payload[...]), top.count == 1, top[0].tag == DER.setTag,
              let attributes = DER.elements(top[0].content) else { return nil }
        var type = "", bundle = ""
        var purchases: [(String, String)] = []
        for attribute in attributes {
            guard let fields = DER.elements(attribute.content), fields.count == 3,
                  let number = DER.integerValue(fields[0].content) else { return nil }
            switch number {
            case 0: type = string(fields[2].content) ?? ""
            case 2: bundle = string(fields[2].content) ?? ""
            case 17:
                guard let set = DER.elements(fields[2].content)?.first, let inner = DER.elements(set.content) else { return nil }
                var id = "", original = ""
                for field in inner {
                    guard let parts = DER.elements(field.content), parts.count == 3, let n = DER.integerValue(parts[0].content) else { continue }
                    if n == 1703 { id = string(parts[2].content) ?? "" }
                    if n == 1705 { original = string(parts[2].content) ?? "" }
                }
                purchases.append((id, original.isEmpty ? id : original))
            default: continue
            }
        }
        return (type, bundle, purchases)
    }

    private static func string(_ value: ArraySlice<UInt8>) -> String? {
        guard let element = DER.elements(value)?.first else { return nil }
        return String(decoding: element.content, as: UTF8.self)
    }
}
