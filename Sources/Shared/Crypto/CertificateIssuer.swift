import COpenSSL
import Foundation

/// One relative distinguished name component, e.g. `("CN", "StoreLedger Test Root")`.
public struct NameComponent: Sendable, Hashable {
    public var field: String
    public var value: String

    public init(_ field: String, _ value: String) {
        self.field = field
        self.value = value
    }
}

/// What a certificate to issue says about itself.
public struct CertificateProfile: Sendable {
    public var subject: [NameComponent]
    public var serialNumber: UInt64
    public var notBefore: Date
    public var notAfter: Date
    /// basicConstraints CA:TRUE with keyCertSign, else a signing-only leaf (digitalSignature).
    public var isCA: Bool
    /// Marker extensions (value ASN.1 NULL, non-critical), as Apple marks its WWDR
    /// intermediate (`1.2.840.113635.100.6.2.1`) and receipt/JWS signing leaf (`…100.6.11.1`).
    public var markerExtensionOIDs: [String]

    public init(subject: [NameComponent], serialNumber: UInt64, notBefore: Date, notAfter: Date, isCA: Bool,
                markerExtensionOIDs: [String] = []) {
        self.subject = subject
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.isCA = isCA
        self.markerExtensionOIDs = markerExtensionOIDs
    }
}

/// A certificate together with its private key (test PKI, the local App Store simulator).
public struct IssuedCertificate: Sendable {
    public let certificate: X509Certificate
    public let key: P256PrivateKey

    public init(certificate: X509Certificate, key: P256PrivateKey) {
        self.certificate = certificate
        self.key = key
    }
}

/// Issues X.509 v3 certificates with EC P-256 keys and ECDSA-SHA256 signatures, carrying the
/// extensions RFC 5280 strict verification asks for (critical basicConstraints and keyUsage,
/// subject and authority key identifiers), so a generated chain passes `strict: true`.
/// For tests and the simulator only: production never issues certificates.
public enum CertificateIssuer {
    /// A self-signed root.
    public static func issueRoot(_ profile: CertificateProfile, key: P256PrivateKey) throws(CryptoError) -> IssuedCertificate {
        try withEVPKey(key) { pkey throws(CryptoError) in
            let certificate = try build(profile, subjectKey: pkey, issuer: nil, issuerKey: pkey)
            return IssuedCertificate(certificate: certificate, key: key)
        }
    }

    /// A certificate for `key`, signed by `issuer`.
    public static func issue(_ profile: CertificateProfile, key: P256PrivateKey, by issuer: IssuedCertificate) throws(CryptoError) -> IssuedCertificate {
        try withEVPKey(key) { subjectKey throws(CryptoError) in
            try withEVPKey(issuer.key) { issuerKey throws(CryptoError) in
                let certificate = try build(profile, subjectKey: subjectKey, issuer: issuer.certificate, issuerKey: issuerKey)
                return IssuedCertificate(certificate: certificate, key: key)
            }
        }
    }

    private static func build(_ profile: CertificateProfile, subjectKey: OpaquePointer, issuer: X509Certificate?,
                              issuerKey: OpaquePointer) throws(CryptoError) -> X509Certificate {
        guard let x509 = X509_new() else { throw .drainingQueue("allocate certificate") }
        defer { X509_free(x509) }
        guard X509_set_version(x509, 2) == 1,  // v3
              ASN1_INTEGER_set_uint64(X509_get_serialNumber(x509), profile.serialNumber) == 1,
              setTime(profile.notBefore, { X509_set1_notBefore(x509, $0) }),
              setTime(profile.notAfter, { X509_set1_notAfter(x509, $0) }),
              X509_set_pubkey(x509, subjectKey) == 1 else {
            throw .drainingQueue("set certificate fields")
        }
        try setSubject(profile.subject, on: x509)
        let issuerName = issuer.map { X509_get_subject_name($0.x509) } ?? X509_get_subject_name(x509)
        guard X509_set_issuer_name(x509, issuerName) == 1 else { throw .drainingQueue("set issuer name") }

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.x509 ?? x509, x509, nil, nil, 0)
        var extensions: [(Int32, String)] = [
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ]
        extensions += profile.isCA
            ? [(NID_basic_constraints, "critical,CA:TRUE"), (NID_key_usage, "critical,keyCertSign,cRLSign")]
            : [(NID_basic_constraints, "critical,CA:FALSE"), (NID_key_usage, "critical,digitalSignature")]
        for (nid, value) in extensions {
            // The root's authority key id is its own subject key id, which must exist first.
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                throw .drainingQueue("build certificate extension \(value)")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw .drainingQueue("add certificate extension") }
        }
        for oid in profile.markerExtensionOIDs { try addMarker(oid: oid, to: x509) }

        guard X509_sign(x509, issuerKey, EVP_sha256()) > 0 else { throw .drainingQueue("sign certificate") }
        guard let der = OpenSSLBridge.encodeDER({ i2d_X509(x509, $0) }) else { throw .drainingQueue("encode certificate") }
        return try X509Certificate(der: der)
    }

    private static func setTime(_ date: Date, _ set: (UnsafePointer<ASN1_TIME>) -> Int32) -> Bool {
        guard let time = ASN1_TIME_set(nil, OpenSSLBridge.timeT(date)) else { return false }
        defer { ASN1_STRING_free(time) }
        return set(time) == 1
    }

    private static func setSubject(_ components: [NameComponent], on x509: OpaquePointer) throws(CryptoError) {
        guard let name = X509_NAME_new() else { throw .drainingQueue("allocate name") }
        defer { X509_NAME_free(name) }
        for component in components {
            let bytes = Array(component.value.utf8)
            guard X509_NAME_add_entry_by_txt(name, component.field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1 else {
                throw .drainingQueue("add name component \(component.field)")
            }
        }
        guard X509_set_subject_name(x509, name) == 1 else { throw .drainingQueue("set subject name") }
    }

    /// An extension whose presence is the message (Apple's certificate-type markers).
    private static func addMarker(oid: String, to x509: OpaquePointer) throws(CryptoError) {
        guard let object = OBJ_txt2obj(oid, 1) else { throw .drainingQueue("parse extension OID \(oid)") }
        defer { ASN1_OBJECT_free(object) }
        guard let value = ASN1_OCTET_STRING_new() else { throw .drainingQueue("allocate extension value") }
        defer { ASN1_OCTET_STRING_free(value) }
        let asn1Null: [UInt8] = [0x05, 0x00]
        guard ASN1_OCTET_STRING_set(value, asn1Null, Int32(asn1Null.count)) == 1,
              let ext = X509_EXTENSION_create_by_OBJ(nil, object, 0, value) else {
            throw .drainingQueue("build extension \(oid)")
        }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x509, ext, -1) == 1 else { throw .drainingQueue("add extension \(oid)") }
    }
}

