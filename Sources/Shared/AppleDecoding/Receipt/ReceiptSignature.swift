import Crypto
import Foundation
import Synchronization

/// The parts of a PKCS#7 SignedData app receipt that verification needs, read with our own ASN.1
/// reader instead of OpenSSL's CMS decoder: OpenSSL 3.0 decodes every embedded certificate's key
/// through its provider machinery (~0.1 ms and a dozen lock round trips each), and a receipt
/// carries three certificates that are the same in millions of receipts. So the signer's chain is
/// verified by OpenSSL once and cached with its validity window; each receipt then costs one
/// digest and one RSA (or ECDSA) verification. Anything outside the shape Apple produces (several
/// signers, unknown algorithms, BER signed attributes, unmatched signer) is `nil`, and the caller
/// falls back to OpenSSL's full CMS_verify.
struct SignedReceiptMessage {
    let content: [UInt8]
    /// DER of every embedded certificate, in order.
    let certificates: [[UInt8]]
    /// Index into `certificates` of the signer.
    let signerIndex: Int
    let digest: DigestAlgorithm
    /// What the signature covers: the content, or the DER signed attributes (re-tagged as SET).
    let signedBytes: [UInt8]
    /// messageDigest attribute, checked against the content's digest.
    let messageDigest: [UInt8]?
    let signature: [UInt8]

