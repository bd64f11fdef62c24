import COpenSSL
import Foundation

/// Signs bytes as a PKCS#7/CMS SignedData with the content attached and the signer's chain
/// embedded, the shape of an App Store app receipt. For the simulator and tests.
// @unchecked Sendable: the EVP_PKEY and certificates are owned, never mutated after init,
// and only read by CMS_sign (each call builds its own CMS structure and stack).
public final class PKCS7Signer: @unchecked Sendable {
    private let pkey: OpaquePointer
    public let signer: X509Certificate
    /// Extra certificates embedded after the signer (intermediate, root), in order.
    public let chain: [X509Certificate]

    public init(signer: X509Certificate, key: P256PrivateKey, chain: [X509Certificate]) throws(CryptoError) {
        guard key.publicKey == signer.publicKey else {
            throw CryptoError("the private key does not belong to the signer certificate")
        }
        self.pkey = try importEVPKey(key)
        self.signer = signer
        self.chain = chain
    }

    /// Signs with `chain.leaf`, embedding intermediate and root.
    public convenience init(chain: TestCertificateChain) throws(CryptoError) {
        try self.init(signer: chain.leaf.certificate, key: chain.leaf.key,
                      chain: [chain.intermediate.certificate, chain.root.certificate])
    }

    deinit { EVP_PKEY_free(pkey) }

    /// DER SignedData (content type id-data) over `content`, SHA-256 + ECDSA.
    public func sign(_ content: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let stack = storeledger_sk_X509_new_null() else { throw .drainingQueue("allocate certificate stack") }
        // Shallow stack: CMS_sign up-refs what it embeds; our certificates stay owned by `chain`.
        defer { storeledger_sk_X509_free(stack) }
        for certificate in chain where storeledger_sk_X509_push(stack, certificate.x509) <= 0 {
            throw .drainingQueue("build certificate stack")
        }
        let der: [UInt8]? = withExtendedLifetime((chain, signer)) {
            OpenSSLBridge.withReadBIO(content) { bio -> [UInt8]? in
                // CMS_BINARY: bytes, not MIME text; no S/MIME capabilities attribute (receipts have none).
                guard let cms = CMS_sign(signer.x509, pkey, stack, bio, UInt32(CMS_BINARY | CMS_NOSMIMECAP)) else { return nil }
                defer { CMS_ContentInfo_free(cms) }
                return OpenSSLBridge.encodeDER { i2d_CMS_ContentInfo(cms, $0) }
            }
        }
        guard let der else { throw .drainingQueue("sign PKCS#7 SignedData") }
        return der
    }
}
