import Foundation
import CivilCalendar

/// The decoded payload of an app receipt (PKCS#7 content), as Apple's archived "Receipt Fields"
/// document and the community parsers describe it. Field numbers: APPLE-REFERENCE.md §3.
/// https://developer.apple.com/library/archive/releasenotes/General/ValidateAppStoreReceipt/Chapters/ReceiptFields.html
public struct AppReceipt: Sendable, Equatable, Codable {
    /// Attribute 0: "Production", "ProductionSandbox", "Xcode" (raw).
    public var receiptType: String?
    /// Attribute 1: the app's Apple id (0 or absent outside production).
    public var appItemId: Int64?
    public var bundleId: String
    /// The DER bytes of the bundle id attribute's value: an input of the device hash.
    public var bundleIdDER: [UInt8]
    public var appVersion: String?
    public var originalAppVersion: String?
    public var opaqueValue: [UInt8]
    /// SHA-1 of device identifier ‖ opaque value ‖ bundle id DER.
    public var sha1Hash: [UInt8]
    public var creationDateMs: Int64?
    public var expirationDateMs: Int64?
    public var originalPurchaseDateMs: Int64?
    public var inApp: [InAppPurchase]

    /// Decodes a receipt payload (the PKCS#7 content) without any signature check.
    public static func parse(payload: [UInt8]) -> Result<AppReceipt, ReceiptFailure> {
        do {
            return .success(try ReceiptPayloadParser.parse(payload))
        } catch {
            return .failure(ReceiptFailure(ReceiptFailure.invalidReceipt, "receipt payload does not decode: \(error.description)"))
        }
    }

    enum Attribute {
        static let receiptType = 0, appItemId = 1, bundleId = 2, appVersion = 3, opaqueValue = 4, sha1Hash = 5,
                   creationDate = 12, inApp = 17, originalPurchaseDate = 18, originalAppVersion = 19,
                   expirationDate = 21
    }
}

/// One in-app purchase receipt (attribute 17). Fields absent from local receipts (JSON only):
/// is_upgraded, cancellation_reason, offer_code_ref_name, subscription group, app account token.
public struct InAppPurchase: Sendable, Equatable, Codable {
    public var quantity: Int
    public var productId: String
    /// New for every renewal and every restore on a new device (R1): never the purchase identity.
    public var transactionId: String
    public var originalTransactionId: String
    public var purchaseDateMs: Int64?
    public var originalPurchaseDateMs: Int64?
    /// Attribute 1707 (community-documented only), raw.
    public var productType: Int64?
    public var expiresDateMs: Int64?
    public var webOrderLineItemId: String?
    public var cancellationDateMs: Int64?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var promotionalOfferId: String?

    enum Attribute {
        static let quantity = 1701, productId = 1702, transactionId = 1703, purchaseDate = 1704,
                   originalTransactionId = 1705, originalPurchaseDate = 1706, productType = 1707,
                   expiresDate = 1708, webOrderLineItemId = 1711, cancellationDate = 1712,
                   trialPeriod = 1713, introOfferPeriod = 1719, promotionalOfferId = 1721
    }
}

/// Reads the receipt payload: `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`,
/// each value itself DER (a string, an integer, a date, or for 17 a nested SET of the same shape).
/// Unknown attributes are skipped; a known attribute whose value does not decode is an error.
/// Everything is read through one `ASN1Cursor` over the payload: values are index ranges into it.
enum ReceiptPayloadParser {
    static func parse(_ payload: [UInt8]) throws(ASN1Error) -> AppReceipt {
        let parsed: Result<AppReceipt, ASN1Error> = payload.withUnsafeBufferPointer { buffer in
            do throws(ASN1Error) {
                return .success(try parse(ASN1Cursor(buffer, 0..<buffer.count)))
            } catch {
                return .failure(error)
            }
        }
        return try parsed.get()
    }