    static let oidSignedData: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]
    static let oidData: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01]
    static let oidContentType: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x03]
    static let oidMessageDigest: [UInt8] = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x04]
    static let digestOIDs: [[UInt8]: DigestAlgorithm] = [
        [0x2B, 0x0E, 0x03, 0x02, 0x1A]: .sha1,
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]: .sha256,
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02]: .sha384,
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03]: .sha512,
    ]
    /// Signature algorithms whose digest must agree with the SignerInfo's digest algorithm.
    static let signatureOIDs: [[UInt8]: DigestAlgorithm?] = [
        [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]: nil,            // rsaEncryption
        [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05]: .sha1,          // sha1WithRSAEncryption
        [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B]: .sha256,        // sha256WithRSAEncryption
        [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0C]: .sha384,
        [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0D]: .sha512,
        [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02]: .sha256,              // ecdsa-with-SHA256
        [0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x03]: .sha384,
    ]

    static func parse(_ der: [UInt8]) -> SignedReceiptMessage? {
        try? read(der)
    }

    private static func read(_ der: [UInt8]) throws(ASN1Error) -> SignedReceiptMessage? {
        var reader = ASN1Reader(der[...])
        let contentInfo = try reader.next()
        guard reader.isAtEnd, contentInfo.isUniversal(ASN1Element.sequence) else { return nil }
        let info = try ASN1Reader.children(of: contentInfo)
        guard info.count == 2, isObjectIdentifier(info[0]), Array(info[0].content) == oidSignedData,
              info[1].tagClass == 2, info[1].tagNumber == 0 else { return nil }
        let explicit = try ASN1Reader.children(of: info[1])
        guard explicit.count == 1, explicit[0].isUniversal(ASN1Element.sequence) else { return nil }
        let signedData = try ASN1Reader.children(of: explicit[0], depth: 1)
        guard signedData.count >= 4, signedData[0].isUniversal(ASN1Element.integer), !signedData[0].constructed,
              signedData[0].content.count == 1, signedData[1].isUniversal(ASN1Element.set), signedData[1].constructed else { return nil }
        // digestAlgorithms: CMS_verify sets up a digest for each, so each must be one we know; it then
        // finds the signer's digest among them ("no matching digest" when it is not listed).
        var listed: [DigestAlgorithm] = []
        for algorithmIdentifier in try ASN1Reader.children(of: signedData[1], depth: 2) {
            guard let digest = try algorithm(algorithmIdentifier).flatMap({ digestOIDs[$0] }) else { return nil }
            listed.append(digest)
        }
        // encapContentInfo: data, with the content embedded (OCTET STRING, possibly BER chunks).
        guard signedData[2].isUniversal(ASN1Element.sequence) else { return nil }
        let encap = try ASN1Reader.children(of: signedData[2], depth: 2)
        guard encap.count == 2, isObjectIdentifier(encap[0]), Array(encap[0].content) == oidData,
              encap[1].tagClass == 2, encap[1].tagNumber == 0 else { return nil }
        let wrapped = try ASN1Reader.children(of: encap[1], depth: 3)
        guard wrapped.count == 1, let content = try octets(wrapped[0], depth: 4) else { return nil }
        // certificates [0] IMPLICIT, then optional crls [1], then signerInfos SET.
        var index = 3
        var certificates: [[UInt8]] = []
        if signedData[index].tagClass == 2, signedData[index].tagNumber == 0 {
            for certificate in try ASN1Reader.children(of: signedData[index], depth: 2) {
                guard certificate.isUniversal(ASN1Element.sequence) else { return nil }
                certificates.append(Array(certificate.encoded))
            }
            index += 1
        }
        if index < signedData.count, signedData[index].tagClass == 2, signedData[index].tagNumber == 1 { index += 1 }
        guard index == signedData.count - 1, signedData[index].isUniversal(ASN1Element.set) else { return nil }
        let signers = try ASN1Reader.children(of: signedData[index], depth: 2)
        guard signers.count == 1, let message = try signerInfo(signers[0], content: content, certificates: certificates),
              listed.contains(message.digest) else { return nil }
        return message
    }

    private static func signerInfo(_ element: ASN1Element, content: [UInt8], certificates: [[UInt8]]) throws(ASN1Error) -> SignedReceiptMessage? {
        guard element.isUniversal(ASN1Element.sequence) else { return nil }
        let fields = try ASN1Reader.children(of: element, depth: 3)
        guard fields.count >= 5, fields[0].isUniversal(ASN1Element.integer), !fields[0].constructed, fields[0].content.count == 1,
              fields[1].isUniversal(ASN1Element.sequence) else { return nil }
        // sid: IssuerAndSerialNumber (version 1); SubjectKeyIdentifier is left to OpenSSL.
        let sid = try ASN1Reader.children(of: fields[1], depth: 4)
        guard sid.count == 2, sid[0].isUniversal(ASN1Element.sequence), sid[1].isUniversal(ASN1Element.integer), !sid[1].constructed else { return nil }
        var signerIndex: Int?
        for (candidate, der) in certificates.enumerated() {
            guard let (issuer, serial) = try issuerAndSerial(der) else { continue }
            if issuer.elementsEqual(sid[0].encoded), serial.elementsEqual(sid[1].content) {
                signerIndex = candidate
                break
            }
        }
        guard let signerIndex else { return nil }
        guard let digest = try algorithm(fields[2]).flatMap({ digestOIDs[$0] }) else { return nil }
        var position = 3
        var signedBytes = content
        var messageDigest: [UInt8]?
        if fields[position].tagClass == 2, fields[position].tagNumber == 0 {
            let attributes = fields[position]
            // DER is required here (the signature covers its exact encoding); indefinite → OpenSSL.
            guard attributes.encoded.count > 1, attributes.encoded[attributes.encoded.startIndex + 1] != 0x80 else { return nil }
            var contentTypeSeen = false
            for attribute in try ASN1Reader.children(of: attributes, depth: 4) {
                let parts = try ASN1Reader.children(of: attribute, depth: 5)
                guard parts.count == 2, isObjectIdentifier(parts[0]), parts[1].isUniversal(ASN1Element.set) else { return nil }
                let values = try ASN1Reader.children(of: parts[1], depth: 6)
                if Array(parts[0].content) == oidMessageDigest {
                    guard values.count == 1, values[0].isUniversal(ASN1Element.octetString), messageDigest == nil else { return nil }
                    messageDigest = Array(values[0].content)
                } else if Array(parts[0].content) == oidContentType {
                    guard values.count == 1, values[0].isUniversal(6), Array(values[0].content) == oidData else { return nil }
                    contentTypeSeen = true
                }
            }
            guard messageDigest != nil, contentTypeSeen else { return nil }
            signedBytes = [0x31] + Array(attributes.encoded.dropFirst())
            position += 1
        }
        guard position + 1 < fields.count, let signatureOID = try algorithm(fields[position]),
              let implied = signatureOIDs[signatureOID], implied == nil || implied == digest,
              fields[position + 1].isUniversal(ASN1Element.octetString), !fields[position + 1].constructed else { return nil }
        return SignedReceiptMessage(content: content, certificates: certificates, signerIndex: signerIndex, digest: digest,
                                    signedBytes: signedBytes, messageDigest: messageDigest,
                                    signature: Array(fields[position + 1].content))
    }

    /// An OCTET STRING's bytes, primitive or BER-constructed from chunks.
    private static func octets(_ element: ASN1Element, depth: Int) throws(ASN1Error) -> [UInt8]? {
        guard element.tagClass == 0, element.tagNumber == ASN1Element.octetString else { return nil }
        if !element.constructed { return Array(element.content) }
        var result: [UInt8] = []
        for chunk in try ASN1Reader.children(of: element, depth: depth) {
            guard let bytes = try octets(chunk, depth: depth + 1) else { return nil }
            result += bytes
        }
        return result
    }

    /// An AlgorithmIdentifier's OID, when it is `SEQUENCE { OID [, NULL] }` with a well-formed OID.
    private static func algorithm(_ element: ASN1Element) throws(ASN1Error) -> [UInt8]? {
        guard element.isUniversal(ASN1Element.sequence), element.constructed else { return nil }
        let parts = try ASN1Reader.children(of: element, depth: 5)
        guard let first = parts.first, isObjectIdentifier(first), parts.count <= 2 else { return nil }
        if parts.count == 2 {
            guard parts[1].isUniversal(5), !parts[1].constructed, parts[1].content.isEmpty else { return nil }
        }
        return Array(first.content)
    }

    /// DER OBJECT IDENTIFIER: primitive, non-empty, minimal subidentifiers, last octet final.
    private static func isObjectIdentifier(_ element: ASN1Element) -> Bool {
        guard element.isUniversal(6), !element.constructed, let last = element.content.last, last & 0x80 == 0 else { return false }
        var startOfSubidentifier = true
        for byte in element.content {
            if startOfSubidentifier, byte == 0x80 { return false }
            startOfSubidentifier = byte & 0x80 == 0
        }
        return true
    }

    /// The issuer Name (as encoded) and serial number (content octets) of a DER certificate.
    static func issuerAndSerial(_ der: [UInt8]) throws(ASN1Error) -> (ArraySlice<UInt8>, ArraySlice<UInt8>)? {
        var reader = ASN1Reader(der[...])
        let certificate = try reader.next(depth: 4)
        let parts = try ASN1Reader.children(of: certificate, depth: 4)
        guard let tbs = parts.first, tbs.isUniversal(ASN1Element.sequence) else { return nil }
        var fields = ASN1Reader(tbs.content)
        var first = try fields.next(depth: 6)
        if first.tagClass == 2, first.tagNumber == 0 { first = try fields.next(depth: 6) }  // [0] version
        guard first.isUniversal(ASN1Element.integer) else { return nil }
        _ = try fields.next(depth: 6)  // signature algorithm
        let issuer = try fields.next(depth: 6)
        guard issuer.isUniversal(ASN1Element.sequence) else { return nil }
        return (issuer.encoded, first.content)
    }
}