/// Runs `body` with an EVP_PKEY re-imported from the key's PKCS#8 form. `P256PrivateKey` keeps
/// its EVP_PKEY private; the DER round trip (a few µs) keeps that encapsulation intact.
func withEVPKey<R>(_ key: P256PrivateKey, _ body: (OpaquePointer) throws(CryptoError) -> R) throws(CryptoError) -> R {
    let pkey = try importEVPKey(key)
    defer { EVP_PKEY_free(pkey) }
    return try body(pkey)
}

/// An owned EVP_PKEY copy of `key`; the caller frees it.
func importEVPKey(_ key: P256PrivateKey) throws(CryptoError) -> OpaquePointer {
    var der = try key.pkcs8DER()
    defer { der.withUnsafeMutableBufferPointer { $0.update(repeating: 0) } }  // wipe the copy
    guard let pkey = OpenSSLBridge.decodeDER(der, free: { EVP_PKEY_free($0) }, { d2i_AutoPrivateKey(nil, $0, $1) }) else {
        throw .drainingQueue("import private key")
    }
    return pkey
}

/// A root → intermediate → leaf chain shaped like Apple's: the intermediate carries
/// `1.2.840.113635.100.6.2.1` (WWDR), the leaf `1.2.840.113635.100.6.11.1` (App Store signing).
/// Both JWS (`x5c`) and PKCS#7 receipts can be signed with the leaf.
public struct TestCertificateChain: Sendable {
    public static let intermediateMarkerOID = "1.2.840.113635.100.6.2.1"
    public static let leafMarkerOID = "1.2.840.113635.100.6.11.1"

    public let root: IssuedCertificate
    public let intermediate: IssuedCertificate
    public let leaf: IssuedCertificate

    public init(root: IssuedCertificate, intermediate: IssuedCertificate, leaf: IssuedCertificate) {
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
    }

    /// Fresh keys and certificates valid from `notBefore` to `notAfter`.
    public static func generate(name: String = "StoreLedger Simulator", notBefore: Date, notAfter: Date) throws(CryptoError) -> TestCertificateChain {
        func profile(_ role: String, serial: UInt64, ca: Bool, markers: [String]) -> CertificateProfile {
            CertificateProfile(subject: [NameComponent("C", "US"), NameComponent("O", name), NameComponent("CN", "\(name) \(role)")],
                               serialNumber: serial, notBefore: notBefore, notAfter: notAfter, isCA: ca,
                               markerExtensionOIDs: markers)
        }
        let root = try CertificateIssuer.issueRoot(profile("Root CA", serial: 1, ca: true, markers: []),
                                                   key: try P256PrivateKey.generate())
        let intermediate = try CertificateIssuer.issue(profile("Intermediate CA", serial: 2, ca: true, markers: [intermediateMarkerOID]),
                                                       key: try P256PrivateKey.generate(), by: root)
        let leaf = try CertificateIssuer.issue(profile("Signing", serial: 3, ca: false, markers: [leafMarkerOID]),
                                               key: try P256PrivateKey.generate(), by: intermediate)
        return TestCertificateChain(root: root, intermediate: intermediate, leaf: leaf)
    }

    /// Leaf, intermediate, root, as Apple puts them in a JWS `x5c` header.
    public var certificates: [X509Certificate] { [leaf.certificate, intermediate.certificate, root.certificate] }
    /// The `x5c` header value: standard base64 DER, leaf first.
    public var x5c: [String] { certificates.map { Base64.encode($0.der) } }
}

extension X509Certificate {
    /// `-----BEGIN CERTIFICATE-----` text, 64-column base64.
    public var pem: String {
        let base64 = Base64.encode(der)
        var lines = ["-----BEGIN CERTIFICATE-----"]
        var index = base64.startIndex
        while index < base64.endIndex {
            let end = base64.index(index, offsetBy: 64, limitedBy: base64.endIndex) ?? base64.endIndex
            lines.append(String(base64[index..<end]))
            index = end
        }
        lines.append("-----END CERTIFICATE-----")
        return lines.joined(separator: "\n") + "\n"
    }
}