    private static func parse(_ payload: ASN1Cursor) throws(ASN1Error) -> AppReceipt {
        var receipt = AppReceipt(bundleId: "", bundleIdDER: [], opaqueValue: [], sha1Hash: [], inApp: [])
        var sawBundle = false
        for (type, value) in try attributes(payload, depth: 0) {
            switch Int(clamping: type) {
            case AppReceipt.Attribute.receiptType: receipt.receiptType = try string(payload, value)
            case AppReceipt.Attribute.appItemId: receipt.appItemId = try? integer(payload, value)
            case AppReceipt.Attribute.bundleId:
                receipt.bundleId = try string(payload, value)
                receipt.bundleIdDER = payload.copy(value)
                sawBundle = true
            case AppReceipt.Attribute.appVersion: receipt.appVersion = try string(payload, value)
            case AppReceipt.Attribute.originalAppVersion: receipt.originalAppVersion = try string(payload, value)
            case AppReceipt.Attribute.opaqueValue: receipt.opaqueValue = payload.copy(value)
            case AppReceipt.Attribute.sha1Hash: receipt.sha1Hash = payload.copy(value)
            case AppReceipt.Attribute.creationDate: receipt.creationDateMs = try date(payload, value)
            case AppReceipt.Attribute.expirationDate: receipt.expirationDateMs = try date(payload, value)
            case AppReceipt.Attribute.originalPurchaseDate: receipt.originalPurchaseDateMs = try date(payload, value)
            case AppReceipt.Attribute.inApp: receipt.inApp.append(try inAppPurchase(ASN1Cursor(payload.bytes, value)))
            default: continue
            }
        }
        guard sawBundle else { throw ASN1Error("receipt payload has no bundle id (attribute 2)") }
        return receipt
    }

    private static func inAppPurchase(_ bytes: ASN1Cursor) throws(ASN1Error) -> InAppPurchase {
        var purchase = InAppPurchase(quantity: 1, productId: "", transactionId: "", originalTransactionId: "")
        var originalSeen = false
        for (type, value) in try attributes(bytes, depth: 2) {
            switch Int(clamping: type) {
            case InAppPurchase.Attribute.quantity: purchase.quantity = Int(try integer(bytes, value))
            case InAppPurchase.Attribute.productId: purchase.productId = try string(bytes, value)
            case InAppPurchase.Attribute.transactionId: purchase.transactionId = try string(bytes, value)
            case InAppPurchase.Attribute.originalTransactionId:
                purchase.originalTransactionId = try string(bytes, value)
                originalSeen = true
            case InAppPurchase.Attribute.purchaseDate: purchase.purchaseDateMs = try date(bytes, value)
            case InAppPurchase.Attribute.originalPurchaseDate: purchase.originalPurchaseDateMs = try date(bytes, value)
            case InAppPurchase.Attribute.productType: purchase.productType = try? integer(bytes, value)
            case InAppPurchase.Attribute.expiresDate: purchase.expiresDateMs = try date(bytes, value)
            case InAppPurchase.Attribute.webOrderLineItemId:
                purchase.webOrderLineItemId = (try? integer(bytes, value)).map(String.init) ?? (try? string(bytes, value))
            case InAppPurchase.Attribute.cancellationDate: purchase.cancellationDateMs = try date(bytes, value)
            case InAppPurchase.Attribute.trialPeriod: purchase.isTrialPeriod = try integer(bytes, value) != 0
            case InAppPurchase.Attribute.introOfferPeriod: purchase.isInIntroOfferPeriod = try integer(bytes, value) != 0
            case InAppPurchase.Attribute.promotionalOfferId:
                let text = try string(bytes, value)
                purchase.promotionalOfferId = text.isEmpty ? nil : text
            default: continue
            }
        }
        guard !purchase.transactionId.isEmpty || !purchase.productId.isEmpty else {
            throw ASN1Error("in-app purchase receipt has neither a transaction id nor a product id")
        }
        if !originalSeen || purchase.originalTransactionId.isEmpty { purchase.originalTransactionId = purchase.transactionId }
        return purchase
    }

    /// The SET's attributes (the first element of `bytes`; what follows it is ignored). The value
    /// of each is the OCTET STRING's content, itself one element. Every attribute is read before
    /// any is checked, as the children of the SET always were.
    private static func attributes(_ bytes: ASN1Cursor, depth: Int) throws(ASN1Error) -> [(Int64, Range<Int>)] {
        var reader = bytes
        let set = try reader.next(depth: depth)
        guard set.isUniversal(ASN1Element.set), set.constructed else { throw ASN1Error("receipt payload is not an ASN.1 SET") }
        var children = ASN1Cursor(bytes.bytes, set.content)
        var spans: [ASN1Span] = []
        while !children.isAtEnd { spans.append(try children.next(depth: depth + 1)) }
        var result: [(Int64, Range<Int>)] = []
        result.reserveCapacity(spans.count)
        for attribute in spans {
            guard attribute.isUniversal(ASN1Element.sequence) else { throw ASN1Error("receipt attribute is not a SEQUENCE") }
            let (type, value) = try typeAndValue(of: attribute, in: bytes, depth: depth + 1)
            result.append((try bytes.integerValue(type), value.content))
        }
        return result
    }

