import COpenSSL
import Foundation

/// A parsed X.509 certificate. All fields are read once at init, so the object is immutable.
// @unchecked Sendable: the X509 is owned and only read after init; init forces OpenSSL's
// lazily cached extension data (X509_get_extension_flags), so later reads do not write.
public final class X509Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    let x509: OpaquePointer
    /// The DER encoding exactly as received.
    public let der: [UInt8]
    /// One line, e.g. `C = US, O = Apple Inc., CN = Apple Root CA - G3`.
    public let subjectSummary: String
    public let issuerSummary: String
    /// Serial number magnitude in upper-case hex, e.g. `0B` or `B51CE402E21F9A5B`.
    public let serialHex: String
    public let notBefore: Date
    public let notAfter: Date
    public let publicKey: PublicKey
    /// basicConstraints CA:TRUE.
    public let isCA: Bool

    /// Takes ownership of `x509` (freed on failure too).
    private init(taking x509: OpaquePointer, der: [UInt8]) throws(CryptoError) {
        func fail(_ message: String) -> CryptoError {
            X509_free(x509)
            return .drainingQueue(message)
        }
        let flags = X509_get_extension_flags(x509)
        guard let notBefore = OpenSSLBridge.date(X509_get0_notBefore(x509)),
              let notAfter = OpenSSLBridge.date(X509_get0_notAfter(x509)) else {
            throw fail("read certificate validity dates")
        }
        // The SPKI straight from the certificate's ASN.1 (no provider encoder round trip).
        guard let spki = OpenSSLBridge.encodeDER({ i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x509), $0) }),
              let key = X509_get0_pubkey(x509), EVP_PKEY_up_ref(key) == 1 else {
            throw fail("read certificate public key")
        }
        do {
            publicKey = try PublicKey(taking: key, spkiDER: spki)
        } catch {
            X509_free(x509)
            throw error
        }
        self.x509 = x509
        self.der = der
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.isCA = flags & UInt32(EXFLAG_CA) != 0
        self.subjectSummary = Self.oneLine(X509_get_subject_name(x509))
        self.issuerSummary = Self.oneLine(X509_get_issuer_name(x509))
        self.serialHex = Self.serialHex(X509_get0_serialNumber(x509))
        OpenSSLErrorQueue.clear()
    }

    /// From DER. Trailing bytes after the certificate are rejected.
    public convenience init(der: [UInt8]) throws(CryptoError) {
        guard let x509 = OpenSSLBridge.decodeDER(der, free: { X509_free($0) }, { d2i_X509(nil, $0, $1) }) else {
            throw .drainingQueue("parse X.509 certificate DER")
        }
        try self.init(taking: x509, der: der)
    }

    /// From base64 DER, as in a JWS `x5c` entry or a `.cer` file's base64 text.
    public convenience init(base64DER: some StringProtocol) throws(CryptoError) {
        guard let der = Base64.decode(base64DER) else { throw CryptoError("certificate is not valid base64") }
        try self.init(der: der)
    }

    /// From the first `BEGIN CERTIFICATE` block of a PEM text.
    public convenience init(pem: String) throws(CryptoError) {
        guard let first = try Self.certificates(pem: pem).first else {
            throw CryptoError("no PEM certificate found")
        }
        try self.init(der: first.der)
    }

    /// Every certificate in a PEM bundle, in order.
    public static func certificates(pem: String) throws(CryptoError) -> [X509Certificate] {
        var parsed: [OpaquePointer] = []
        _ = OpenSSLBridge.withReadBIO(Array(pem.utf8)) { bio -> Bool in
            while let x509 = PEM_read_bio_X509(bio, nil, { _, _, _, _ in -1 }, nil) { parsed.append(x509) }
            return true
        }
        // The loop ends with a "no start line" error at end of input: expected.
        OpenSSLErrorQueue.clear()
        var certificates: [X509Certificate] = []
        for (index, x509) in parsed.enumerated() {
            guard let der = OpenSSLBridge.encodeDER({ i2d_X509(x509, $0) }) else {
                parsed[index...].forEach { X509_free($0) }
                throw .drainingQueue("re-encode PEM certificate")
            }
            do {
                certificates.append(try X509Certificate(taking: x509, der: der))
            } catch {
                parsed[(index + 1)...].forEach { X509_free($0) }
                throw error
            }
        }
        return certificates
    }

    /// Wraps a certificate OpenSSL hands back (PKCS#7 bags); up-refs it.
    static func retaining(_ x509: OpaquePointer) throws(CryptoError) -> X509Certificate {
        guard let der = OpenSSLBridge.encodeDER({ i2d_X509(x509, $0) }) else {
            throw .drainingQueue("encode embedded certificate")
        }
        guard X509_up_ref(x509) == 1 else { throw .drainingQueue("retain embedded certificate") }
        return try X509Certificate(taking: x509, der: der)
    }

    deinit { X509_free(x509) }

    /// Whether the certificate carries an extension with this dotted OID (critical or not),
    /// e.g. Apple's `1.2.840.113635.100.6.11.1` (receipt-signing leaf) or `…100.6.2.1` (WWDR intermediate).
    /// An unparsable OID string is simply absent.
    public func hasExtension(oid: String) -> Bool {
        // no_name = 1: only dotted numbers, never a short/long name lookup.
        guard let object = OBJ_txt2obj(oid, 1) else {
            OpenSSLErrorQueue.clear()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(x509, object, -1) >= 0
    }

    public var sha256Fingerprint: [UInt8] { SHA256.hash(der) }
    /// Upper-case hex without separators, as SOURCES.md and Apple publish fingerprints.
    public var sha256FingerprintHex: String { OpenSSLBridge.hex(sha256Fingerprint) }

    /// Subject equals issuer (a root or a self-issued certificate).
    public var isSelfIssued: Bool { X509_NAME_cmp(X509_get_subject_name(x509), X509_get_issuer_name(x509)) == 0 }

    public func isValid(at date: Date) -> Bool { notBefore <= date && date <= notAfter }

    public static func == (lhs: X509Certificate, rhs: X509Certificate) -> Bool { lhs.der == rhs.der }
    public func hash(into hasher: inout Hasher) { hasher.combine(der) }

    public var description: String { "X509Certificate(\(subjectSummary), serial \(serialHex))" }

    private static func oneLine(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        let bytes = OpenSSLBridge.collectingBIO { bio in
            X509_NAME_print_ex(bio, name, 0, storeledger_XN_FLAG_ONELINE_UTF8()) >= 0
        }
        return bytes.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    private static func serialHex(_ serial: UnsafePointer<ASN1_INTEGER>?) -> String {
        guard let serial, let data = ASN1_STRING_get0_data(serial) else { return "" }
        let magnitude = UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(serial)))
        let sign = ASN1_STRING_type(serial) == V_ASN1_NEG_INTEGER ? "-" : ""
        return sign + (magnitude.isEmpty ? "00" : OpenSSLBridge.hex(magnitude))
    }
}