/// Signer chains that verified against the trust store, with the window in which they stay valid.
/// Sound for the same reason as the JWS chain cache: with fixed roots and no revocation checks the
/// verdict depends on the time only through the certificates' validity periods.
final class ReceiptSignerCache: Sendable {
    struct Key: Hashable, Sendable {
        let certificates: [[UInt8]]
        let signerIndex: Int
        let strict: Bool

        // Hash each certificate's length and last 32 bytes (its signature, distinct per certificate),
        // not ~4 KB of DER per receipt; equality compares every byte, as memory.
        func hash(into hasher: inout Hasher) {
            hasher.combine(signerIndex)
            hasher.combine(strict)
            for der in certificates {
                hasher.combine(der.count)
                der.suffix(32).withUnsafeBytes { hasher.combine(bytes: $0) }
            }
        }

        static func == (lhs: Key, rhs: Key) -> Bool {
            guard lhs.signerIndex == rhs.signerIndex, lhs.strict == rhs.strict, lhs.certificates.count == rhs.certificates.count else { return false }
            for (left, right) in zip(lhs.certificates, rhs.certificates) {
                guard left.count == right.count else { return false }
                let equal = left.withUnsafeBytes { l in right.withUnsafeBytes { r in l.count == 0 || memcmp(l.baseAddress!, r.baseAddress!, l.count) == 0 } }
                if !equal { return false }
            }
            return true
        }
    }

    private struct Entry: Sendable {
        let signer: X509Certificate
        let validFrom: Date
        let validUntil: Date
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let capacity = 64

    func lookup(_ key: Key, at date: Date) -> X509Certificate? {
        entries.withLock { entries in
            guard let entry = entries[key], entry.validFrom <= date, date < entry.validUntil else { return nil }
            return entry.signer
        }
    }

    func insert(_ key: Key, signer: X509Certificate, validFrom: Date, validUntil: Date) {
        entries.withLock { entries in
            if entries.count >= capacity, entries[key] == nil { entries.removeAll(keepingCapacity: true) }
            entries[key] = Entry(signer: signer, validFrom: validFrom, validUntil: validUntil)
        }
    }
}