    /// Fields 0 and 2 of an attribute, every field read (and checked) in order.
    private static func typeAndValue(of attribute: ASN1Span, in bytes: ASN1Cursor, depth: Int) throws(ASN1Error) -> (ASN1Span, ASN1Span) {
        guard attribute.constructed else { throw ASN1Error("expected a constructed element") }
        var fields = ASN1Cursor(bytes.bytes, attribute.content)
        var type: ASN1Span?, value: ASN1Span?
        var count = 0
        while !fields.isAtEnd {
            let field = try fields.next(depth: depth + 1)
            if count == 0 { type = field } else if count == 2 { value = field }
            count += 1
        }
        guard let type, let value, value.isUniversal(ASN1Element.octetString), !value.constructed else {
            throw ASN1Error("receipt attribute is not (type, version, OCTET STRING value)")
        }
        return (type, value)
    }

    /// The first element of an attribute's value (what follows it is ignored).
    private static func element(_ bytes: ASN1Cursor, _ value: Range<Int>) throws(ASN1Error) -> ASN1Span {
        var reader = ASN1Cursor(bytes.bytes, value)
        return try reader.next(depth: ASN1Reader.maxDepth - 2)
    }

    private static func string(_ bytes: ASN1Cursor, _ value: Range<Int>) throws(ASN1Error) -> String {
        try bytes.stringValue(element(bytes, value))
    }

    private static func integer(_ bytes: ASN1Cursor, _ value: Range<Int>) throws(ASN1Error) -> Int64 {
        try bytes.integerValue(element(bytes, value))
    }

    /// An IA5String RFC 3339 date; empty means absent (Apple leaves some dates empty).
    private static func date(_ bytes: ASN1Cursor, _ value: Range<Int>) throws(ASN1Error) -> Int64? {
        let text = try string(bytes, value)
        if text.isEmpty { return nil }
        guard let ms = RFC3339.milliseconds(text) else { throw ASN1Error("receipt date \"\(text)\" is not RFC 3339") }
        return ms
    }
}

/// RFC 3339 timestamps as receipts write them: `2023-10-19T01:18:54Z`, with optional fraction and
/// a `Z`, `±HH:MM` or `±HHMM` offset (Xcode receipts carry local offsets).
public enum RFC3339 {
    public static func milliseconds(_ text: String) -> Int64? {
        let c = Array(text.utf8)
        guard c.count >= 19 else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard i < c.count, c[i] >= 48, c[i] <= 57 else { return nil }
                value = value * 10 + Int(c[i] - 48)
            }
            return value
        }
        guard let year = number(0..<4), c[4] == UInt8(ascii: "-"), let month = number(5..<7), c[7] == UInt8(ascii: "-"),
              let day = number(8..<10), c[10] == UInt8(ascii: "T") || c[10] == UInt8(ascii: " "),
              let hour = number(11..<13), c[13] == UInt8(ascii: ":"), let minute = number(14..<16),
              c[16] == UInt8(ascii: ":"), let second = number(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60 else { return nil }
        var index = 19
        var fractionMs = 0
        if index < c.count, c[index] == UInt8(ascii: ".") {
            index += 1
            var digits = 0
            while index < c.count, c[index] >= 48, c[index] <= 57 {
                if digits < 3 { fractionMs = fractionMs * 10 + Int(c[index] - 48) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            for _ in min(digits, 3)..<3 { fractionMs *= 10 }
        }
        var offsetSeconds = 0
        if index < c.count {
            switch c[index] {
            case UInt8(ascii: "Z"), UInt8(ascii: "z"):
                index += 1
            case UInt8(ascii: "+"), UInt8(ascii: "-"):
                let sign = c[index] == UInt8(ascii: "-") ? -1 : 1
                index += 1
                guard let hours = number(index..<(index + 2)) else { return nil }
                index += 2
                if index < c.count, c[index] == UInt8(ascii: ":") { index += 1 }
                guard let minutes = number(index..<(index + 2)), hours < 24, minutes < 60 else { return nil }
                index += 2
                offsetSeconds = sign * (hours * 3600 + minutes * 60)
            default:
                return nil
            }
        }
        guard index == c.count else { return nil }
        let days = CivilDate.days(year: Int64(year), month: Int64(month), day: Int64(day))
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetSeconds)
        return seconds * 1000 + Int64(fractionMs)
    }

    public static func format(ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: TimeInterval(ms) / 1000)
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }
}
