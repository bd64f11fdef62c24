import COpenSSL
import Foundation
import Synchronization

/// A PKCS#7/CMS SignedData with embedded content: an App Store app receipt.
///
/// Parse first to read `content` (the receipt payload, which holds the creation date), then
/// `verify(...)` at that date: old receipts are signed by certificates that have since expired.
/// Accepts DER and BER with indefinite lengths (Xcode and older device receipts).
public final class PKCS7SignedData: Sendable {
    /// The signed payload: the inner bytes of the eContent OCTET STRING.
    public let content: [UInt8]
    /// Certificates embedded in the message, in the order they appear (untrusted).
    public let certificates: [X509Certificate]
    /// CMS_verify records the signer certificate inside the structure, so verifications of
    /// one object are serialised.
    private let message: Mutex<CMSHandle>

    // @unchecked Sendable: the pointer is owned by this handle and only used inside `message.withLock`.
    private struct CMSHandle: ~Copyable, @unchecked Sendable {
        let pointer: OpaquePointer
        deinit { CMS_ContentInfo_free(pointer) }
    }

    private init(content: [UInt8], certificates: [X509Certificate], taking cms: OpaquePointer) {
        self.content = content
        self.certificates = certificates
        self.message = Mutex(CMSHandle(pointer: cms))
    }

    public static func parse(der: [UInt8]) throws(CryptoError) -> PKCS7SignedData {
        guard let cms = OpenSSLBridge.decodeDER(der, free: { CMS_ContentInfo_free($0) }, { d2i_CMS_ContentInfo(nil, $0, $1) }) else {
            throw .drainingQueue("parse PKCS#7 DER/BER")
        }
        do {
            let content = try embeddedContent(cms)
            let certificates = try embeddedCertificates(cms)
            OpenSSLErrorQueue.clear()
            return PKCS7SignedData(content: content, certificates: certificates, taking: cms)
        } catch {
            CMS_ContentInfo_free(cms)
            throw error
        }
    }

    /// From base64 text (receipt-data as apps send it), ignoring whitespace.
    public static func parse(base64: some StringProtocol) throws(CryptoError) -> PKCS7SignedData {
        guard let der = Base64.decode(base64) else { throw CryptoError("PKCS#7 receipt is not valid base64") }
        return try parse(der: der)
    }

    /// Checks the signature over `content` and the signer's chain to `trustStore`'s roots at
    /// `date`. Returns the signer certificate when valid. `strict` adds RFC 5280 strict checks;
    /// every receipt in the fixtures (Apple G1/G5 chains and the Xcode StoreKit cert) passes them.
    public func verify(trustStore: TrustStore, at date: Date, strict: Bool = true) -> VerificationResult<X509Certificate> {
        defer { OpenSSLErrorQueue.clear() }
        let store: OpaquePointer
        do {
            store = try trustStore.makeConfiguredStore(VerificationPolicy(time: date, strict: strict))
        } catch {
            return .invalid(reason: error.description)
        }
        defer { X509_STORE_free(store) }
        return message.withLock { handle -> VerificationResult<X509Certificate> in
            // CMS_BINARY: the content is bytes, not MIME text to canonicalise.
            guard CMS_verify(handle.pointer, nil, store, nil, nil, UInt32(CMS_BINARY)) == 1 else {
                let errors = OpenSSLErrorQueue.drain()
                return .invalid(reason: errors.isEmpty ? "PKCS#7 verification failed" : errors.joined(separator: "; "))
            }
            return signer(handle.pointer).map { .valid($0) } ?? .invalid(reason: "verified, but the signer certificate is not embedded")
        }
    }

    /// Convenience for one-off checks; prefer a shared `TrustStore` on hot paths.
    public func verify(roots: [X509Certificate], at date: Date, strict: Bool = true) -> VerificationResult<X509Certificate> {
        do {
            return verify(trustStore: try TrustStore(roots: roots), at: date, strict: strict)
        } catch {
            return .invalid(reason: error.description)
        }
    }

    private func signer(_ cms: OpaquePointer) -> X509Certificate? {
        guard let signers = CMS_get0_signers(cms) else { return nil }
        defer { storeledger_sk_X509_free(signers) }
        guard storeledger_sk_X509_num(signers) >= 1, let first = storeledger_sk_X509_value(signers, 0) else { return nil }
        return certificates.first { X509_cmp($0.x509, first) == 0 }
    }

    private static func embeddedContent(_ cms: OpaquePointer) throws(CryptoError) -> [UInt8] {
        guard let type = CMS_get0_type(cms), OBJ_obj2nid(type) == NID_pkcs7_signed else {
            throw CryptoError("PKCS#7 message is not SignedData")
        }
        guard let contentType = CMS_get0_eContentType(cms), OBJ_obj2nid(contentType) == NID_pkcs7_data else {
            throw CryptoError("PKCS#7 SignedData does not carry plain data content")
        }
        guard let slot = CMS_get0_content(cms), let octets = slot.pointee else {
            throw CryptoError("PKCS#7 SignedData has no embedded content (detached signature)")
        }
        let length = Int(ASN1_STRING_length(octets))
        guard length > 0, let data = ASN1_STRING_get0_data(octets) else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: length))
    }

    private static func embeddedCertificates(_ cms: OpaquePointer) throws(CryptoError) -> [X509Certificate] {
        guard let stack = CMS_get1_certs(cms) else { return [] }
        defer { storeledger_sk_X509_pop_free(stack) }
        var certificates: [X509Certificate] = []
        for index in 0..<storeledger_sk_X509_num(stack) {
            guard let x509 = storeledger_sk_X509_value(stack, index) else { continue }
            certificates.append(try X509Certificate.retaining(x509))
        }
        return certificates
    }
}
